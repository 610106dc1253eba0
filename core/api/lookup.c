/* What a pointer is: the one classification (api.h's uslub_classify, inline into each
 * operation on an existing block: free's slow path, realloc, sized frees,
 * malloc_usable_size) and what follows from it here: the reports of what is no block,
 * and the free of a classified pointer. The region table says
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

/* Each kind's own free, nothing looked up again (a huge block is looked up once, by its
 * free); errno as the program left it. */
static inline __attribute__((always_inline)) void
free_classified(void *p, const struct uslub_ptr *ptr, const char *op, void *caller)
{
	int saved = errno;
	switch (ptr->kind) {
	case PTR_HUGE:
		if (unlikely(uslub_debug_every_cache))
			uslub_debug_check_huge_kind(p, KIND_MALLOC, op);
		if (!uslub_huge_free(p, 0, NULL))
			uslub_report_no_block(op, p);
		break;
	case PTR_LARGE:
		/* A block operator new gave (sized.c): C++'s kind, kept by the letters. */
		if (unlikely(uslub_debug_every_cache))
			uslub_debug_check_block_kind(ptr->d, p, KIND_MALLOC, op);
		/* Into the thread's medium sheaf, else its medium-block cache. */
		if (!uslub_msheaf_free(p, ptr->d))
			uslub_thread_large_free(ptr->d, p);
		uslub_safe_point_free(caller);
		break;
	case PTR_SLAB:
		uslub_object_free(p, ptr->d, caller);
		break;
	}
	errno = saved;
}

void uslub_free_ptr_slow(void *p, const struct uslub_ptr *ptr, const char *op, void *caller)
{
	free_classified(p, ptr, op, caller);
}

/* Everything free's fast path and the medium cache's hit do not take: out of line, so the
 * hit pays for none of its registers. */
static noinline void free_general(void *p, struct page_desc *d, void *caller)
{
	if (!p)
		return;
	/* An object of a cache with a constructor or TYPESAFE_BY_RCU lies behind the
	 * engine's free pointer and mark (types.h, user_off): free() of it frees the slot. */
	if (d && d->kind == PAGE_SLAB && unlikely(uslub_caches[d->cls].user_off))
		p = (char *)p - uslub_caches[d->cls].user_off;
	struct uslub_ptr ptr;
	uslub_classify(p, d, "free", 0, &ptr);
	free_classified(p, &ptr, "free", caller);
}

/* free reaches here by a tail call from the inline fast path (api.h): the return address
 * is the program's call site, which USLUB_DEBUG=U records. */
void uslub_free_slow(void *p, struct page_desc *d)
{
	/* A medium block the thread's cache takes as it is: a live block's start (the
	 * classification's two tests for a large block) is all a hit needs. NULL has no
	 * block (d is NULL). */
	if (likely(d) && d->kind == PAGE_LARGE && p == uslub_large_start(d) &&
	    !(d->flags & (PF_CACHED | PF_HELD | PF_GUARD)) && !medium_in_sheaf(d, p) &&
	    ((d->objects <= MSHEAF_MAX_PAGES && uslub_msheaf_free(p, d)) || uslub_medium_push(d))) {
		if (unlikely(uslub_tick_due()))
			uslub_medium_tick(NULL);
		return;
	}
	free_general(p, d, __builtin_return_address(0));
}
