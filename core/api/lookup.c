/* What a pointer is: the one classification every operation on an existing block takes
 * (free's slow path, realloc, sized frees, malloc_usable_size). The region table says
 * whether p lies in the allocator's regions; there, p's page descriptor says slab, large
 * block or nothing live; outside them only the huge table can know p, and each huge
 * operation asks it once, under its lock. A pointer that is none of these is reported
 * here and the program stops. */
#include "api/api.h"

#include "debug/debug.h"
#include "hooks.h"
#include "os/print.h"

#include <errno.h>
#include <stdlib.h>

void uslub_classify(const void *p, struct page_desc *d, const char *op, unsigned flags,
		    struct uslub_ptr *out)
{
	out->d = d;
	out->c = NULL;
	out->usable = 0;
	if (!d) {
		/* No block in the regions: a huge mapping, or nothing of ours. */
		out->kind = PTR_HUGE;
		if (flags & CLASSIFY_USABLE) {
			out->usable = uslub_huge_usable(p);
			if (!out->usable)
				uslub_report_no_block(op, p);
		}
		return;
	}
	if (d->kind == PAGE_LARGE) {
		size_t bytes = (size_t)d->objects << USLUB_PAGE_SHIFT;
		if (p != page_address(d))
			uslub_report_bad_block("invalid pointer", op, p, "inside a large", bytes);
		if (d->flags & PF_CACHED) /* freed, waiting in a thread's cache */
			uslub_report_bad_block("double free", op, p, "large", bytes);
		out->kind = PTR_LARGE;
		out->usable = uslub_large_usable(d);
		return;
	}
	if (d->kind != PAGE_SLAB)
		uslub_report_no_block(op, p);
	struct uslub_cache *c = &uslub_caches[d->cls];
	if (unlikely(c->debug) ? uslub_slab_object_start(d, p) != p : !plain_object_at(d, p))
		uslub_report_bad_free("invalid pointer", op, p, c, d);
	out->kind = PTR_SLAB;
	out->c = c;
	if (likely(!c->debug)) {
		if (is_marked_free(p))
			uslub_report_bad_free("double free", op, p, c, d);
		out->usable = c->size;
	} else if (flags & CLASSIFY_USABLE) {
		/* A debug cache tells a free object by its state, and says so itself. */
		out->usable = uslub_debug_usable(c, d, (void *)p, op);
	}
}

void uslub_report_no_block(const char *func, const void *p)
{
	struct region *r = region_of(p);
	if (r) {
		/* Free pages the region has grown over held a block once; its descriptors
		 * never did, and past what it grew the slot may hold someone else's mapping.
		 * (A plain read of grown: the program stops here either way.) */
		size_t page = ((uintptr_t)p & REGION_MASK) >> USLUB_PAGE_SHIFT;
		if (page >= FIRST_PAGE && page < r->grown && !((uintptr_t)p & 15)) {
			uslub_message("uslub: %s(): double free %p (its pages are free: the block "
				      "was freed before)\n",
				      func, p);
			abort();
		}
	} else if (uslub_huge_was_freed(p)) {
		uslub_message("uslub: %s(): double free %p (huge block, already unmapped)\n", func,
			      p);
		abort();
	}
	uslub_report_bad_free("invalid pointer", func, p, NULL, NULL);
}

/* The free of a classified pointer: each kind's own free, nothing looked up again (a
 * huge block is looked up once, by its free). */
void uslub_free_ptr(void *p, const struct uslub_ptr *ptr, const char *op, void *caller)
{
	int saved = errno;
	switch (ptr->kind) {
	case PTR_HUGE:
		if (!uslub_huge_free(p, 0, NULL))
			uslub_report_no_block(op, p);
		break;
	case PTR_LARGE:
		uslub_large_free(ptr->d, p); /* takes the thread's slow_lock for its cache */
		uslub_safe_point();
		break;
	case PTR_SLAB:
		uslub_object_free(p, ptr->d, caller);
		break;
	}
	errno = saved;
}

/* free reaches here by a tail call from the inline fast path (api.h): the return address
 * is the program's call site, which USLUB_DEBUG=U records. */
void uslub_free_slow(void *p, struct page_desc *d)
{
	if (!p)
		return;
	struct uslub_ptr ptr;
	uslub_classify(p, d, "free", 0, &ptr);
	uslub_free_ptr(p, &ptr, "free", __builtin_return_address(0));
}
