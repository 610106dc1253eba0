/* The thread's page cache (core/page/pcp.c): blocks of orders 0-3, sized to use.
 *
 * - Turnover without the node lock: a discarded order-3 slab waits in the thread's cache,
 *   and the next slab of that cache is made from it at its preferred order while another
 *   thread holds the node's lock - no fallback, no wait; the same for orders 0-2.
 * - The cache stays within its high mark; a trim empties it; the heap walker finds every
 *   cached block loose and counted.
 * - Parked threads: N threads that each hold a dozen small blocks of different sizes and
 *   wait keep at most PCP_SPARE pages each in their page caches (before the refill was
 *   sized to use: 8, the rest of a 16-page batch), take their blocks as early objects with
 *   their states unpublished, and cost at most RSS_BOUND_KIB resident each, their stacks
 *   included (measured 18 KiB, glibc 15; 31 KiB before early objects, when the fast
 *   paths read and the refills wrote a page of cpu[] per four caches used; 35 KiB before
 *   sheaves opened at first use, 133 KiB before a thread's first objects came from shared
 *   slabs - the slabs they touched were most of it; not checked in sanitizer builds,
 *   argument "rss").
 * - The medium-block cache beside it (core/slab/medium.c) stays within its high mark,
 *   which starts at MEDIUM_HIGH_MIN and grows with churn up to MEDIUM_HIGH_MAX; a block
 *   it holds is the next one of its size, or of a size up to a quarter smaller; a thread
 *   that replaces blocks of 3-8 pages at random is served from it nearly always (the zone
 *   once a batch); a trim empties it. Blocks of up to 64 KiB are made in the
 *   slab zone, bigger ones in the large zone. */
#include "debug/check.h"
#include "thread/thread.h"
#include "slab/slab.h"
#include "test_util.h"

#include <pthread.h>
#include <time.h>

#define PARKED	      200
#define PCP_SPARE     3
#define RSS_BOUND_KIB 20

static const size_t sizes[] = {16, 24, 48, 64, 96, 128, 200, 256, 512, 768, 1024, 2048};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int holding, release_lock;

/* Holds the slab zone's lock of node 0 until told to let go (or 5 s, so a wrong cache
 * cannot hang the test: the main thread then notices it waited). */
static void *lock_holder(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&uslub_nodes[0].lock);
	pthread_mutex_lock(&lock);
	holding = 1;
	pthread_cond_broadcast(&cv);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	while (!release_lock && pthread_cond_timedwait(&cv, &lock, &until) == 0)
		;
	pthread_mutex_unlock(&lock);
	pthread_mutex_unlock(&uslub_nodes[0].lock);
	return NULL;
}

static void turnover_without_lock(void)
{
	tu_section("slab turnover from the page cache while the node lock is held elsewhere");
	struct uslub_thread *t = uslub_tls_thread;
	uslub_pcp_drain(t, 0);
	CHECK(t->pcp_node == 0);
	for (unsigned i = 0; i < NSIZES; i++) {
		unsigned cls = uslub_size_to_class(sizes[i]);
		struct uslub_cache *c = &uslub_caches[cls];
		struct cache_cpu *cc = &t->cpu[cls];
		if (c->debug || c->order > PCP_MAX_ORDER)
			continue;
		void *fl;
		struct page_desc *s = uslub_new_slab(c, t, cc, &fl);
		CHECKF(s && s->order == c->order, "%s: a slab of order %u", c->name, c->order);
		if (!s)
			continue;
		uslub_discard_slab(c, s, t);
		CHECKF(t->pcp_count >= (1U << c->order), "%s: its block waits in the cache",
		       c->name);

		holding = release_lock = 0;
		pthread_t h;
		pthread_create(&h, NULL, lock_holder, NULL);
		pthread_mutex_lock(&lock);
		while (!holding)
			pthread_cond_wait(&cv, &lock);
		pthread_mutex_unlock(&lock);
		uint64_t hits = t->pcp_stat[USLUB_PCP_HIT][c->order];
		uint64_t fallbacks = cc->stat[USLUB_STAT_ORDER_FALLBACK];
		double t0 = tu_now();
		struct page_desc *again = uslub_new_slab(c, t, cc, &fl);
		double waited = tu_now() - t0;
		pthread_mutex_lock(&lock);
		release_lock = 1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&lock);
		pthread_join(h, NULL);
		CHECKF(again == s, "%s: the cached block is the next slab", c->name);
		CHECKF(again && again->order == c->order, "%s: at the preferred order", c->name);
		CHECKF(cc->stat[USLUB_STAT_ORDER_FALLBACK] == fallbacks, "%s: no fallback",
		       c->name);
		CHECKF(t->pcp_stat[USLUB_PCP_HIT][c->order] == hits + 1,
		       "%s: counted as a hit of order %u", c->name, c->order);
		CHECKF(waited < 1.0, "%s: no wait for the lock (%.3f s)", c->name, waited);
		if (again)
			uslub_discard_slab(c, again, t);
	}

	tu_section("the cache keeps within its high mark; the walker finds it consistent");
	unsigned cls = uslub_size_to_class(2048);
	struct uslub_cache *c = &uslub_caches[cls];
	struct page_desc *slabs[32];
	unsigned n = 0;
	for (; n < 32; n++) {
		void *fl;
		slabs[n] = uslub_new_slab(c, t, &t->cpu[cls], &fl);
		if (!slabs[n])
			break;
	}
	CHECK_EQ(n, 32);
	for (unsigned i = 0; i < n; i++) {
		uslub_discard_slab(c, slabs[i], t);
		CHECKF(t->pcp_count <= t->pcp_high && t->pcp_high <= PCP_HIGH,
		       "%u pages cached, high %u", t->pcp_count, t->pcp_high);
	}
	CHECKF(t->pcp_high > PCP_HIGH_MIN, "refills raised the high mark (%u)", t->pcp_high);
	CHECK(t->pcp_stat[USLUB_PCP_DRAIN][c->order] > 0);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.pcp_pages, t->pcp_count);
	CHECK(uslub_pages_check(0) == 0);
	MALLOC_TRIM(0);
	CHECK_EQ(t->pcp_count, 0);
	CHECK_EQ(t->pcp_high, PCP_HIGH_MIN);
}

static void large_zones(void)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* Medium blocks (up to MEDIUM_MAX_PAGES pages) are made in the thread's medium zone,
	 * bigger ones in the large zone, where nothing small cuts into the free memory between
	 * them. */
	_Static_assert(MEDIUM_MAX_PAGES * USLUB_PAGE_SIZE > USLUB_MAX_SMALL,
		       "both are large blocks");
	/* A 2 MiB block makes the large zone grow (no free slab-zone block is that big to
	 * borrow), and leaves it free memory for both requests below. */
	FREE(MALLOC(2UL << 20));
	void *small = MALLOC(MEDIUM_MAX_PAGES * USLUB_PAGE_SIZE);
	void *big = MALLOC((MEDIUM_MAX_PAGES + 1) * USLUB_PAGE_SIZE);
	/* A medium zone of the node's: the thread's, or one that lent it - another medium
	 * zone or the slab zone (page/arena.c) - never a large-block zone. */
	unsigned mz = region_of(small) ? (unsigned)(region_of(small)->node - uslub_nodes) : ~0u;
	CHECKF(mz < NR_ZONES && mz % MAX_NODES == t->node && !zone_is_large(mz), "in zone %u", mz);
	CHECK(region_of(big) && region_of(big)->node == &uslub_nodes[LARGE_ZONE(t->node)]);
	FREE(small);
	FREE(big);
}

/* Pages in t's medium sheaves, and the blocks they handed out (types.h, MSHEAF_*): the
 * thread's medium caching is the sheaves and the medium-block cache together. */
static uint64_t msheaf_pages(const struct uslub_thread *t)
{
	uint64_t pages = 0;
	for (unsigned k = 0; k < NR_MSHEAVES; k++)
		pages += (uint64_t)t->mcpu[k].sheaf_count * (k + MEDIUM_MIN_PAGES);
	return pages;
}
static uint64_t medium_hits(const struct uslub_thread *t)
{
	uint64_t hits = t->medium_stat[USLUB_MEDIUM_HIT];
	for (unsigned k = 0; k < NR_MSHEAVES; k++)
		hits += uslub_cc_stat(&t->mcpu[k], USLUB_STAT_ALLOC_FASTPATH);
	return hits;
}

static void medium_cache(void)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* The medium-block cache on its own: the medium sheaves in front of it closed, as
	 * USLUB_SHEAVES=0 closes them and many threads close the larger ones
	 * (medium_sheaf.c); test_medium has the sheaves. */
	unsigned sheaves = uslub_config.sheaves;
	uslub_config.sheaves = 0;
	uslub_msheaves_flush(t, true);
	MALLOC_TRIM(0);
	CHECK_EQ(t->medium.pages, 0);
	CHECK_EQ(t->medium_high, MEDIUM_HIGH_MIN);
	void *p[MEDIUM_MAX_PAGES + 1];
	for (unsigned n = MEDIUM_MIN_PAGES; n <= 16; n++)
		p[n] = MALLOC(medium_fits(n) - 100);
	size_t sum = 0;
	for (unsigned n = MEDIUM_MIN_PAGES; n <= 16; n++) {
		FREE(p[n]);
		sum += n;
		CHECKF(t->medium.pages <= t->medium_high, "after freeing %zu pages: %u cached", sum,
		       t->medium.pages);
	}
	CHECK(t->medium.pages > 0);
	/* The last block freed is the next of its size. */
	unsigned last = t->medium.count[16] ? 16 : (unsigned)__builtin_ctzll(t->medium.nonempty);
	void *again = MALLOC(medium_fits(last) - 100);
	CHECK(again == p[last]);
	FREE(again);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages,
		 t->medium.pages + msheaf_pages(t) + uslub_medium_depot_pages());
	MALLOC_TRIM(0);
	CHECK_EQ(t->medium.pages, 0);
	CHECK_EQ(msheaf_pages(t), 0);

	/* A request whose own bin is empty takes a block up to a quarter bigger: 10 pages for
	 * 8, not 11 for 8 (a block is not cut: see medium.c). */
	void *ten = MALLOC(medium_fits(10)), *eleven = MALLOC(medium_fits(11));
	FREE(eleven);
	void *other = MALLOC(medium_fits(8));
	CHECK(other != eleven);
	FREE(other);
	MALLOC_TRIM(0);
	FREE(ten);
	void *eight = MALLOC(medium_fits(8));
	CHECK(eight == ten);
	if (!uslub_block_debug) /* checkers see the request; the rest is past the colour */
		CHECK_EQ(USABLE_SIZE(eight),
			 10 * USLUB_PAGE_SIZE - ((uintptr_t)eight & (USLUB_PAGE_SIZE - 1)));
	FREE(eight);
	MALLOC_TRIM(0);

	/* Churn: 512 live blocks of 3-8 pages, one replaced at random per step. */
	enum { LIVE = 512, STEPS = 20000 };
	static void *live[LIVE];
	uint64_t seed = 42, hits0 = medium_hits(t);
	uint64_t misses0 = t->medium_stat[USLUB_MEDIUM_MISS];
	for (unsigned i = 0; i < LIVE; i++)
		live[i] = MALLOC((3 + i % 6) * USLUB_PAGE_SIZE - 64);
	for (unsigned s = 0; s < STEPS; s++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned i = (unsigned)(seed >> 33) % LIVE;
		FREE(live[i]);
		live[i] = MALLOC((3 + (seed >> 20) % 6) * USLUB_PAGE_SIZE - 64);
		CHECK(live[i] != NULL);
		CHECKF(t->medium.pages <= MEDIUM_HIGH_MAX, "step %u: %u pages cached", s,
		       t->medium.pages);
	}
	uint64_t hits = medium_hits(t) - hits0;
	uint64_t misses = t->medium_stat[USLUB_MEDIUM_MISS] - misses0;
	printf("  churn: %lu hits, %lu misses, high %u pages\n", (unsigned long)hits,
	       (unsigned long)misses, t->medium_high);
	if (USLUB_STATS_ENABLED)
		CHECKF(misses * 20 < hits, "%lu misses for %lu hits", (unsigned long)misses,
		       (unsigned long)hits);
	CHECK(t->medium_high > MEDIUM_HIGH_MIN);
	for (unsigned i = 0; i < LIVE; i++)
		FREE(live[i]);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	MALLOC_TRIM(0);
	CHECK_EQ(t->medium.pages, 0);
	CHECK_EQ(t->medium_high, MEDIUM_HIGH_MIN);
	uslub_config.sheaves = sheaves;
}

static unsigned parked;
static int wake;
static bool check_rss; /* argument "rss": not in sanitizer builds (tests/meson.build) */

static void *parker(void *arg)
{
	unsigned char tag = (unsigned char)(uintptr_t)arg;
	unsigned char *p[NSIZES];
	for (unsigned i = 0; i < NSIZES; i++) {
		p[i] = MALLOC(sizes[i]);
		CHECK(p[i] != NULL);
		memset(p[i], tag, sizes[i]);
	}
	/* Early objects all (one per cache): the state made, its own fields written, and
	 * not published, so no fast path has read its cpu[] (thread.h, uslub_tls_state). */
	struct uslub_thread *t = uslub_tls_state;
	CHECK(t != NULL);
	/* Not for caches without sheaves (debug caches: every one in an ASan build), whose
	 * objects are no early ones and whose first allocation publishes the state. */
	if (uslub_caches[uslub_size_to_class(sizes[0])].sheaf_capacity) {
		CHECK(uslub_tls_thread == &uslub_empty_thread);
		for (unsigned i = 0; t && i < NSIZES; i++)
			CHECK_EQ(t->early[uslub_size_to_class(sizes[i])], 1);
	}
	pthread_mutex_lock(&lock);
	parked++;
	pthread_cond_broadcast(&cv);
	while (!wake)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < NSIZES; i++) {
		CHECK(p[i][0] == tag && p[i][sizes[i] - 1] == tag);
		FREE(p[i]);
	}
	/* The first free opened a sheaf, and published the state for it. */
	CHECK(uslub_tls_thread == t);
	return NULL;
}

static void parked_threads(void)
{
	tu_section("%u parked threads holding %zu small blocks each", PARKED, NSIZES);
	static pthread_t tids[PARKED];
	struct uslub_check before, after;
	CHECK_EQ(uslub_check_heap(&before, 2), 0);
	size_t rss0 = tu_rss_bytes();
	for (unsigned i = 0; i < PARKED; i++)
		CHECK(pthread_create(&tids[i], NULL, parker, (void *)(uintptr_t)i) == 0);
	pthread_mutex_lock(&lock);
	while (parked < PARKED)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
	size_t rss1 = tu_rss_bytes();
	CHECK_EQ(uslub_check_heap(&after, 2), 0);
	pthread_mutex_lock(&lock);
	wake = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < PARKED; i++)
		pthread_join(tids[i], NULL);

	double spare = (double)(after.pcp_pages - before.pcp_pages) / PARKED;
	double kib = (double)(rss1 - rss0) / 1024 / PARKED;
	printf("  page cache %.2f pages per thread, resident %.1f KiB per thread\n", spare, kib);
	CHECKF(spare <= PCP_SPARE, "%.2f cached pages per parked thread (at most %u)", spare,
	       PCP_SPARE);
	if (check_rss)
		CHECKF(kib <= RSS_BOUND_KIB, "%.1f KiB resident per parked thread (at most %u)",
		       kib, RSS_BOUND_KIB);
	struct uslub_check end;
	CHECK_EQ(uslub_check_heap(&end, 2), 0);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	check_rss = argc > 1 && strcmp(argv[1], "rss") == 0;
	FREE(MALLOC(1)); /* start-up and this thread's state */
	turnover_without_lock();
	large_zones();
	medium_cache();
	parked_threads();
	return tu_summary("test_page_cache");
}
