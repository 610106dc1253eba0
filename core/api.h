/* The malloc family on top of the engine, shared by the prefixed API (api.c) and the
 * exported names (preload/malloc.c). malloc and free are the inline fast paths of
 * slab.h; the rest are out of line here. */
#ifndef USLUB_API_IMPL_H
#define USLUB_API_IMPL_H

#include "slab.h"

#include <malloc.h>

void *uslub_calloc_impl(size_t nmemb, size_t size);
void *uslub_realloc_impl(void *p, size_t size);
void *uslub_reallocarray_impl(void *p, size_t nmemb, size_t size);
int uslub_posix_memalign_impl(void **out, size_t alignment, size_t size);
void *uslub_memalign_impl(size_t alignment, size_t size);
void *uslub_pvalloc_impl(size_t size);
size_t uslub_usable_size_impl(const void *p);
int uslub_trim_impl(size_t pad);
int uslub_mallopt_impl(int param, int value);
struct mallinfo2 uslub_mallinfo2_impl(void);

#endif
