/* What the sheaf's slow paths (sheaf.c) take from the barn (barn.c). The rest of the
 * barn's interface - flush, decay, the fork locks - is in slab.h beside the sheaf's. */
#ifndef USLUB_BARN_H
#define USLUB_BARN_H

#include "internal.h"

#pragma GCC visibility push(hidden)

/* The n objects of a full sheaf into the node's barn of c, all or none. */
bool uslub_barn_put(struct uslub_cache *c, unsigned node, void **objects, unsigned n);
/* Up to `want` objects from the node's barn of c into `dst`; how many. */
unsigned uslub_barn_get(struct uslub_cache *c, unsigned node, void **dst, unsigned want);
/* n free objects of c (marked free, counted in their slabs' inuse) back to their slabs,
 * the array consumed: kmem_cache_free_bulk, for a sheaf or a barn's decay. */
void uslub_flush_objects(struct uslub_cache *c, struct uslub_thread *t, void **objects, unsigned n);

#pragma GCC visibility pop

#endif
