/* The clock, read through the vDSO, and the other scheduler calls made as bare system
 * calls (see below for why not libc's wrappers). */
#include "os/os.h"

#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* libc's clock_gettime and sched_* wrappers lie in stretches of libc's text a program that
 * never calls them never maps, so calling them grew every process (tools/bench/results/);
 * the vDSO is mapped already, so its symbol is looked up once, here, in its ELF dynamic
 * symbol table (DT_HASH gives the table's length, so the walk is bounded). */
typedef int (*vdso_gettime_fn)(clockid_t, struct timespec *);
static _Atomic(vdso_gettime_fn) vdso_gettime;
static _Atomic int vdso_looked;

static vdso_gettime_fn vdso_lookup(void)
{
	const ElfW(Ehdr) *eh = (const void *)getauxval(AT_SYSINFO_EHDR);
	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
		return NULL;
	const ElfW(Phdr) *ph = (const void *)((const char *)eh + eh->e_phoff);
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t bias = 0;
	bool loaded = false;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && !loaded) {
			bias = (uintptr_t)eh + ph[i].p_offset - ph[i].p_vaddr;
			loaded = true;
		} else if (ph[i].p_type == PT_DYNAMIC) {
			dyn = (const void *)((const char *)eh + ph[i].p_offset);
		}
	}
	if (!dyn || !loaded)
		return NULL;
	const ElfW(Sym) *sym = NULL;
	const char *str = NULL;
	const uint32_t *hash = NULL;
	for (unsigned i = 0; dyn[i].d_tag != DT_NULL && i < 64; i++) {
		uintptr_t at = bias + dyn[i].d_un.d_ptr;
		if (dyn[i].d_tag == DT_SYMTAB)
			sym = (const void *)at;
		else if (dyn[i].d_tag == DT_STRTAB)
			str = (const char *)at;
		else if (dyn[i].d_tag == DT_HASH)
			hash = (const void *)at;
	}
	if (!sym || !str || !hash)
		return NULL;
	for (uint32_t i = 0; i < hash[1]; i++) {
		if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || sym[i].st_shndx == SHN_UNDEF)
			continue;
		if (strcmp(str + sym[i].st_name, "__vdso_clock_gettime") == 0)
			return (vdso_gettime_fn)(bias + sym[i].st_value);
	}
	return NULL;
}

void uslub_os_clock(clockid_t id, struct timespec *ts)
{
	vdso_gettime_fn fn = atomic_load_explicit(&vdso_gettime, memory_order_acquire);
	if (__builtin_expect(!fn, 0) && !atomic_load_explicit(&vdso_looked, memory_order_acquire)) {
		/* Racing first calls look it up alike and store the same answer. */
		fn = vdso_lookup();
		atomic_store_explicit(&vdso_gettime, fn, memory_order_release);
		atomic_store_explicit(&vdso_looked, 1, memory_order_release);
	}
	if (!fn || fn(id, ts) != 0)
		USLUB_OUT(syscall(SYS_clock_gettime, id, ts));
}

bool uslub_os_clock_is_vdso(void)
{
	struct timespec ts;
	uslub_os_clock(CLOCK_MONOTONIC_COARSE, &ts);
	return atomic_load_explicit(&vdso_gettime, memory_order_acquire) != NULL;
}

void uslub_os_yield(void)
{
	USLUB_OUT(syscall(SYS_sched_yield));
}

uint64_t uslub_os_now_ms(void)
{
	struct timespec ts;
	uslub_os_clock(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
