/* Sized frees: C++'s sized operator delete and C23's free_sized and free_aligned_sized
 * hand back the size (and alignment) the block was asked for.
 *
 * A plain cache has no use for the size. The free fast path reads the slab's descriptor
 * for its owner in any case, and the descriptor holds the class, so the size saves no
 * load; turning it into a class would add a table look-up (README, "C++ and C23", has the
 * callgrind counts). Under USLUB_DEBUG the size is checked instead: against the object's
 * class in a debug cache, against the block's pages for a large or huge block when the
 * letters apply to every cache. A size that does not fit is a bad free - a delete through
 * a base class without a virtual destructor, a wrong length kept beside the pointer - and
 * is reported like one; the program stops. */
#ifndef USLUB_SIZED_H
#define USLUB_SIZED_H

#include "api/api.h"
#include "debug/debug.h"

#pragma GCC visibility push(hidden)

/* The door a size came through: it names the function in a report, and free_sized may be
 * given the size of a realloc that kept the block (api.c), where delete may not. */
enum uslub_sized_op {
	SIZED_DELETE,	    /* operator delete(void *, size_t [, align_val_t]) */
	SIZED_DELETE_ARRAY, /* operator delete[](void *, size_t [, align_val_t]) */
	SIZED_FREE,	    /* free_sized(void *, size_t) */
	SIZED_FREE_ALIGNED, /* free_aligned_sized(void *, size_t, size_t) */
};

/* Checks `size` (`align`: 0, or what the block was asked aligned to) against p's block,
 * reports a mismatch and stops the program; otherwise frees p, the program's call site
 * recorded for USLUB_DEBUG=U. */
void uslub_free_sized_check(void *p, size_t size, size_t align, enum uslub_sized_op op);

/* C++'s kinds under USLUB_DEBUG (debug/kind.c): operator new and new[] mark the object
 * they return, a delete checks the mark (ASan's alloc-dealloc-mismatch) and stops the
 * program on a mismatch. Objects of caches without letters, and large and huge blocks
 * unless the letters apply to every cache, keep no kind. */
void uslub_new_mark(void *p, enum dbg_kind kind);
void uslub_delete_check(void *p, enum dbg_kind kind, const char *op);

static inline void *uslub_new_done(void *p, enum dbg_kind kind)
{
	if (unlikely(uslub_debug_any) && p)
		uslub_new_mark(p, kind);
	return p;
}

static inline void uslub_free_sized_inline(void *p, size_t size, size_t align,
					   enum uslub_sized_op op)
{
	if (unlikely(uslub_debug_any))
		uslub_free_sized_check(p, size, align, op);
	else
		uslub_free_inline(p);
}

#pragma GCC visibility pop

#endif
