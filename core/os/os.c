/* Mappings and the other system calls: the one door to the OS (os.h states the contract).
 * Fault injection is in fault.c, procfs parsing in smaps.c, the clock in clock.c. */
#include "os/os.h"
#include "os/fault.h"
#include "os/print.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <linux/futex.h>
#include <link.h>
#include <linux/membarrier.h>
#include <numaif.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
	char *raw = USLUB_OUT(mmap(NULL, span, PROT_READ | PROT_WRITE, ANON_RW | flags, -1, 0));
	if (raw == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
	size_t head = start - (uintptr_t)raw;
	size_t tail = span - head - keep;
	if (head)
		USLUB_OUT(munmap(raw, head));
	if (tail)
		USLUB_OUT(munmap((char *)start + keep, tail));
	return (void *)start;
}

void *uslub_os_reserve(size_t size, size_t align, size_t keep)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return NULL;
	void *p = map_trimmed(size, align, keep, MAP_NORESERVE);
	if (p)
		errno = saved;
	return p;
}

void *uslub_os_map_at(void *addr, size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return NULL;
	void *p = USLUB_OUT(mmap(addr, size, PROT_READ | PROT_WRITE,
				 ANON_RW | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0));
	if (p == MAP_FAILED)
		return NULL;
	if (p != addr) {
		/* A kernel before 4.17 takes the flag for a hint and maps elsewhere. */
		USLUB_OUT(munmap(p, size));
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
	void *p = USLUB_OUT(mmap(NULL, (size_t)page, PROT_NONE, ANON_RW, -1, 0));
	errno = saved;
	if (p == MAP_FAILED)
		return 0;
	USLUB_OUT(munmap(p, (size_t)page));
	return (uintptr_t)p;
}

void *uslub_os_map_aligned(size_t size, size_t align, size_t min_align)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return NULL;
	/* Without MAP_NORESERVE: the kernel's overcommit check sees the whole size and
	 * refuses one no machine could back, as it does for glibc's mmap'd chunks. Most
	 * kernels place a large mapping at a huge-page boundary by themselves, so the plain
	 * call is tried first; over-mapping for alignment costs `align` more address space,
	 * which a tight RLIMIT_AS may not have: then an alignment that was only wished for
	 * is given up. */
	char *p = USLUB_OUT(mmap(NULL, size, PROT_READ | PROT_WRITE, ANON_RW, -1, 0));
	if (p == MAP_FAILED)
		return NULL;
	if (((uintptr_t)p & (align - 1)) == 0)
		return errno = saved, p;
	USLUB_OUT(munmap(p, size));
	p = map_trimmed(size, align, size, 0);
	if (!p && min_align < align) {
		p = USLUB_OUT(mmap(NULL, size, PROT_READ | PROT_WRITE, ANON_RW, -1, 0));
		if (p == MAP_FAILED)
			return NULL;
		if ((uintptr_t)p & (min_align - 1)) {
			USLUB_OUT(munmap(p, size));
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
	if (USLUB_OUT(munmap(addr, size)) != 0)
		return -1;
	errno = saved;
	return 0;
}

void *uslub_os_map(size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return NULL;
	void *p =
	    USLUB_OUT(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (p == MAP_FAILED)
		return NULL;
	errno = saved;
	return p;
}

void *uslub_os_remap(void *addr, size_t old_size, size_t new_size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MREMAP))
		return NULL;
	void *p = USLUB_OUT(mremap(addr, old_size, new_size, MREMAP_MAYMOVE));
	if (p == MAP_FAILED)
		return NULL;
	errno = saved;
	return p;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7; glibc's headers before 2.32 lack it */
#endif

int uslub_os_move(void *from, void *to, size_t size)
{
	int saved = errno;
	int flags = MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP;
	void *p;
	if (uslub_os_injected_failure(FAULT_MREMAP)) {
		/* Failed as a kernel that refuses a move whose source crosses two mappings
		 * fails it (6.1, Debian 12's; 6.18 moves it): mremap_to unmaps the
		 * destination under MREMAP_FIXED before it looks at the source. */
		USLUB_OUT(munmap(to, size));
		errno = EFAULT;
		p = MAP_FAILED;
	} else {
		p = USLUB_OUT(mremap(from, size, size, flags, to));
	}
	if (p != MAP_FAILED) {
		errno = saved;
		return 0;
	}
	int err = errno;
	/* The destination, unmapped by the failed move, is mapped again: empty pages, as
	 * they were (they are the ones a move fills). It was ours a moment ago, so only
	 * vm.max_map_count, or another thread's mapping placed in the hole meanwhile, can
	 * refuse it (NOREPLACE leaves that one alone); then the block cannot be used: stop. */
	unsigned char v;
	if (USLUB_OUT(mincore(to, 1, &v)) != 0 && errno == ENOMEM) {
		int rw = PROT_READ | PROT_WRITE, anon = ANON_RW | MAP_NORESERVE;
		p = USLUB_OUT(mmap(to, size, rw, anon | MAP_FIXED_NOREPLACE, -1, 0));
		if (p != to) {
			uslub_message("uslub: a failed page move left %p (%zu bytes) unmapped, "
				      "and it cannot be mapped again\n",
				      to, size);
			abort();
		}
	}
	errno = err;
	return -1;
}

int uslub_os_renew(void *addr, size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return -1;
	int rw = PROT_READ | PROT_WRITE, flags = ANON_RW | MAP_NORESERVE;
	void *p = USLUB_OUT(mmap(addr, size, rw, flags | MAP_FIXED, -1, 0));
	if (p == addr) {
		errno = saved;
		return 0;
	}
	/* Refused. A kernel before 6.12 may have unmapped the range first: map it again
	 * where it is a hole, hand its pages back where it is not. */
	if (USLUB_OUT(madvise(addr, size, MADV_DONTNEED)) == 0)
		return errno = saved, 0;
	p = USLUB_OUT(mmap(addr, size, rw, flags | MAP_FIXED_NOREPLACE, -1, 0));
	if (p == addr)
		return errno = saved, 0;
	if (p != MAP_FAILED)
		USLUB_OUT(munmap(p, size));
	return -2;
}

int uslub_os_residency(void *addr, size_t size, unsigned char *vec)
{
	int saved = errno;
	if (USLUB_OUT(mincore(addr, size, vec)) != 0)
		return -1;
	errno = saved;
	return 0;
}

int uslub_os_release(void *addr, size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MADVISE))
		return -1;
	if (USLUB_OUT(madvise(addr, size, MADV_DONTNEED)) != 0)
		return -1;
	errno = saved;
	return 0;
}

long uslub_os_resident_pages(void *addr, size_t size)
{
	int saved = errno;
	unsigned char vec[1024]; /* a page each: 4 MiB a call */
	long resident = 0;
	for (size_t off = 0; off < size; off += sizeof(vec) << 12) {
		size_t len = size - off < sizeof(vec) << 12 ? size - off : sizeof(vec) << 12;
		if (USLUB_OUT(mincore((char *)addr + off, len, vec)) != 0) {
			errno = saved;
			return -1;
		}
		for (size_t i = 0; i < (len + 4095) >> 12; i++)
			resident += vec[i] & 1;
	}
	return resident;
}

int uslub_os_protect(void *addr, size_t size, bool access)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MADVISE))
		return -1;
	if (USLUB_OUT(mprotect(addr, size, access ? PROT_READ | PROT_WRITE : PROT_NONE)) != 0)
		return -1;
	errno = saved;
	return 0;
}

void uslub_os_write(int fd, const char *buf, size_t len)
{
	int saved = errno;
	while (len) {
		ssize_t n = USLUB_OUT(write(fd, buf, len));
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
	if (USLUB_OUT(syscall(SYS_sched_getaffinity, 0, sizeof(set), &set)) > 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return (unsigned)n;
	}
	long n = USLUB_OUT(sysconf(_SC_NPROCESSORS_ONLN));
	return n > 0 ? (unsigned)n : 1;
}

long uslub_os_read_file(const char *path, char *buf, size_t cap)
{
	int saved = errno;
	size_t len = 0;
	int fd = USLUB_OUT(open(path, O_RDONLY | O_CLOEXEC));
	if (fd < 0) {
		errno = saved;
		return -1;
	}
	while (len + 1 < cap) {
		ssize_t n = USLUB_OUT(read(fd, buf + len, cap - 1 - len));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	USLUB_OUT(close(fd));
	buf[len] = '\0';
	errno = saved;
	return (long)len;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int uslub_os_populate(void *addr, size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MADVISE))
		return -1;
	if (USLUB_OUT(madvise(addr, size, MADV_POPULATE_WRITE)) != 0) {
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
	if (USLUB_OUT(madvise(addr, size, MADV_HUGEPAGE)) != 0)
		return -1;
	errno = saved;
	return 0;
}

int uslub_os_nohugepage(void *addr, size_t size)
{
	int saved = errno;
	if (USLUB_OUT(madvise(addr, size, MADV_NOHUGEPAGE)) != 0)
		return -1;
	errno = saved;
	return 0;
}

/* The word in brackets, e.g. "always [madvise] never" gives "madvise". */
static int read_bracketed(const char *path, char *out, size_t cap)
{
	char buf[128];
	int fd = USLUB_OUT(open(path, O_RDONLY | O_CLOEXEC));
	if (fd < 0)
		return -1;
	ssize_t n = USLUB_OUT(read(fd, buf, sizeof(buf) - 1));
	USLUB_OUT(close(fd));
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
	USLUB_OUT(syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected,
			  timeout_ms >= 0 ? &ts : NULL, NULL, 0));
	errno = saved;
}

/* A full memory barrier on every running thread of the process (membarrier(2), private
 * expedited), registering the process at the first call and again after a fork, whose
 * child is not registered. 0, or -1 where the kernel has no such command. */
int uslub_os_membarrier(void)
{
	if (USLUB_OUT(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)) == 0)
		return 0;
	if (errno != EPERM ||
	    USLUB_OUT(syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) !=
		0)
		return -1;
	long rc = USLUB_OUT(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0));
	return rc == 0 ? 0 : -1;
}

void uslub_os_futex_wake(_Atomic uint32_t *word)
{
	int saved = errno;
	USLUB_OUT(syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0));
	errno = saved;
}

void *uslub_os_map_shared_file(const char *path, size_t size)
{
	int saved = errno;
	if (uslub_os_injected_failure(FAULT_MMAP))
		return NULL;
	int fd = USLUB_OUT(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
	if (fd < 0)
		return NULL;
	void *p = MAP_FAILED;
	if (USLUB_OUT(ftruncate(fd, (off_t)size)) == 0)
		p = USLUB_OUT(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
	int err = errno;
	USLUB_OUT(close(fd));
	if (p == MAP_FAILED) {
		USLUB_OUT(unlink(path));
		errno = err;
		return NULL;
	}
	errno = saved;
	return p;
}

int uslub_os_unlink(const char *path)
{
	int saved = errno;
	if (USLUB_OUT(unlink(path)) != 0)
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
	if (USLUB_OUT(os_mbind(addr, size, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0)) != 0)
		return -1;
	errno = saved;
	return 0;
}

/* The span of a loaded module's PT_LOAD segments (those with all of `flags`, 0 for all),
 * from its ELF header: [*lo, *hi), or *hi 0 when it has none. */
static void elf_span(const ElfW(Ehdr) * eh, unsigned flags, uintptr_t *lo, uintptr_t *hi)
{
	const ElfW(Phdr) *ph = (const void *)((const char *)eh + eh->e_phoff);
	uintptr_t base = (uintptr_t)eh, l = UINTPTR_MAX, h = 0;
	for (unsigned i = 0; i < eh->e_phnum && i < 64; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0)
			base = (uintptr_t)eh - ph[i].p_vaddr;
	for (unsigned i = 0; i < eh->e_phnum && i < 64; i++) {
		if (ph[i].p_type != PT_LOAD || (ph[i].p_flags & flags) != flags)
			continue;
		uintptr_t s = base + ph[i].p_vaddr, e = s + ph[i].p_memsz;
		l = s < l ? s : l;
		h = e > h ? e : h;
	}
	*lo = h ? l : 0;
	*hi = h;
}

/* The dynamic linker's mapping, from its ELF header at AT_BASE: glibc's loader frees a
 * finished thread's TLS while libc holds dl_stack_cache_lock (hooks.h, safe points). Read
 * once; threads that race to read it store the same values, hi published after lo, so a
 * reader that sees hi also sees lo (plain statics let one see hi with lo still 0, and
 * ThreadSanitizer reported the race from two threads' first frees). */
bool uslub_os_in_ldso(const void *addr)
{
	static uintptr_t lo_seen, hi_seen;
	uintptr_t hi = __atomic_load_n(&hi_seen, __ATOMIC_ACQUIRE), lo;
	if (!hi) {
		const ElfW(Ehdr) *eh = (const void *)getauxval(AT_BASE);
		if (!eh)
			return false;
		elf_span(eh, 0, &lo, &hi);
		__atomic_store_n(&lo_seen, lo, __ATOMIC_RELAXED);
		__atomic_store_n(&hi_seen, hi, __ATOMIC_RELEASE);
	} else {
		lo = __atomic_load_n(&lo_seen, __ATOMIC_RELAXED);
	}
	return (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
}

/* Our own executable segment, from the ELF header the linker names in every module: in
 * libuslub.so, the library's code; linked into a program, the program's. */
extern const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

void uslub_os_own_text(uintptr_t *lo, uintptr_t *hi)
{
	static uintptr_t text_lo, text_hi;
	if (!__atomic_load_n(&text_hi, __ATOMIC_ACQUIRE)) {
		uintptr_t l, h;
		elf_span(&__ehdr_start, PF_X, &l, &h);
		/* No executable segment found: all of the address space, so nothing passes. */
		text_lo = h ? l : 0;
		__atomic_store_n(&text_hi, h ? h : UINTPTR_MAX, __ATOMIC_RELEASE);
	}
	*lo = text_lo;
	*hi = __atomic_load_n(&text_hi, __ATOMIC_ACQUIRE);
}
