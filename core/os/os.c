#include "os/os.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <linux/futex.h>
#include <numaif.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static unsigned long fail_skip, fail_count;

/* The kinds of call USLUB_FAULT can make fail, by the system call behind them. munmap and
 * mbind are not among them: neither is on a path that can report ENOMEM to the caller. */
enum fault_kind { FAULT_MMAP, FAULT_MREMAP, FAULT_MADVISE, FAULT_ALL, NR_FAULT_KINDS };

static int fault_rule_fires(enum fault_kind kind);

/* Decides whether this OS call is one the test asked to fail: uslub_os_fail's window
 * (racy counters are fine: it is used by single-threaded tests), then the USLUB_FAULT
 * rules, whose counters are atomic because preloaded programs have threads. */
static int injected_failure(enum fault_kind kind)
{
	if (fail_count) {
		if (fail_skip) {
			fail_skip--;
		} else {
			fail_count--;
			errno = ENOMEM;
			return 1;
		}
	}
	if (fault_rule_fires(kind)) {
		errno = ENOMEM;
		return 1;
	}
	return 0;
}

void uslub_os_fail(unsigned long skip, unsigned long count)
{
	fail_skip = skip;
	fail_count = count;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17; headers older than glibc 2.28 lack it */
#endif

#define ANON_RW (MAP_PRIVATE | MAP_ANONYMOUS)

/* Over-map, then cut off the unaligned ends and all past `keep`: mmap only promises page
 * alignment. */
static void *map_trimmed(size_t size, size_t align, size_t keep, int flags)
{
	size_t span = size + align;
	if (span < size)
		return errno = ENOMEM, NULL;
	char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, ANON_RW | flags, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
	size_t head = start - (uintptr_t)raw;
	size_t tail = span - head - keep;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap((char *)start + keep, tail);
	return (void *)start;
}

void *uslub_os_reserve(size_t size, size_t align, size_t keep)
{
	int saved = errno;
	if (injected_failure(FAULT_MMAP))
		return NULL;
	void *p = map_trimmed(size, align, keep, MAP_NORESERVE);
	if (p)
		errno = saved;
	return p;
}

void *uslub_os_map_at(void *addr, size_t size)
{
	int saved = errno;
	if (injected_failure(FAULT_MMAP))
		return NULL;
	void *p = mmap(addr, size, PROT_READ | PROT_WRITE,
		       ANON_RW | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (p != addr) {
		/* A kernel before 4.17 takes the flag for a hint and maps elsewhere. */
		munmap(p, size);
		errno = EEXIST;
		return NULL;
	}
	errno = saved;
	return p;
}

uintptr_t uslub_os_map_top(void)
{
	int saved = errno;
	long page = (long)getauxval(AT_PAGESZ);
	void *p = mmap(NULL, (size_t)page, PROT_NONE, ANON_RW, -1, 0);
	errno = saved;
	if (p == MAP_FAILED)
		return 0;
	munmap(p, (size_t)page);
	return (uintptr_t)p;
}

void *uslub_os_map_aligned(size_t size, size_t align, size_t min_align)
{
	int saved = errno;
	if (injected_failure(FAULT_MMAP))
		return NULL;
	/* Without MAP_NORESERVE: the kernel's overcommit check sees the whole size and
	 * refuses one no machine could back, as it does for glibc's mmap'd chunks. Most
	 * kernels place a large mapping at a huge-page boundary by themselves, so the plain
	 * call is tried first; over-mapping for alignment costs `align` more address space,
	 * which a tight RLIMIT_AS may not have: then an alignment that was only wished for
	 * is given up. */
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, ANON_RW, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (((uintptr_t)p & (align - 1)) == 0)
		return errno = saved, p;
	munmap(p, size);
	p = map_trimmed(size, align, size, 0);
	if (!p && min_align < align) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, ANON_RW, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		if ((uintptr_t)p & (min_align - 1)) {
			munmap(p, size);
			return errno = ENOMEM, NULL;
		}
	}
	if (p)
		errno = saved;
	return p;
}

bool uslub_os_space_limited(void)
{
	int saved = errno;
	struct rlimit as, data;
	bool limited = (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) ||
		       (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY);
	errno = saved;
	return limited;
}

int uslub_os_unmap(void *addr, size_t size)
{
	int saved = errno;
	if (munmap(addr, size) != 0)
		return -1;
	errno = saved;
	return 0;
}

void *uslub_os_map(size_t size)
{
	int saved = errno;
	if (injected_failure(FAULT_MMAP))
		return NULL;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	errno = saved;
	return p;
}

void *uslub_os_remap(void *addr, size_t old_size, size_t new_size)
{
	int saved = errno;
	if (injected_failure(FAULT_MREMAP))
		return NULL;
	void *p = mremap(addr, old_size, new_size, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return NULL;
	errno = saved;
	return p;
}

int uslub_os_release(void *addr, size_t size)
{
	int saved = errno;
	if (injected_failure(FAULT_MADVISE))
		return -1;
	if (madvise(addr, size, MADV_DONTNEED) != 0)
		return -1;
	errno = saved;
	return 0;
}

void uslub_os_write(int fd, const char *buf, size_t len)
{
	int saved = errno;
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf += n;
		len -= (size_t)n;
	}
	errno = saved;
}

unsigned uslub_os_ncpus(void)
{
	cpu_set_t set;
	/* The system call, not libc's wrapper (see the clock, below); it returns the bytes
	 * of the mask it wrote. */
	CPU_ZERO(&set);
	if (syscall(SYS_sched_getaffinity, 0, sizeof(set), &set) > 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return (unsigned)n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

long uslub_os_read_file(const char *path, char *buf, size_t cap)
{
	int saved = errno;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errno = saved;
		return -1;
	}
	while (len + 1 < cap) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	errno = saved;
	return (long)len;
}

uint64_t uslub_os_rss(void)
{
	int saved = errno;
	char buf[128];
	uint64_t pages = 0;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errno = saved;
		return 0;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		const char *p = buf;
		while (*p && *p != ' ')
			p++;
		while (*p == ' ')
			p++;
		while (*p >= '0' && *p <= '9')
			pages = pages * 10 + (uint64_t)(*p++ - '0');
	}
	errno = saved;
	return pages * (uint64_t)getauxval(AT_PAGESZ);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int uslub_os_populate(void *addr, size_t size)
{
	int saved = errno;
	if (injected_failure(FAULT_MADVISE))
		return -1;
	if (madvise(addr, size, MADV_POPULATE_WRITE) != 0) {
		if (errno != EINVAL) /* kernels before 5.14 do not know it */
			return -1;
		for (size_t off = 0; off < size; off += 4096)
			((volatile char *)addr)[off] = 0;
	}
	errno = saved;
	return 0;
}

int uslub_os_hugepage(void *addr, size_t size)
{
	int saved = errno;
	if (madvise(addr, size, MADV_HUGEPAGE) != 0)
		return -1;
	errno = saved;
	return 0;
}

int uslub_os_nohugepage(void *addr, size_t size)
{
	int saved = errno;
	if (madvise(addr, size, MADV_NOHUGEPAGE) != 0)
		return -1;
	errno = saved;
	return 0;
}

/* The word in brackets, e.g. "always [madvise] never" gives "madvise". */
static int read_bracketed(const char *path, char *out, size_t cap)
{
	char buf[128];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *a = buf;
	while (*a && *a != '[')
		a++;
	if (!*a)
		return -1;
	a++;
	size_t i = 0;
	while (a[i] && a[i] != ']' && i + 1 < cap) {
		out[i] = a[i];
		i++;
	}
	out[i] = '\0';
	return 0;
}

int uslub_os_thp_policy(void)
{
	int saved = errno;
	char enabled[32], defrag[32];
	int rc = -1;
	if (read_bracketed("/sys/kernel/mm/transparent_hugepage/enabled", enabled,
			   sizeof(enabled)) == 0 &&
	    enabled[0] != 'n') {
		rc = 0;
		/* "always" and "madvise" compact directly in the faulting thread for a range
		 * with MADV_HUGEPAGE, "defer+madvise" too; "defer" and "never" do not. */
		if (read_bracketed("/sys/kernel/mm/transparent_hugepage/defrag", defrag,
				   sizeof(defrag)) == 0 &&
		    (defrag[0] == 'a' || defrag[0] == 'm' ||
		     (defrag[0] == 'd' && defrag[5] == '+')))
			rc = 1;
	}
	errno = saved;
	return rc;
}

void uslub_os_futex_wait(_Atomic uint32_t *word, uint32_t expected, long timeout_ms)
{
	int saved = errno;
	struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout_ms >= 0 ? &ts : NULL, NULL,
		0);
	errno = saved;
}

void uslub_os_futex_wake(_Atomic uint32_t *word)
{
	int saved = errno;
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	errno = saved;
}

/* ---- statistics: smaps and the live page ----------------------------------------- */

static uint64_t parse_hex(const char **p)
{
	uint64_t v = 0;
	for (;; (*p)++) {
		char c = **p;
		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
	}
}

/* "Name:   1234 kB" -> bytes */
static uint64_t parse_kb(const char *p)
{
	uint64_t v = 0;
	while (*p == ' ')
		p++;
	while (*p >= '0' && *p <= '9')
		v = v * 10 + (uint64_t)(*p++ - '0');
	return v << 10;
}

static void smaps_line(const char *line, int (*ours)(uintptr_t, uintptr_t), int *mine,
		       struct uslub_os_smaps *out)
{
	char c = line[0];
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
		/* A mapping's first line: "start-end perms offset dev inode path". */
		const char *p = line;
		uint64_t start = parse_hex(&p);
		uint64_t end = *p == '-' ? (p++, parse_hex(&p)) : start;
		*mine = ours((uintptr_t)start, (uintptr_t)end);
	} else if (c == 'R' && memcmp(line, "Rss:", 4) == 0) {
		uint64_t v = parse_kb(line + 4);
		out->rss += v;
		if (*mine)
			out->our_rss += v;
	} else if (c == 'A' && memcmp(line, "AnonHugePages:", 14) == 0) {
		uint64_t v = parse_kb(line + 14);
		out->anon_huge += v;
		if (*mine)
			out->our_anon_huge += v;
	}
}

int uslub_os_smaps(int (*ours)(uintptr_t start, uintptr_t end), struct uslub_os_smaps *out)
{
	int saved = errno;
	char buf[4096];
	size_t have = 0;
	int mine = 0;
	memset(out, 0, sizeof(*out));
	int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			*nl = '\0';
			smaps_line(line, ours, &mine, out);
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		if (have == sizeof(buf) - 1)
			have = 0; /* a line longer than the buffer (a long path): skip it */
		memmove(buf, line, have);
	}
	close(fd);
	errno = saved;
	return 0;
}

void *uslub_os_map_shared_file(const char *path, size_t size)
{
	int saved = errno;
	if (injected_failure(FAULT_MMAP))
		return NULL;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return NULL;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	if (p == MAP_FAILED) {
		unlink(path);
		errno = err;
		return NULL;
	}
	errno = saved;
	return p;
}

int uslub_os_unlink(const char *path)
{
	int saved = errno;
	if (unlink(path) != 0)
		return -1;
	errno = saved;
	return 0;
}

static long (*os_mbind)(void *, unsigned long, int, const unsigned long *, unsigned long, unsigned);

void uslub_os_use_mbind(void *fn)
{
	*(void **)&os_mbind = fn;
}

int uslub_os_bind(void *addr, size_t size, unsigned node)
{
	int saved = errno;
	unsigned long mask[4] = {0};
	if (node >= sizeof(mask) * 8 || !os_mbind)
		return -1;
	mask[node / 64] = 1UL << (node % 64);
	/* MPOL_PREFERRED: the node's memory first, another's rather than failing. Through
	 * libnuma's mbind (node.c loads libnuma and hands it over), a plain system call
	 * wrapper, rather than syscall(): an exported symbol a test's stand-in for libnuma
	 * can take over (tests/numa_emu.c). */
	if (os_mbind(addr, size, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0) != 0)
		return -1;
	errno = saved;
	return 0;
}

/* ---- fault injection: USLUB_FAULT ----------------------------------------------- */

/* One rule per kind: fail the nth call (nth > 0), and/or every call whose number is a
 * multiple of `every`. "all" counts the calls of every kind together. Counters start at
 * zero when the rules are installed, so a test can install them between phases. */
struct fault_rule {
	unsigned long nth, every;
	_Atomic unsigned long calls;
};

static struct fault_rule fault_rules[NR_FAULT_KINDS];
_Static_assert(NR_FAULT_KINDS ==
		   sizeof(((struct uslub_fault_plan *)0)->nth) / sizeof(unsigned long),
	       "one plan entry per kind");
static _Atomic int fault_armed;
static _Atomic unsigned long fault_injected;

static int rule_fires(struct fault_rule *r)
{
	if (!r->nth && !r->every)
		return 0;
	unsigned long n = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
	return n == r->nth || (r->every && n % r->every == 0);
}

static int fault_rule_fires(enum fault_kind kind)
{
	if (!atomic_load_explicit(&fault_armed, memory_order_relaxed))
		return 0;
	/* Both counters advance on every call, so "all:every:2" means every second OS call
	 * whatever the kind, and a kind's own rule is unaffected by the other kinds. */
	int fire = rule_fires(&fault_rules[kind]);
	fire |= rule_fires(&fault_rules[FAULT_ALL]);
	if (fire)
		atomic_fetch_add_explicit(&fault_injected, 1, memory_order_relaxed);
	return fire;
}

void uslub_os_fault_set(const struct uslub_fault_plan *plan)
{
	int armed = 0;
	atomic_store(&fault_armed, 0);
	for (int k = 0; k < NR_FAULT_KINDS; k++) {
		fault_rules[k].nth = plan ? plan->nth[k] : 0;
		fault_rules[k].every = plan ? plan->every[k] : 0;
		atomic_store(&fault_rules[k].calls, 0);
		armed |= fault_rules[k].nth || fault_rules[k].every;
	}
	atomic_store(&fault_armed, armed);
}

unsigned long uslub_os_fault_injected(void)
{
	return atomic_load_explicit(&fault_injected, memory_order_relaxed);
}

/* ---- the clock, from the vDSO ---------------------------------------------------- */

/* libc's clock_gettime is the vDSO's call behind a wrapper, but the wrapper lies in a
 * 64 KiB stretch of libc's text that a program which never reads the clock never maps:
 * calling it made every process 64 KiB larger (fault-around maps the whole stretch; the
 * sched_* wrappers cost another 64 KiB, hence the system calls below). The kernel's vDSO
 * is already mapped and resident, so its symbol is looked up once, here, in its ELF
 * dynamic symbol table (DT_HASH gives the table's length, so the walk is bounded). */
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
		syscall(SYS_clock_gettime, id, ts);
}

bool uslub_os_clock_is_vdso(void)
{
	struct timespec ts;
	uslub_os_clock(CLOCK_MONOTONIC_COARSE, &ts);
	return atomic_load_explicit(&vdso_gettime, memory_order_acquire) != NULL;
}

void uslub_os_yield(void)
{
	syscall(SYS_sched_yield);
}

uint64_t uslub_os_now_ms(void)
{
	struct timespec ts;
	uslub_os_clock(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
