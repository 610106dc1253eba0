/* The medium sheaves: every medium block, 8-128 KiB (MEDIUM_MIN_PAGES..MSHEAF_MAX_PAGES
 * pages), on the objects' fast paths (types.h, MSHEAF_*). malloc pops the thread's sheaf
 * of the size's page count through uslub_cpu_of, as it pops a kmalloc cache's; free finds
 * the sheaf through the test on the block's first page, as it finds an object's, and
 * pushes. So the two kinds share one path, and a program that mixes them at random is not
 * sent down two at random (tcmalloc's size classes reach 256 KiB for the same reason).
 *
 * Behind a sheaf lies the thread's medium-block cache (slab/medium.c): a sheaf that runs
 * empty takes half a sheaf and the block asked for from its bins of that page count, or
 * else a block the general way and then the half sheaf; a full one sends its older blocks
 * there, down to half. A block in a sheaf is free: its first page keeps its test and it
 * carries the free mark in its second word (from its colour, slab.h), as a free object does, so a
 * second free of it is caught on the fast path and on the slow one (medium_in_sheaf). Spilled
 * into the cache it keeps both, so a refill of it writes no test (slab.h, medium_tests_set).
 *
 * What a sheaf holds is bounded (MSHEAF_TOTAL, below). free's and malloc's fast paths
 * take no lock, as for the small sheaves, so the idle drain takes a thread's sheaves only
 * once the kernel shows the thread parked in a system call outside the allocator
 * (thread.c, "a parked thread's sheaves"); its exit and malloc_trim give them back too. */
#include "thread/thread.h"
#include "os/options.h"
#include "slab/slab.h"

#include <string.h>

/* What the medium sheaves may hold: MSHEAF_TOTAL for all threads together, shared out among the
 * threads that use them (below), as the medium-block caches' high is (types.h,
 * MEDIUM_HIGH_TOTAL), and split evenly over the page counts; within that, a page count's sheaf
 * holds MSHEAF_BYTES_MAX or MSHEAF_BLOCKS blocks, whichever is more (21 blocks of 12 KiB, 8 of
 * 128 KiB), so a thread keeps 17 MiB at most if every sheaf is full (46 MiB grown, below). With
 * many threads a sheaf of the larger counts gets no room and stays closed: its blocks take the
 * medium-block cache's own hit paths (slab.h). Each slow path of a sheaf sets its capacity
 * anew.
 *
 * One thread replacing blocks of 16 B - 32 KiB at random took 177 instructions a
 * replacement with 64 KiB a sheaf, 136 with 128 and 113 with 256; at 16 B - 128 KiB, 200
 * with 2 blocks of 128 KiB a sheaf, 172 with 4 and 134 with 8 (callgrind,
 * tools/bench/results/medium-sheaves.md).
 *
 * A sheaf that a program walks from empty to full and back - a working set replaced at
 * random - grows by MSHEAF_GROW blocks at each such crossing, up to MSHEAF_GROWN_MAX bytes
 * (within the share; 1 MiB in a 64 MiB total left the larger counts' sheaves at 8 blocks,
 * and one thread at 16 B - 128 KiB took 137 instructions a replacement, against 107 with
 * 2 MiB in 128 MiB), as tcmalloc's thread cache lengthens the list of a class that
 * goes back and forth: such a walk reaches an end about every (cap / 2)^2 operations, and
 * each end moves half a sheaf to or from the medium-block cache, a line of the block and
 * one of its descriptor each. A producer or a consumer meets the same end each time and
 * does not grow it. The sheaves' flush (idle drain, malloc_trim, exit) takes the growth
 * back. The growth is kept in the cache_cpu's nr_partial, which medium sheaves, holding
 * no slabs, have no other use for. */
#define MSHEAF_TOTAL	 (128 << 20)
#define MSHEAF_BYTES_MAX (256 << 10)
#define MSHEAF_BLOCKS	 8
#define MSHEAF_GROW	 2
#define MSHEAF_GROWN_MAX (2 << 20)
#define MSHEAF_FILLED	 1
#define MSHEAF_SPILLED	 2

/* The share is a user's: a thread counts from its first medium sheaf's slow path until
 * its sheaves are flushed (idle drain, malloc_trim, exit). Counting every state instead,
 * a program's main thread waiting in pthread_join took a third of the bound from two
 * workers replacing blocks of 16 B - 128 KiB: their largest sheaves held 10 blocks instead
 * of 16, each missed its medium-block cache half as often again as one worker alone, and
 * two workers ran 1.22x one (tools/bench/results/medium-users.md). */
static void msheaf_user(struct uslub_thread *t)
{
	if (!atomic_load_explicit(&t->medium_user, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&t->medium_user, 1, memory_order_relaxed))
		__atomic_fetch_add(&uslub_medium_users, 1, __ATOMIC_RELAXED);
}

static void msheaf_user_gone(struct uslub_thread *t)
{
	if (atomic_exchange_explicit(&t->medium_user, 0, memory_order_relaxed))
		__atomic_fetch_sub(&uslub_medium_users, 1, __ATOMIC_RELAXED);
}

/* 0 with USLUB_SHEAVES=0, as every cache's. */
static unsigned msheaf_cap(const struct cache_cpu *cc, unsigned n)
{
	size_t share = MSHEAF_TOTAL / uslub_medium_sharers() / NR_MSHEAVES;
	size_t block = (size_t)n << USLUB_PAGE_SHIFT;
	size_t base =
	    MSHEAF_BLOCKS * block > MSHEAF_BYTES_MAX ? MSHEAF_BLOCKS * block : MSHEAF_BYTES_MAX;
	size_t limit = base > MSHEAF_GROWN_MAX ? base : MSHEAF_GROWN_MAX;
	size_t want = base + cc->nr_partial * block;
	want = want < limit ? want : limit;
	unsigned cap = (unsigned)((share < want ? share : want) / block);
	cap = cap > SHEAF_MAX ? SHEAF_MAX : cap;
	return cap < uslub_config.sheaves ? cap : uslub_config.sheaves;
}

/* A slow path at one end of the sheaf (MSHEAF_FILLED or MSHEAF_SPILLED): past the other
 * end last time, the sheaf grows. */
static void msheaf_moved(struct cache_cpu *cc, unsigned what)
{
	if (cc->last_move && cc->last_move != what && cc->nr_partial < SHEAF_MAX)
		cc->nr_partial = (uint16_t)(cc->nr_partial + MSHEAF_GROW);
	cc->last_move = (uint8_t)what;
}

/* A live thread's sheaf opens at its first slow path, as a cache's does (thread.h). */
static void msheaf_open(struct cache_cpu *cc, unsigned n)
{
	if (!cc->sheaf_cap) {
		cc->sheaf_cap = (uint16_t)msheaf_cap(cc, n);
		/* Lemire's magic of the block's bytes: only its start passes. */
		cc->magic = cc->sheaf_cap ? UINT64_MAX / ((uint64_t)n << USLUB_PAGE_SHIFT) + 1 : 0;
	}
}

static unsigned msheaf_pages(const struct uslub_thread *t, const struct cache_cpu *cc)
{
	return (unsigned)(cc - t->mcpu) + MEDIUM_MIN_PAGES;
}

/* The thread's sheaf of n-page blocks, open, or NULL where it may have none. */
static struct cache_cpu *msheaf_of(struct uslub_thread *t, unsigned n)
{
	if (t->state != THREAD_LIVE || !medium_testable(n))
		return NULL;
	msheaf_user(t);
	struct cache_cpu *cc = &t->mcpu[n - MEDIUM_MIN_PAGES];
	msheaf_open(cc, n);
	return cc->sheaf_cap ? cc : NULL;
}

/* Up to `want` blocks of exactly n pages from the thread's medium-block cache into the
 * sheaf, which is empty. */
static void msheaf_fill(struct uslub_thread *t, struct cache_cpu *cc, unsigned n, unsigned want)
{
	unsigned k = 0;
	bool colored = medium_colorable(n);
	bool locked = uslub_medium_enter(t);
	while (k < want && t->medium.count[n]) {
		struct page_desc *d = medium_bin_pop(&t->medium, n);
		d->flags = 0;
		void *b = medium_color(d, colored);
		/* A block this sheaf spilled has its test still (slab.h): not written again. */
		if (!medium_test_is(d, n, b))
			medium_tests_set(d, n, b);
		mark_free(b);
		cc->sheaf[k++] = b;
	}
	uslub_medium_exit(t, locked);
	if (k)
		sheaf_set_count(cc, k);
}

/* The sheaf's oldest `k` blocks (of n pages) to the thread's medium-block cache in one
 * visit, or to their zone (another node's, or the thread's state not live), the rest
 * moved down. */
static void msheaf_spill(struct uslub_thread *t, struct cache_cpu *cc, unsigned n, unsigned k)
{
	unsigned count = cc->sheaf_count, i = 0;
	if (t->state == THREAD_LIVE) {
		bool locked = uslub_medium_enter(t);
		for (; i < k; i++) {
			struct page_desc *d = page_desc_of(cc->sheaf[i]);
			if (!uslub_medium_free(t, d, n, true))
				break;
		}
		uslub_medium_exit(t, locked);
	}
	for (; i < k; i++)
		uslub_large_release(page_desc_of(cc->sheaf[i]));
	if (count > k)
		/* Out: libc's code, where the idle drain, seeing no frame of ours under a
		 * signal that stopped the thread here, would take the sheaf half moved. */
		USLUB_OUT_VOID(memmove(cc->sheaf, cc->sheaf + k, (count - k) * sizeof(void *)));
	sheaf_set_count(cc, count - k);
}

/* cc: the calling thread's, open. */
static void msheaf_push(struct cache_cpu *cc, void *p)
{
	if (cc->sheaf_count >= cc->sheaf_cap) {
		struct uslub_thread *t = uslub_tls_thread;
		unsigned n = msheaf_pages(t, cc);
		msheaf_moved(cc, MSHEAF_SPILLED);
		unsigned cap = msheaf_cap(cc, n);
		cc->sheaf_cap = (uint16_t)(cap ? cap : 1);
		/* The older blocks go, down to half the sheaf with p. */
		if (cc->sheaf_count >= cc->sheaf_cap)
			msheaf_spill(t, cc, n, cc->sheaf_count - cc->sheaf_cap / 2);
	}
	mark_free(p);
	cc->sheaf[cc->sheaf_count] = p;
	/* A push, counted as the fast path's are (types.h, uslub_cc_stat). */
	uslub_own_store(cc->sheaf_count, (uint16_t)(cc->sheaf_count + 1));
}

void *uslub_msheaf_alloc(size_t size)
{
	unsigned n = medium_pages(size);
	struct uslub_thread *t = uslub_tls_thread;
	struct cache_cpu *cc = msheaf_of(t, n);
	if (!cc)
		return NULL;
	msheaf_moved(cc, MSHEAF_FILLED);
	unsigned cap = msheaf_cap(cc, n);
	if (!cap) {
		cc->sheaf_cap = 0;
		cc->magic = 0;
		return NULL;
	}
	cc->sheaf_cap = (uint16_t)cap;
	/* Half a sheaf and the block asked for from the thread's cache, in one visit and
	 * without the general path's checks, when it holds blocks of this count (looked at
	 * inside the visit: an idle drain may be emptying the cache). */
	msheaf_fill(t, cc, n, cap / 2 + 1);
	unsigned k = cc->sheaf_count;
	if (k) {
		void *p = cc->sheaf[k - 1];
		/* A pop, counted as the fast path's (a medium hit). */
		uslub_own_store(cc->sheaf_count, (uint16_t)(k - 1));
		uslub_stat(cc, ALLOC_FASTPATH);
		mark_allocated(p);
		return p;
	}
	void *p = uslub_thread_large_alloc(size, 0, false);
	if (p && !cc->sheaf_count)
		msheaf_fill(t, cc, n, cap / 2);
	return p;
}

bool uslub_msheaf_free(void *p, struct page_desc *d)
{
	unsigned n = d->objects;
	if (!medium_testable(n))
		return false;
	struct uslub_thread *t = uslub_tls_thread;
	/* A thread that frees before it allocates (a consumer) gets its state here. */
	if (unlikely(t->state == THREAD_EMPTY)) {
		struct uslub_thread *made = uslub_thread_create();
		if (made)
			t = made;
	}
	struct cache_cpu *cc = msheaf_of(t, n);
	if (!cc)
		return false;
	/* Free now, the block takes the colour its sheaf's blocks have (one handed out
	 * aligned, or resized to another count, may have another). */
	void *start = medium_sheaf_color(d, n);
	if (start != p || !medium_tested(d))
		medium_tests_set(d, n, start);
	msheaf_push(cc, start);
	return true;
}

void uslub_msheaf_overflow(void *p, struct cache_cpu *cc)
{
	msheaf_push(cc, p);
}

void uslub_msheaves_flush(struct uslub_thread *t, bool final)
{
	for (unsigned k = 0; k < NR_MSHEAVES; k++) {
		struct cache_cpu *cc = &t->mcpu[k];
		/* Only a sheaf that was ever open: the others' page of the state stays
		 * untouched (thread.c). */
		if (!cc->sheaf_cap && !cc->magic && !cc->nr_partial && !cc->last_move &&
		    !cc->sheaf_count)
			continue;
		if (final) {
			cc->sheaf_cap = 0;
			cc->magic = 0;
		}
		cc->nr_partial = 0;
		cc->last_move = 0;
		if (cc->sheaf_count)
			msheaf_spill(t, cc, k + MEDIUM_MIN_PAGES, cc->sheaf_count);
	}
	msheaf_user_gone(t);
}

bool uslub_msheaves_shrink(void)
{
	struct uslub_thread *t = uslub_tls_thread;
	if (t->state == THREAD_LIVE)
		uslub_msheaves_flush(t, false);
	return uslub_medium_shrink();
}
