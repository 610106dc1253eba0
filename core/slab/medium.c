/* The thread's medium-block cache and the node's depot behind it: freed large blocks of
 * MEDIUM_MIN_PAGES..MEDIUM_MAX_PAGES pages (8 KiB < size <= 256 KiB), kept by size for
 * the next request, so a program that replaces buffers, vectors and strings of these sizes
 * does it without the zone lock and without the buddy's split and coalesce (issue 24:
 * every such block went through both, under a lock both threads took). tcmalloc's per-CPU
 * caches and transfer cache, and the kernel's per-CPU page lists up to order 3 since Linux
 * 5.13 with the sheaves' barn behind them, are the same answer.
 *
 *  - bins: one list per page count (struct medium_bins). A request of n pages takes a
 *    block of n pages, or of up to n + n/4 when its own bin is empty: large.c keeps the
 *    request, and what it costs is pages the block had already, not new ones.
 *  - miss: a batch comes from the node's depots, its own first, else from the zone
 *    in one trip, cut from one run of free pages (one lock, one search). The batch grows
 *    with `high`.
 *  - high: what the thread's cache may hold, in pages. MEDIUM_HIGH_MIN at first (what the
 *    old per-size slots held), raised by every batch the thread takes and every flush it
 *    makes, up to MEDIUM_HIGH_MAX: a thread that replaces blocks at a steady rate keeps
 *    what its churn needs, one that makes a few keeps a few.
 *  - flush: past high, half of every bin goes, the bin just freed into first, so each
 *    size keeps some stock, down to half of high: to the depot while it has room (a
 *    thread that frees what another allocated - producer and consumer - hands them over
 *    a batch at a time), the rest to the zones, one lock hold per zone and batch.
 *  - the depots (depot.c): a node's, behind the caches; a flush goes to one, a miss takes
 *    a batch from one before the zone.
 *  - idle, exit: a thread's whole cache to the depot (thread.c, idle drain), high to its
 *    start.
 *
 * Ownership. The owner goes into its cache on every medium malloc and free, and an
 * atomic exchange on slow_lock each time cost as much as the rest of the cache's work
 * (19 ns a pair here: tools/bench/results/medium-blocks.md). So the owner only marks
 * itself `medium_busy` (a plain store) and reads `medium_claim`; the idle drain, holding
 * slow_lock, sets claim, makes every running thread pass a full barrier (membarrier(2),
 * as liburcu's memb flavour does for its readers), and goes in only if busy is clear -
 * Dekker's handshake with the costly fence on the rare side. An owner that finds claim
 * set takes slow_lock, which the drain holds until it has cleared claim. Without
 * membarrier the drain leaves the cache alone (exit and malloc_trim still empty it, the
 * owner's own doing).
 *
 * A cached block stays a large block (kind PAGE_LARGE, PF_CACHED), in a thread's cache or
 * the depot, so freeing it again is reported as a double free, and the heap walker counts
 * it apart. uslub_large_bytes counts the pages of large blocks out of the buddy, the
 * cached ones with them, so that the hits write no shared counter; the stats take the
 * caches' pages back out. The owner touches its cache under its slow_lock, as its page
 * cache. */
#include "slab/slab.h"
#include "os/os.h"
#include "page/page.h"

const char *const uslub_medium_stat_names[USLUB_NR_MEDIUM_STATS] = {
#define X(id, name) #name,
    USLUB_MEDIUM_STAT_ITEMS(X)
#undef X
};
uint64_t uslub_medium_stat[USLUB_NR_MEDIUM_STATS];

/* Flushes raise high up to 256 KiB: a consumer passes blocks on a batch at a time without
 * holding what a producer waits for. */
#define MEDIUM_FLUSH_HIGH (4 * MEDIUM_HIGH_MIN)
/* Blocks looked at for a batch's run of free pages (uslub_pages_alloc_run): with none,
 * realloc_mix peaked 4% higher (fewer batches from free memory, more growth); with all
 * RUN_TRIES, 8-128 KiB blocks replaced at random took 38% more instructions
 * (tools/bench/results/medium-blocks.md). */
#define BATCH_RUN_TRIES 16

/* What a thread's high may reach: MEDIUM_HIGH_MAX, less where the caches of the threads
 * using medium blocks would pass MEDIUM_HIGH_TOTAL together (types.h). */
static unsigned high_cap(void)
{
	unsigned share = MEDIUM_HIGH_TOTAL / uslub_medium_sharers();
	return share > MEDIUM_HIGH_MAX	     ? MEDIUM_HIGH_MAX
	       : share < MEDIUM_HIGH_MIN_MAX ? MEDIUM_HIGH_MIN_MAX
					     : share;
}

/* Raises high by `pages`, within high_cap(), which it returns. */
static unsigned raise_high(struct uslub_thread *t, unsigned pages)
{
	unsigned high = t->medium_high + pages, cap = high_cap();
	t->medium_high = high < cap ? high : cap;
	return cap;
}

/* Blocks of n pages a refill brings: a quarter of high's worth, 1 to MEDIUM_BATCH. */
static unsigned batch_of(const struct uslub_thread *t, unsigned n)
{
	unsigned b = t->medium_high / 4 / n;
	return b < 1 ? 1 : b > MEDIUM_BATCH ? MEDIUM_BATCH : b;
}

/* Page d made the head of a block of n pages, in the cache's state. */
static void carve(struct page_desc *d, unsigned n, unsigned order, uint8_t flags)
{
	d->cls = CLS_NONE; /* fails the free fast path's object test */
	__atomic_store_n(&d->kind, PAGE_LARGE, __ATOMIC_RELAXED);
	d->objects = (uint16_t)n;
	d->order = (uint8_t)order;
	d->owner = NULL;
	d->flags = flags;
	for (unsigned i = 1; i < n; i++)
		d[i].head = d;
	__atomic_store_n(&d->head, d, __ATOMIC_RELEASE);
}

/* A batch of blocks of n pages: from the depot, else from `zone` in one trip - one run
 * of free pages if the zone has it, else a single block from its free memory (warm pages
 * reused beat a batch: a fresh page costs a fault), else cut from a block the zone grows
 * for it. The first is returned, the rest go into the bins. */
static noinline struct page_desc *refill(struct uslub_thread *t, unsigned zone, unsigned n)
{
	unsigned cap = raise_high(t, n);
	unsigned b = batch_of(t, n), before = t->medium.pages;
	/* Never past the cache's bound: the next free flushes what passes high. */
	while (b > 1 && t->medium.pages + (b - 1) * n > cap)
		b--;
	medium_stat(t, MEDIUM_MISS, 1);
	struct page_desc *d = uslub_depot_take(t, n, b);
	if (d) {
		uslub_depot_note_use();
		medium_stat(t, MEDIUM_DEPOT, 1);
		medium_stat(t, MEDIUM_REFILL, (t->medium.pages - before) / d->objects);
		raise_high(t, t->medium.pages - before);
		return d;
	}
	/* A batch where it lies ready or nearly; the full search among smaller pieces (up
	 * to RUN_TRIES blocks, most of the instructions of 8-128 KiB blocks replaced at
	 * random) is for the block asked for. */
	d = uslub_pages_alloc_run(zone, (size_t)b * n, b > 1 ? BATCH_RUN_TRIES : RUN_TRIES);
	if (!d && b > 1 && (d = uslub_pages_alloc_run(zone, n, RUN_TRIES)))
		b = 1;
	if (!d) {
		size_t pages = (size_t)b * n;
		d = uslub_pages_alloc_exact(zone, uslub_get_order(pages << USLUB_PAGE_SHIFT), pages,
					    false, 0);
		if (!d)
			return NULL;
	}
	unsigned order = uslub_get_order((size_t)n << USLUB_PAGE_SHIFT);
	/* The run's first block keeps its freshness, so calloc skips zeroing it. */
	carve(d, n, order, d->flags & PF_COLD);
	for (unsigned i = 1; i < b; i++) {
		carve(d + (size_t)i * n, n, order, PF_CACHED);
		medium_bin_push(&t->medium, d + (size_t)i * n, n);
	}
	atomic_fetch_add(&uslub_large_bytes, ((size_t)b * n) << USLUB_PAGE_SHIFT);
	uslub_note_in_use();
	uslub_depot_note_use();
	raise_high(t, (b - 1) * n);
	medium_stat(t, MEDIUM_REFILL, b - 1);
	return d;
}

void uslub_medium_init(struct uslub_thread *t)
{
	t->medium_high = MEDIUM_HIGH_MIN;
	t->medium_node = t->node;
	uslub_depot_join(t);
}

struct page_desc *uslub_medium_alloc(struct uslub_thread *t, unsigned zone, unsigned n)
{
	if (unlikely(t->node != t->medium_node)) {
		/* The thread moved: its cached blocks are the old node's memory. */
		uslub_medium_drain(t);
		t->medium_node = t->node;
	}
	unsigned m = medium_bin_fit(&t->medium, n);
	if (!m)
		return refill(t, zone, n);
	struct page_desc *d = medium_bin_pop(&t->medium, m);
	d->flags = 0;
	medium_stat(t, MEDIUM_HIT, 1);
	return d;
}

/* Blocks out of the cache until it holds at most `keep` pages: half of each bin's, the
 * warmest first, bin `first` first, so every size keeps some stock. A step takes a block
 * or moves to the next bin (at most 64 a round, and a round halves every bin), so the
 * steps are bounded. */
static noinline void flush(struct uslub_thread *t, unsigned keep, unsigned first)
{
	struct medium_bins *m = &t->medium;
	struct page_desc *batch[FLUSH_BATCH];
	uint16_t pages[FLUSH_BATCH];
	unsigned k = 0, flushed = 0, n = first, take = (m->count[first] + 1) / 2;
	uint64_t left = m->nonempty & ~(1ULL << medium_bit(first));
	for (unsigned steps = m->pages + 512; m->pages > keep && steps; steps--) {
		if (!take || !m->count[n]) {
			if (!left)
				left = m->nonempty; /* another round */
			if (!left)
				break;
			n = medium_of_bit((unsigned)__builtin_ctzll(left));
			left &= left - 1;
			take = (m->count[n] + 1) / 2;
			continue;
		}
		batch[k] = medium_bin_pop(m, n);
		/* Out of the thread's cache: a test its sheaf left goes (slab.h). */
		if (medium_tested(batch[k]))
			medium_tests_clear(batch[k]);
		pages[k++] = (uint16_t)n;
		take--;
		flushed++;
		if (k == FLUSH_BATCH) {
			uslub_depot_put(t, batch, pages, k);
			k = 0;
		}
	}
	if (k)
		uslub_depot_put(t, batch, pages, k);
	medium_stat(t, MEDIUM_FLUSH, flushed);
}

bool uslub_medium_free(struct uslub_thread *t, struct page_desc *d, unsigned n, bool sheafed)
{
	if (unlikely(region_of(d)->nid != t->medium_node))
		return false;
	if (!sheafed && medium_tested(d))
		medium_tests_clear(d);
	d->flags = PF_CACHED;
	medium_bin_push(&t->medium, d, n);
	medium_stat(t, MEDIUM_FREE, 1);
	if (t->medium.pages > t->medium_high) {
		unsigned before = t->medium.pages;
		flush(t, t->medium_high / 2, n);
		/* A thread that frees more than it takes batches its flushes, up to a limit:
		 * it holds what others will allocate (a consumer's frees). */
		if (t->medium_high < MEDIUM_FLUSH_HIGH)
			raise_high(t, before - t->medium.pages);
	}
	return true;
}

void *uslub_medium_tick(void *p)
{
	uslub_huge_cache_tick();
	return p;
}

void uslub_medium_drain(struct uslub_thread *t)
{
	if (t->medium.pages)
		flush(t, 0, MEDIUM_MIN_PAGES);
	t->medium_high = MEDIUM_HIGH_MIN;
}

void uslub_medium_drain_idle(struct uslub_thread *t)
{
	atomic_store_explicit(&t->medium_claim, 1, memory_order_relaxed);
	if (uslub_os_membarrier() == 0 &&
	    !atomic_load_explicit(&t->medium_busy, memory_order_acquire))
		uslub_medium_drain(t);
	atomic_store_explicit(&t->medium_claim, 0, memory_order_release);
}

bool uslub_medium_shrink(void)
{
	int64_t before = (int64_t)atomic_load(&uslub_large_bytes);
	struct uslub_thread *t = uslub_tls_thread;
	if (t->state == THREAD_LIVE) {
		bool locked = uslub_medium_enter(t);
		uslub_medium_drain(t);
		uslub_medium_exit(t, locked);
	}
	uslub_medium_depots_flush();
	return (int64_t)atomic_load(&uslub_large_bytes) < before;
}
