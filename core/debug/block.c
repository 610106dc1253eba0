/* The debug hooks of large and huge blocks (uslub_block_debug, debug.h): red zones after
 * the request (USLUB_DEBUG=Z), and what memcheck and ASan are told. */
#include "debug/debug.h"
#include "debug/report.h"

#include "slab/slab.h"
#include "os/vg.h"

#include <string.h>

/* With Z the tail is filled before memcheck and ASan are told: their marks then hold. */
void uslub_debug_block_alloc(void *p, size_t size, size_t span, bool zeroed)
{
	char *b = p;
	if (uslub_block_debug & DBG_REDZONE) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if (uslub_block_debug & DBG_VALGRIND) {
		if (zeroed)
			vg_malloclike_zeroed(p, size);
		else
			vg_malloclike(p, size, 0);
		vg_noaccess(b + size, span - size);
	}
	asan_unpoison(p, size);
	asan_poison(b + size, span - size);
}

void uslub_debug_block_check(void *p, size_t size, size_t span, const char *op)
{
	if (!(uslub_block_debug & DBG_REDZONE) || size == span)
		return;
	char *b = p;
	mem_open(b + size, span - size);
	const unsigned char *bad = uslub_debug_first_not(b + size, span - size, RED_ACTIVE);
	if (bad) {
		uslub_debug_op = op;
		uslub_debug_caller = NULL;
		uslub_debug_report_block(p, size, span, bad);
	}
	mem_close(b + size, span - size);
}

void uslub_debug_block_free(void *p, size_t size, size_t span)
{
	uslub_debug_block_check(p, size, span, "free");
	/* memcheck keeps it inaccessible until the page allocator hands its pages out
	 * again; ASan's marks go, as the pages may be anything next. */
	if (uslub_block_debug & DBG_VALGRIND)
		vg_freelike(p, 0);
	asan_unpoison(p, span);
}

void uslub_debug_block_resize(void *p, void *q, size_t old, size_t old_span, size_t size,
			      size_t span)
{
	char *b = q;
	if (uslub_block_debug & DBG_REDZONE) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if ((uslub_block_debug & DBG_VALGRIND) && q == p) {
		vg_resize(p, old, size);
	} else if (uslub_block_debug & DBG_VALGRIND) {
		/* mremap carried the bytes' definedness over; a new block record marks them
		 * undefined, so the kept part is declared defined (an approximation:
		 * uninitialised bytes moved with a huge block are no longer reported). */
		vg_freelike(p, 0);
		vg_malloclike(q, size, 0);
		vg_defined(q, old < size ? old : size);
	}
	if (uslub_block_debug & DBG_VALGRIND)
		vg_noaccess(b + size, span - size);
	/* Pages the block no longer covers leave without ASan's marks (a range mremap left
	 * may be mapped again by anyone). */
	if (q != p)
		asan_unpoison(p, old_span);
	else if (old_span > span)
		asan_unpoison(b + span, old_span - span);
	asan_unpoison(q, size);
	asan_poison(b + size, span - size);
}
