/* The malloc family on top of the engine, shared by the prefixed API (api.c) and the
 * exported names (preload/malloc.c). malloc and free are the inline fast paths of
 * slab.h; the rest are out of line here. */
#ifndef USLUB_API_IMPL_H
#define USLUB_API_IMPL_H

#include "slab/slab.h"
#include "uslub.h" /* the prefixed API: calloc, realloc, ... are implemented under it */

#include <malloc.h>

int uslub_mallopt(int param, int value);
struct mallinfo2 uslub_mallinfo2(void);

#endif
