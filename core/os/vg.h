/* Telling checkers about our objects: memcheck's client requests and AddressSanitizer's
 * poisoning, each with a no-op twin so callers carry no #if (STYLE.md, 5).
 *
 * Only debug caches call these (debug.c and slab.c's slow path): running under valgrind,
 * or in an ASan build, every cache is made a debug cache at start-up (debug.c), so the
 * inline fast paths never need to know. Outside valgrind a client request is a short
 * no-op instruction sequence, so a debug cache run natively pays only those. */
#ifndef USLUB_VG_H
#define USLUB_VG_H

#include "uslub_config.h"

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define USLUB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define USLUB_ASAN 1
#endif
#endif
#ifndef USLUB_ASAN
#define USLUB_ASAN 0
#endif

/* Set once at start-up (debug.c; defined beside the hooks, hooks.c) when memcheck runs: then pages
 * taken from the page allocator are made accessible again (freed large blocks are left inaccessible
 * to catch uses after free). Large and huge blocks, which no cache's slow path sees, reach memcheck
 * through debug.c's block hooks (uslub_block_debug). */
extern int uslub_memcheck;

#if USLUB_HAVE_VALGRIND
#include <valgrind/memcheck.h>

/* Asked once, at start-up: the answer cannot change while the process runs. Only
 * memcheck needs to know our blocks; under callgrind or cachegrind the allocator keeps
 * its fast paths, so what they measure is what runs natively. memcheck answers its own
 * client requests with -1; other tools leave the default, 0. */
static inline int vg_running(void)
{
	int probe = 0;
	return RUNNING_ON_VALGRIND != 0 &&
	       (long)VALGRIND_MAKE_MEM_DEFINED(&probe, sizeof(probe)) == -1;
}
/* A block handed to the program: memcheck tracks it (leaks, frees) and makes it
 * accessible but undefined; rz is the red zone on each side, for its messages. */
static inline void vg_malloclike(void *p, size_t size, size_t rz)
{
	VALGRIND_MALLOCLIKE_BLOCK(p, size, rz, 0);
}
/* The same for memory known to be zero (fresh pages, calloc). */
static inline void vg_malloclike_zeroed(void *p, size_t size)
{
	VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, 1);
}
/* A block grown or shrunk where it is: the new tail is undefined, the cut one gone. */
static inline void vg_resize(void *p, size_t old, size_t size)
{
	VALGRIND_RESIZEINPLACE_BLOCK(p, old, size, 0);
}
/* The block comes back: memcheck marks it inaccessible and reports a bad free. */
static inline void vg_freelike(void *p, size_t rz)
{
	VALGRIND_FREELIKE_BLOCK(p, rz);
}
static inline void vg_noaccess(void *p, size_t n)
{
	VALGRIND_MAKE_MEM_NOACCESS(p, n);
}
static inline void vg_defined(void *p, size_t n)
{
	VALGRIND_MAKE_MEM_DEFINED(p, n);
}
static inline void vg_undefined(void *p, size_t n)
{
	VALGRIND_MAKE_MEM_UNDEFINED(p, n);
}
#else
static inline int vg_running(void)
{
	return 0;
}
static inline void vg_malloclike(void *p, size_t size, size_t rz)
{
	(void)p, (void)size, (void)rz;
}
static inline void vg_malloclike_zeroed(void *p, size_t size)
{
	(void)p, (void)size;
}
static inline void vg_resize(void *p, size_t old, size_t size)
{
	(void)p, (void)old, (void)size;
}
static inline void vg_freelike(void *p, size_t rz)
{
	(void)p, (void)rz;
}
static inline void vg_noaccess(void *p, size_t n)
{
	(void)p, (void)n;
}
static inline void vg_defined(void *p, size_t n)
{
	(void)p, (void)n;
}
static inline void vg_undefined(void *p, size_t n)
{
	(void)p, (void)n;
}
#endif

#if USLUB_ASAN
#include <sanitizer/asan_interface.h>

static inline void asan_poison(void *p, size_t n)
{
	ASAN_POISON_MEMORY_REGION(p, n);
}
static inline void asan_unpoison(void *p, size_t n)
{
	ASAN_UNPOISON_MEMORY_REGION(p, n);
}
#else
static inline void asan_poison(void *p, size_t n)
{
	(void)p, (void)n;
}
static inline void asan_unpoison(void *p, size_t n)
{
	(void)p, (void)n;
}
#endif

/* The allocator's own access to bytes the program may not touch (free pointers, track
 * records, red zones, a free object's poison): open them, touch, close them again. */
static inline void mem_open(void *p, size_t n)
{
	vg_defined(p, n);
	asan_unpoison(p, n);
}
static inline void mem_close(void *p, size_t n)
{
	vg_noaccess(p, n);
	asan_poison(p, n);
}
/* Pages leaving a slab: accessible again for whoever gets them next. */
static inline void mem_release(void *p, size_t n)
{
	vg_undefined(p, n);
	asan_unpoison(p, n);
}

#endif
