/* The reports of a bad pointer or a corrupted free list: one line naming the pointer and
 * its cache (a debug cache adds the object's bytes and sites through its hook), then the
 * program stops. Every layer reports through here. */
#include "types.h"
#include "hooks.h"
#include "os/print.h"

#include <stdlib.h>

__attribute__((noreturn)) void uslub_report_bad_free(const char *what, const char *func,
						     const void *p, const struct uslub_cache *c,
						     struct page_desc *s)
{
	if (c)
		uslub_message("uslub: %s(): %s %p (cache %s, object size %u)\n", func, what, p,
			      c->name, c->size);
	else
		uslub_message("uslub: %s(): %s %p (not a block of this allocator)\n", func, what,
			      p);
	if (c && c->debug) {
		/* A debug cache can say more: the object p points into, with its sites. */
		uintptr_t off = (uintptr_t)p - (uintptr_t)page_address(s);
		if (off < (uintptr_t)s->objects * c->stride) {
			char *object = (char *)page_address(s) + off - off % c->stride + c->offset;
			uslub_hooks.object_report(c, s, object, what, p);
		}
	}
	abort();
}

__attribute__((noreturn)) void uslub_report_bad_block(const char *what, const char *func,
						      const void *p, const char *kind, size_t bytes)
{
	uslub_message("uslub: %s(): %s %p (%s block of %zu bytes)\n", func, what, p, kind, bytes);
	abort();
}

__attribute__((noreturn)) void uslub_report_corrupt(const char *what, const struct uslub_cache *c,
						    const void *slab, const void *p)
{
	uslub_message("uslub: corrupted free list in cache %s (slab %p): %s, at %p; "
		      "an object was written after it was freed\n",
		      c->name, slab, what, p);
	abort();
}
