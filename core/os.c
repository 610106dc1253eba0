#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned long fail_skip, fail_count;

/* Decides whether this OS call is one the test asked to fail. Racy counters are fine:
 * fault injection is used by single-threaded tests. */
static int injected_failure(void)
{
	if (!fail_count)
		return 0;
	if (fail_skip) {
		fail_skip--;
		return 0;
	}
	fail_count--;
	errno = ENOMEM;
	return 1;
}

void uslub_os_fail(unsigned long skip, unsigned long count)
{
	fail_skip = skip;
	fail_count = count;
}

void *uslub_os_reserve(size_t size, size_t align)
{
	int saved = errno;
	if (injected_failure())
		return NULL;
	/* Over-reserve, then cut the unaligned ends off: mmap only promises page alignment. */
	size_t span = size + align;
	char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
	size_t head = start - (uintptr_t)raw;
	size_t tail = span - head - size;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap((char *)start + size, tail);
	errno = saved;
	return (void *)start;
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
	if (injected_failure())
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
	if (injected_failure())
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
	if (injected_failure())
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
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return (unsigned)n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
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
	return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}
