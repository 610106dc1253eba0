/* The thread's medium-block cache (medium.c), its inline half: the bins, the owner's way in,
 * and malloc's and free's hits. Included at the end of slab.h, whose medium blocks'
 * colours and tests it uses. */
#ifndef USLUB_SLAB_MEDIUM_H
#define USLUB_SLAB_MEDIUM_H

#include "slab/slab.h"

#pragma GCC visibility push(hidden)

/* The request of large block d, which starts at `start`, kept as the bytes its pages
 * hold after it, in local_count (which only slabs use otherwise: the descriptor has no
 * other room). Only the checkers read it, whose blocks keep their exact pages: a size
 * class's slack (large.c, class_pages) may pass its 16 bits. */
static inline void uslub_large_set_request(struct page_desc *d, const void *start, size_t size)
{
	d->local_count =
	    (uint16_t)((uintptr_t)page_address(d) + ((size_t)d->objects << USLUB_PAGE_SHIFT) -
		       (uintptr_t)start - size);
}

void uslub_medium_init(struct uslub_thread *t);

#if USLUB_STATS_ENABLED
#define medium_stat(t, item, n)                                                                    \
	uslub_own_store((t)->medium_stat[USLUB_##item], (t)->medium_stat[USLUB_##item] + (n))
#else
#define medium_stat(t, item, n) ((void)(t), (void)(n))
#endif

/* The bins (medium.c): one list per page count, and a mask of those that hold a block. A
 * count's bit is the count, but 64's is 63, which no count has (medium_count). */
static inline unsigned medium_bit(unsigned n)
{
	return n < 64 ? n : 63;
}
static inline unsigned medium_of_bit(unsigned b)
{
	return b < 63 ? b : 64;
}
static inline void medium_bin_push(struct medium_bins *m, struct page_desc *d, unsigned n)
{
	d->next = m->head[n];
	m->head[n] = d;
	m->count[n]++;
	/* Relaxed atomics: a depot's mask is peeked at before its lock (depot.c), and the
	 * pages by the stats and the background thread. */
	__atomic_store_n(&m->nonempty, m->nonempty | 1ULL << medium_bit(n), __ATOMIC_RELAXED);
	__atomic_store_n(&m->pages, m->pages + n, __ATOMIC_RELAXED);
}
static inline struct page_desc *medium_bin_pop(struct medium_bins *m, unsigned n)
{
	struct page_desc *d = m->head[n];
	m->head[n] = d->next;
	if (!--m->count[n])
		__atomic_store_n(&m->nonempty, m->nonempty & ~(1ULL << medium_bit(n)),
				 __ATOMIC_RELAXED);
	__atomic_store_n(&m->pages, m->pages - n, __ATOMIC_RELAXED);
	return d;
}
/* The first bin from n to n + n/4 that has a block, or 0. */
static inline unsigned medium_bin_fit(const struct medium_bins *m, unsigned n)
{
	unsigned last = n + n / 4 < MEDIUM_MAX_PAGES ? n + n / 4 : MEDIUM_MAX_PAGES;
	uint64_t fit =
	    m->nonempty & ~((1ULL << medium_bit(n)) - 1) & ((2ULL << medium_bit(last)) - 1);
	return fit ? medium_of_bit((unsigned)__builtin_ctzll(fit)) : 0;
}

/* The owner in, without waiting: false when an idle drain claims the cache. */
static inline bool uslub_medium_try_enter(struct uslub_thread *t)
{
	atomic_store_explicit(&t->medium_busy, 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst); /* membarrier makes it a full fence */
	if (unlikely(atomic_load_explicit(&t->medium_claim, memory_order_acquire))) {
		atomic_store_explicit(&t->medium_busy, 0, memory_order_release);
		return false;
	}
	if (unlikely(!atomic_load_explicit(&t->active, memory_order_relaxed)))
		atomic_store_explicit(&t->active, true, memory_order_relaxed);
	return true;
}
/* The owner's way into its cache (medium.c, "ownership"): a store and a compiler barrier,
 * unless an idle drain is claiming the cache, when it waits on slow_lock instead (true:
 * taken). uslub_medium_exit lets go of either. */
static inline bool uslub_medium_enter(struct uslub_thread *t)
{
	return !uslub_medium_try_enter(t) && uslub_slow_enter(t);
}
static inline void uslub_medium_exit(struct uslub_thread *t, bool locked)
{
	if (locked)
		uslub_slow_exit(t, true);
	else
		atomic_store_explicit(&t->medium_busy, 0, memory_order_release);
}

/* The hits: malloc and free of a medium block that the calling thread's cache serves as
 * it is, inline in their callers' thin entries (thread/alloc.c, api/lookup.c), ahead of
 * the general ones (uslub_large_alloc and uslub_large_free), which refill, flush, make the
 * thread's state, call the debug hooks and wait for an idle drain. They call nothing - a
 * case they do not serve returns NULL or false - so their callers save no register: out
 * of line, with the calls in their cold paths, they took 55 instructions a free and 57 a
 * malloc at 32 KiB, a third of them saves, restores and calls
 * (tools/bench/results/medium-blocks.md). The huge cache's clock is looked at after the
 * hit, through uslub_medium_tick, when it holds a mapping. */
static inline bool uslub_medium_usable(const struct uslub_thread *t)
{
	return t->state == THREAD_LIVE && !uslub_block_debug && t->node == t->medium_node;
}
/* The huge cache's clock (page.h, uslub_huge_cache_tick), then p: out of line. */
void *uslub_medium_tick(void *p);
static inline bool uslub_tick_due(void)
{
	return atomic_load_explicit(&uslub_huge_expiry_ms, memory_order_relaxed) != 0;
}
/* size: USLUB_MAX_SMALL < size <= MEDIUM_MAX_PAGES pages. */
static inline void *uslub_medium_pop(size_t size)
{
	struct uslub_thread *t = uslub_tls_thread;
	unsigned n = medium_pages(size);
	if (unlikely(!uslub_medium_usable(t)) || unlikely(!uslub_medium_try_enter(t)))
		return NULL;
	/* Its own bin first: medium_bin_fit's masks cost more than the pop. */
	unsigned m = t->medium.count[n] ? n : medium_bin_fit(&t->medium, n);
	struct page_desc *d = m ? medium_bin_pop(&t->medium, m) : NULL;
	uslub_medium_exit(t, false);
	if (!d)
		return NULL;
	/* Handed out here, its free takes the slow path: a test a sheaf left goes. */
	if (medium_tested(d))
		medium_tests_clear(d);
	/* Coloured as the sheaves' blocks are (a block of more pages than asked may be of
	 * the count whose blocks are not). */
	d->flags = 0;
	void *p = medium_color(d, medium_colorable(d->objects));
	uslub_large_set_request(d, p, size);
	medium_stat(t, MEDIUM_HIT, 1);
	return p;
}
/* d: a live large block, not cached, held or guarded; the caller frees its start. Past
 * high the general path flushes, with errno kept around its system calls. */
static inline bool uslub_medium_push(struct page_desc *d)
{
	struct uslub_thread *t = uslub_tls_thread;
	unsigned n = d->objects;
	if (unlikely(!medium_cacheable(n)) || unlikely(!uslub_medium_usable(t)))
		return false;
	if (unlikely(uslub_nr_nodes > 1) && region_of(d)->nid != t->medium_node)
		return false;
	if (unlikely(!uslub_medium_try_enter(t)))
		return false;
	/* Read once in: an idle drain empties the cache while the owner is out. */
	if (unlikely(t->medium.pages + n > t->medium_high)) {
		uslub_medium_exit(t, false);
		return false;
	}
	if (medium_tested(d))
		medium_tests_clear(d);
	d->flags = PF_CACHED;
	medium_bin_push(&t->medium, d, n);
	medium_stat(t, MEDIUM_FREE, 1);
	uslub_medium_exit(t, false);
	return true;
}
/* The idle drain's way in, under the thread's slow_lock: the cache to the depot unless the
 * owner is in it. */
void uslub_medium_drain_idle(struct uslub_thread *t);
/* A block of npages (MEDIUM_MIN_PAGES..MEDIUM_MAX_PAGES) pages, or up to a quarter more,
 * in the large block's state but for its request and flags (PF_COLD when its pages are
 * fresh); a miss refills from `zone`. NULL when the zone has no memory. Under the
 * thread's slow_lock, as are the two below. */
struct page_desc *uslub_medium_alloc(struct uslub_thread *t, unsigned zone, unsigned npages);
/* Large block d of npages pages into the cache; false if it is another node's. A block
 * from a sheaf (`sheafed`: tested and marked free) keeps its test (medium_tests_set). */
bool uslub_medium_free(struct uslub_thread *t, struct page_desc *d, unsigned npages, bool sheafed);
/* Every cached block to the depot (or the zones), and the cache's demand forgotten. */
void uslub_medium_drain(struct uslub_thread *t);
/* ---- the depots (depot.c) -------------------------------------------------------------- */

/* Blocks moved in one batch: one array on the stack, so a flush takes no memory. */
#define FLUSH_BATCH 64
/* Depots a node has (depot.c says why more than one). */
#define DEPOT_SHARDS 2
/* t's own depot among its node's: its arena's (round robin where there is one arena). */
void uslub_depot_join(struct uslub_thread *t);
/* Up to b blocks of n pages (or a little more) from t's node's depots, its own first: the
 * first returned, the rest into t's cache; NULL if none holds the size. */
struct page_desc *uslub_depot_take(struct uslub_thread *t, unsigned n, unsigned b);
/* k blocks of t's cache (pages[i]: block i's bin), each into its home's depot; what a
 * depot cannot take goes back to the zones. */
void uslub_depot_put(const struct uslub_thread *t, struct page_desc **batch, uint16_t *pages,
		     unsigned k);
/* The large blocks in use noted at their highest, which bounds what a depot holds: where
 * a cache takes a batch, the only place a medium block comes into use past the caches. */
void uslub_depot_note_use(void);
/* The nodes' depots: given back to the zones when unused for DEPOT_DECAY_MS (the
 * background thread's pass), or at once (malloc_trim); their pages; fork's locking. */
void uslub_medium_depots_decay(void);
void uslub_medium_depots_flush(void);
/* The shrink hook (hooks.h): the calling thread's cache and the depots to the zones. */
bool uslub_medium_shrink(void);
uint64_t uslub_medium_depot_pages(void);
/* What t's own depot may hold now, in pages (the large blocks in use at their recent high,
 * within a cap: depot.c, depot_max). */
uint64_t uslub_medium_depot_bound(const struct uslub_thread *t);
/* Tests: the pages one depot holds; take or let go of its lock, as a thread flushing into
 * it holds it. */
uint64_t uslub_medium_depot_shard_pages(unsigned node, unsigned shard);
void uslub_medium_depot_hold(unsigned node, unsigned shard, bool hold);
void uslub_medium_lock_all(void);
void uslub_medium_unlock_all(void);
extern const char *const uslub_medium_stat_names[USLUB_NR_MEDIUM_STATS];
extern uint64_t uslub_medium_stat[USLUB_NR_MEDIUM_STATS]; /* of threads gone */
void *uslub_large_realloc(struct page_desc *d, void *p, size_t size);

#pragma GCC visibility pop
#endif
