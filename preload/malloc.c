/* The exported malloc family: the only unprefixed names in uslub. Every function here is
 * a thin door into core/; the glibc-internal __libc_ names are aliases, so code that
 * calls them (some profilers and language runtimes do) lands here too. C++'s operator new
 * and delete are in new_delete.c. */
#include "api/api.h"
#include "api/sized.h"
#include "uslub.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

#define EXPORT	    __attribute__((visibility("default")))
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))

EXPORT void *malloc(size_t size)
{
	return uslub_malloc_inline(size);
}

EXPORT void free(void *p)
{
	uslub_free_inline(p);
}

/* C23: the size (and alignment) the block was asked with, checked under USLUB_DEBUG
 * (sized.h). glibc 2.36 declares neither. */
EXPORT void free_sized(void *p, size_t size)
{
	uslub_free_sized_inline(p, size, 0, SIZED_FREE);
}

EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size)
{
	uslub_free_sized_inline(p, size, alignment, SIZED_FREE_ALIGNED);
}

EXPORT void *calloc(size_t nmemb, size_t size)
{
	return uslub_calloc(nmemb, size);
}

EXPORT void *realloc(void *p, size_t size)
{
	return uslub_realloc(p, size);
}

EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
	return uslub_reallocarray(p, nmemb, size);
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t size)
{
	return uslub_posix_memalign(out, alignment, size);
}

EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
	return uslub_memalign(alignment, size);
}

EXPORT void *memalign(size_t alignment, size_t size)
{
	return uslub_memalign(alignment, size);
}

EXPORT void *valloc(size_t size)
{
	return uslub_memalign(USLUB_PAGE_SIZE, size);
}

EXPORT void *pvalloc(size_t size)
{
	return uslub_pvalloc(size);
}

EXPORT size_t malloc_usable_size(void *p)
{
	return uslub_malloc_usable_size(p);
}

EXPORT int malloc_trim(size_t pad)
{
	return uslub_malloc_trim(pad);
}

EXPORT int mallopt(int param, int value)
{
	return uslub_mallopt(param, value);
}

EXPORT struct mallinfo2 mallinfo2(void)
{
	return uslub_mallinfo2();
}

static int clamp_int(size_t v)
{
	return v > (size_t)__INT_MAX__ ? __INT_MAX__ : (int)v;
}

EXPORT struct mallinfo mallinfo(void)
{
	struct mallinfo2 m = uslub_mallinfo2();
	struct mallinfo r = {
	    .arena = clamp_int(m.arena),
	    .ordblks = clamp_int(m.ordblks),
	    .hblks = clamp_int(m.hblks),
	    .hblkhd = clamp_int(m.hblkhd),
	    .usmblks = clamp_int(m.usmblks),
	    .uordblks = clamp_int(m.uordblks),
	    .fordblks = clamp_int(m.fordblks),
	};
	return r;
}

EXPORT void malloc_stats(void)
{
	uslub_stats_print(2, 0);
}

/* The aliases need not repeat glibc's attribute list: they are never called from here. */
#pragma GCC diagnostic ignored "-Wmissing-attributes"
void *__libc_malloc(size_t size) ALIAS(malloc);
void __libc_free(void *p) ALIAS(free);
void *__libc_calloc(size_t nmemb, size_t size) ALIAS(calloc);
void *__libc_realloc(void *p, size_t size) ALIAS(realloc);
void *__libc_memalign(size_t alignment, size_t size) ALIAS(memalign);
void *__libc_valloc(size_t size) ALIAS(valloc);
void *__libc_pvalloc(size_t size) ALIAS(pvalloc);
struct mallinfo __libc_mallinfo(void) ALIAS(mallinfo);
int __libc_mallopt(int param, int value) ALIAS(mallopt);
