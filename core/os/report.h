/* The reports of a bad pointer or a corrupted free list (report.c): one line naming the
 * pointer and its cache or block, then the program stops. Every layer reports through
 * here. */
#ifndef USLUB_REPORT_H
#define USLUB_REPORT_H

#include "types.h"

#pragma GCC visibility push(hidden)

/* Reports a bad pointer p given to `func` and aborts: c and s are the cache and the slab
 * p lies in (a debug cache's report shows the object), or NULL for a pointer of no
 * slab. */
__attribute__((noreturn)) void uslub_report_bad_free(const char *what, const char *func,
						     const void *p, const struct uslub_cache *c,
						     struct page_desc *s);
/* The same for a large or huge block (`kind` "large" or "huge"), which has no cache. */
__attribute__((noreturn)) void uslub_report_bad_block(const char *what, const char *func,
						      const void *p, const char *kind,
						      size_t bytes);
/* A free pointer that leads out of its slab, or a list longer than its slab: reported
 * with the cache and the slab, and the program stops. */
__attribute__((noreturn)) void uslub_report_corrupt(const char *what, const struct uslub_cache *c,
						    const void *slab, const void *p);

#pragma GCC visibility pop

#endif
