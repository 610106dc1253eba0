/* The one door to the operating system. Nothing else in uslub calls mmap, munmap, mremap,
 * madvise or mbind, so the tests can make each of them fail on purpose (uslub_os_fail).
 *
 * Contract: sizes and addresses are multiples of the page size; every call returns 0 (or a
 * mapping) on success and -1 (or NULL) with errno set as the system call sets it, and
 * leaves errno untouched on success. None of them allocates. */
#ifndef USLUB_OS_H
#define USLUB_OS_H

#include <stddef.h>
#include <stdint.h>

/* Reserve `size` bytes aligned to `align` (a power of two), readable and writable but
 * backed lazily (MAP_NORESERVE): nothing is resident until touched. */
void *uslub_os_reserve(size_t size, size_t align);
int uslub_os_unmap(void *addr, size_t size);
/* A mapping of its own for one huge block. */
void *uslub_os_map(size_t size);
/* Move or grow a huge block's mapping (mremap with MREMAP_MAYMOVE). */
void *uslub_os_remap(void *addr, size_t old_size, size_t new_size);
/* Hand pages back: afterwards they read as zero and are not resident. */
int uslub_os_release(void *addr, size_t size);

/* Fault injection for tests: fail the next `count` calls of every kind after `skip`. */
void uslub_os_fail(unsigned long skip, unsigned long count);

/* Raw output that never allocates. */
void uslub_os_write(int fd, const char *buf, size_t len);
unsigned uslub_os_ncpus(void);
/* Resident bytes of the process (from /proc/self/statm), 0 if unknown. */
uint64_t uslub_os_rss(void);

#endif
