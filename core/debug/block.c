/* The debug hooks of large and huge blocks (uslub_block_debug, debug.h): red zones around
 * the request (USLUB_DEBUG=Z), the poison and quarantine of freed large blocks (P, Q),
 * and what memcheck and ASan are told.
 *
 * A guarded large block (PF_GUARD, slab/large.c) has a page before it, and so has a huge
 * block under Z or P (page/huge.c). Its first bytes are a header the sweep reads, the
 * rest red zone:
 *
 *     word 0   ready: the page's address ^ HDR_LIVE or ^ HDR_HELD, 0 while it changes
 *     word 1   generation, new at each publication
 *     word 2   the request, as the block's own record for the sweep
 *     word 3   red zone, as the rest of the page
 *
 * The sweep (sweep.c) runs beside the block's thread, holding the zone lock, so the pages
 * cannot go back meanwhile; it counts a look only when ready and generation read the same
 * before and after it, as it does for slabs. An owner unpublishes (swaps in 0, a full
 * barrier) before it changes red zones, request or poison, and publishes again after. A
 * huge block's header is written the same way, though its sweep holds huge_lock, under
 * which every change of a huge block is made: the checks of both kinds are one. */
#include "debug/debug.h"
#include "debug/report.h"

#include "slab/slab.h"
#include "os/vg.h"

#include <string.h>

#define HDR_LIVE  0x1a29eb10c5a11ceULL
#define HDR_HELD  0x4e1dbb10c5f4eedULL
#define HDR_BYTES 32

static _Atomic uint64_t hdr_gen;

static uint64_t *hdr_of(void *p, size_t lead)
{
	return (uint64_t *)((char *)p - lead);
}

static void publish(uint64_t *h, uint64_t state, size_t size)
{
	__atomic_store_n(&h[2], size, __ATOMIC_RELAXED);
	__atomic_store_n(&h[1], atomic_fetch_add(&hdr_gen, 1) + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h[0], (uintptr_t)h ^ state, __ATOMIC_RELEASE);
}

/* An exchange: the full barrier orders the changes that follow after the clear, and
 * ThreadSanitizer knows it (it does not know a fence). */
static void unpublish(uint64_t *h)
{
	(void)__atomic_exchange_n(&h[0], 0, __ATOMIC_SEQ_CST);
}

/* The first bad byte of the red zones of a block of `size` in `span` with `lead` bytes
 * before it, whose header says `state` (0: no header to check); NULL when intact. */
static const unsigned char *bad_redzone(char *p, size_t size, size_t span, size_t lead,
					uint64_t state)
{
	const unsigned char *bad = NULL;
	if (lead) {
		uint64_t *h = hdr_of(p, lead);
		if (state && h[0] != ((uintptr_t)h ^ state))
			return (const unsigned char *)&h[0];
		if (state && h[2] != size)
			return (const unsigned char *)&h[2];
		bad = uslub_debug_first_not(p - lead + 3 * sizeof(*h), lead - 3 * sizeof(*h),
					    RED_ACTIVE);
	}
	if (!bad && size < span)
		bad = uslub_debug_first_not(p + size, span - size, RED_ACTIVE);
	return bad;
}

/* A freed block's poison, as a slab object's: 0x6b, the last byte 0xa5. */
static const unsigned char *bad_poison(char *p, size_t size)
{
	if (!size)
		return NULL;
	const unsigned char *bad = uslub_debug_first_not(p, size - 1, POISON_FREE);
	if (!bad && (unsigned char)p[size - 1] != POISON_END)
		bad = (const unsigned char *)p + size - 1;
	return bad;
}

/* With Z the tail is filled before memcheck and ASan are told: their marks then hold. */
void uslub_debug_block_alloc(void *p, size_t size, size_t span, size_t lead, bool zeroed)
{
	char *b = p;
	if ((uslub_block_debug & DBG_REDZONE) || lead) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if (lead) {
		memset(b - lead + HDR_BYTES - 8, RED_ACTIVE, lead - HDR_BYTES + 8);
		publish(hdr_of(p, lead), HDR_LIVE, size);
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

static void check(void *p, size_t size, size_t span, size_t lead, uint64_t state, const char *op)
{
	char *b = p;
	mem_open(b + size, span - size);
	const unsigned char *bad = bad_redzone(b, size, span, lead, state);
	if (bad) {
		uslub_debug_op = op;
		uslub_debug_caller = NULL;
		uslub_debug_report_block(p, size, span, "Redzone overwritten", bad);
	}
	mem_close(b + size, span - size);
}

void uslub_debug_block_check(void *p, size_t size, size_t span, size_t lead, const char *op)
{
	if ((uslub_block_debug & DBG_REDZONE) && (size != span || lead))
		check(p, size, span, lead, lead ? HDR_LIVE : 0, op);
}

bool uslub_debug_block_free(void *p, size_t size, size_t span, size_t lead, struct page_desc *d)
{
	uslub_debug_block_check(p, size, span, lead, "free");
	if (lead && d) {
		uint64_t *h = hdr_of(p, lead);
		unpublish(h);
		if (uslub_block_debug & DBG_POISON) {
			memset(p, POISON_FREE, size);
			if (size)
				((unsigned char *)p)[size - 1] = POISON_END;
		}
		if (uslub_block_debug & DBG_QUARANTINE) {
			d->flags |= PF_HELD;
			publish(h, HDR_HELD, size);
			if (uslub_quarantine_put_block(d))
				return true;
			unpublish(h);
			d->flags &= (uint8_t)~PF_HELD;
		}
	}
	/* memcheck keeps it inaccessible until the page allocator hands its pages out
	 * again; ASan's marks go, as the pages may be anything next. */
	if (uslub_block_debug & DBG_VALGRIND)
		vg_freelike(p, 0);
	asan_unpoison((char *)p - lead, span + lead);
	return false;
}

/* Large block d leaving the quarantine: its poison and red zones checked, then back. */
void uslub_debug_block_leave(struct page_desc *d)
{
	char *p = uslub_large_start(d);
	size_t lead = uslub_large_lead(d), size = uslub_large_request(d);
	size_t span = uslub_large_span(d);
	const unsigned char *bad = bad_poison(p, size);
	uslub_debug_op = "free (a block leaving the quarantine)";
	uslub_debug_caller = NULL;
	if (bad)
		uslub_debug_report_block(p, size, span, "Poison overwritten", bad);
	if (uslub_block_debug & DBG_REDZONE)
		check(p, size, span, lead, HDR_HELD, uslub_debug_op);
	unpublish(hdr_of(p, lead));
	d->flags &= (uint8_t)~PF_HELD;
	uslub_large_release(d);
}

void uslub_debug_block_sweep(struct page_desc *d, const char *op)
{
	uint64_t *h = page_address(d);
	uint64_t word = __atomic_load_n(&h[0], __ATOMIC_ACQUIRE);
	uint64_t gen = __atomic_load_n(&h[1], __ATOMIC_RELAXED);
	bool held = word == ((uintptr_t)h ^ HDR_HELD);
	if (!held && word != ((uintptr_t)h ^ HDR_LIVE))
		return;
	char *p = (char *)h + USLUB_PAGE_SIZE;
	size_t size = __atomic_load_n(&h[2], __ATOMIC_RELAXED);
	size_t span = ((size_t)__atomic_load_n(&d->objects, __ATOMIC_RELAXED) - 1)
		      << USLUB_PAGE_SHIFT;
	if (size > span)
		return;
	const unsigned char *bad = NULL;
	const char *what = "Redzone overwritten";
	if (uslub_block_debug & DBG_REDZONE)
		bad = bad_redzone(p, size, span, USLUB_PAGE_SIZE, 0);
	if (!bad && held && (uslub_block_debug & DBG_POISON)) {
		bad = bad_poison(p, size);
		what = "Poison overwritten";
	}
	/* Counted only if nothing changed the block meanwhile. */
	atomic_thread_fence(memory_order_acquire);
	if (!bad || __atomic_load_n(&h[0], __ATOMIC_RELAXED) != word ||
	    __atomic_load_n(&h[1], __ATOMIC_RELAXED) != gen)
		return;
	uslub_debug_op = op;
	uslub_debug_caller = NULL;
	uslub_debug_report_block(p, size, span, what, bad);
}

void uslub_debug_block_resize(void *p, void *q, size_t old, size_t old_span, size_t size,
			      size_t span, size_t lead)
{
	char *b = q;
	/* A guarded large block is resized in place only (slab/large.c); a huge one's lead
	 * moves with it, its header now at an address that does not match it. */
	if (lead && q == p)
		unpublish(hdr_of(p, lead));
	if ((uslub_block_debug & DBG_REDZONE) || lead) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if (lead)
		publish(hdr_of(q, lead), HDR_LIVE, size);
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
