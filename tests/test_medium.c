/* The medium-block cache's sharing (core/slab/medium.c), linked with the engine:
 *
 * - Ownership: a thread replaces medium blocks (each filled with its own tag and checked
 *   before it is freed) while another thread keeps draining its cache the idle drain's
 *   way (uslub_medium_drain_idle under its slow_lock): every drain that found the owner
 *   outside its cache emptied it, none touched a block in use, and the heap walker finds
 *   every block where it should be. Under TSan, the handshake's happens-before edges.
 * - The depot: a producer allocates blocks that a consumer frees; the consumer's flushes
 *   land in the node's depot and the producer's misses are served from it (no trip to the
 *   zone), the depot never holds more than its bound, and malloc_trim empties it; a
 *   wave of blocks past the depot's 4 MiB floor waits there whole for the next.
 * - Home: a block another thread frees goes into the depot of the arena whose zone holds
 *   it, not the freeing thread's.
 * - Decay: a depot a thread took nothing from for a pass goes back to the zones at the
 *   next one (the background thread's passes, called directly here).
 * - The medium sheaves in front of the cache: the tests on a block's pages, the push and
 *   pop, the spill of a full sheaf, a resize in place, another thread's frees. */
#include "debug/check.h"
#include "slab/slab.h"
#include "thread/thread.h"
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

enum { LIVE = 64, STEPS = 200000, QUEUE = 32, TRANSFERS = 12800 };

static _Atomic int stop;
static _Atomic(struct uslub_thread *) owner_state;
static _Atomic unsigned long owner_steps;

static size_t medium_size(uint64_t r)
{
	return USLUB_MAX_SMALL + 1 + (size_t)(r % (MEDIUM_MAX_PAGES * USLUB_PAGE_SIZE - 8193));
}

/* The bound (page/bound.c) out of a section's way: its old threshold, to put back. */
static uint64_t bound_off(void)
{
	uint64_t threshold = uslub_trim_threshold;
	uslub_trim_threshold = 1ULL << 30;
	return threshold;
}

static uint64_t next_rand(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 17;
}

/* Drains the test makes while the owner works. */
#define MIN_TRIES 16
static _Atomic unsigned long drain_tries;

static void *owner(void *arg)
{
	(void)arg;
	unsigned char *live[LIVE];
	size_t size[LIVE];
	uint64_t seed = 7;
	for (unsigned i = 0; i < LIVE; i++) {
		size[i] = medium_size(next_rand(&seed));
		live[i] = MALLOC(size[i]);
		memset(live[i], (int)i, size[i]);
	}
	atomic_store(&owner_state, uslub_tls_thread);
	/* STEPS at least, and on until the drains have had their tries: a drainer that
	 * sleeps 20 us between them was given 4 in a loaded run, as the owner's steps take
	 * 30 ms (bounded: 50 x STEPS). */
	for (unsigned s = 0; s < STEPS || (atomic_load(&drain_tries) < MIN_TRIES && s < 50 * STEPS);
	     s++) {
		unsigned i = (unsigned)(next_rand(&seed) % LIVE);
		CHECK(live[i][0] == (unsigned char)i && live[i][size[i] - 1] == (unsigned char)i);
		FREE(live[i]);
		size[i] = medium_size(next_rand(&seed));
		live[i] = MALLOC(size[i]);
		CHECK(live[i] != NULL);
		live[i][0] = live[i][size[i] - 1] = (unsigned char)i;
		atomic_store_explicit(&owner_steps, s + 1, memory_order_relaxed);
	}
	atomic_store(&stop, 1);
	for (unsigned i = 0; i < LIVE; i++)
		FREE(live[i]);
	return NULL;
}

static void ownership(void)
{
	tu_section("a thread replaces medium blocks while another drains its cache");
	pthread_t tid;
	CHECK(pthread_create(&tid, NULL, owner, NULL) == 0);
	struct uslub_thread *t;
	while (!(t = atomic_load(&owner_state)))
		sched_yield();
	unsigned long tries = 0, emptied = 0;
	while (!atomic_load(&stop)) {
		if (atomic_exchange_explicit(&t->slow_lock, 1, memory_order_acquire))
			continue; /* the owner's own slow path holds it */
		uslub_medium_drain_idle(t);
		/* Still under slow_lock: the owner is kept out, or was seen outside. */
		if (!atomic_load_explicit(&t->medium_busy, memory_order_acquire) &&
		    __atomic_load_n(&t->medium.pages, __ATOMIC_RELAXED) == 0)
			emptied++;
		tries++;
		atomic_store(&drain_tries, tries);
		atomic_store_explicit(&t->slow_lock, 0, memory_order_release);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
	pthread_join(tid, NULL);
	printf("  %lu drains tried over %lu steps, %lu left the cache empty\n", tries,
	       atomic_load(&owner_steps), emptied);
	CHECK(tries >= MIN_TRIES);
	CHECKF(emptied > 0, "no drain found the owner outside its cache");
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
}

/* Lockstep rounds, so the figures do not depend on how the two threads are scheduled:
 * the producer fills the queue, the consumer frees all of it, and only then does the
 * producer's next round start, with the consumer's flushes in the depot. */
static void *queue[QUEUE];
static pthread_barrier_t filled, emptied;
static pthread_t consumer_tid;

static void *producer(void *arg)
{
	(void)arg;
	uint64_t seed = 11;
	for (unsigned round = 0; round < TRANSFERS / QUEUE; round++) {
		for (unsigned i = 0; i < QUEUE; i++) {
			queue[i] = MALLOC(medium_size(next_rand(&seed)));
			CHECK(queue[i] != NULL);
			*(unsigned *)queue[i] = round * QUEUE + i;
		}
		pthread_barrier_wait(&filled);
		pthread_barrier_wait(&emptied);
	}
	/* The consumer exits first, while three threads have states: what its sheaves and
	 * cache hold goes to the depot (a thread alone with main hands blocks back to the
	 * zone: nobody would take them). */
	pthread_join(consumer_tid, NULL);
	uint64_t *st = uslub_tls_thread->medium_stat;
	printf("  producer: %lu hits, %lu misses, %lu of them from the depot\n",
	       (unsigned long)st[USLUB_MEDIUM_HIT], (unsigned long)st[USLUB_MEDIUM_MISS],
	       (unsigned long)st[USLUB_MEDIUM_DEPOT]);
	if (USLUB_STATS_ENABLED)
		CHECKF(st[USLUB_MEDIUM_DEPOT] * 2 > st[USLUB_MEDIUM_MISS],
		       "%lu of %lu misses served by the depot",
		       (unsigned long)st[USLUB_MEDIUM_DEPOT], (unsigned long)st[USLUB_MEDIUM_MISS]);
	return NULL;
}

static void *consumer(void *arg)
{
	(void)arg;
	for (unsigned round = 0; round < TRANSFERS / QUEUE; round++) {
		pthread_barrier_wait(&filled);
		for (unsigned i = 0; i < QUEUE; i++) {
			CHECK(*(unsigned *)queue[i] == round * QUEUE + i);
			/* The consumer flushes into its own depot only, and a flush puts no
			 * block past the bound of the moment (the large blocks in use at their
			 * highest since the last decay pass, 4 MiB at least, capped). */
			uint64_t bound = uslub_medium_depot_bound(uslub_tls_thread);
			uint64_t before = uslub_medium_depot_pages();
			FREE(queue[i]);
			uint64_t after = uslub_medium_depot_pages();
			CHECKF(after <= before || after <= bound,
			       "a flush took the depots from %lu to %lu pages, the bound was %lu",
			       (unsigned long)before, (unsigned long)after, (unsigned long)bound);
		}
		pthread_barrier_wait(&emptied);
	}
	uint64_t *st = uslub_tls_thread->medium_stat;
	printf("  consumer: %lu frees, %lu flushed, high %u\n",
	       (unsigned long)st[USLUB_MEDIUM_FREE], (unsigned long)st[USLUB_MEDIUM_FLUSH],
	       uslub_tls_thread->medium_high);
	return NULL;
}

static void depot(void)
{
	tu_section("producer and consumer: the consumer's frees reach the producer via the depot");
	pthread_t p;
	/* What the exits leave in the depot stays there for the look below: with the default
	 * threshold, the warm memory kept once the blocks are freed passed the bound kept for
	 * a program this small (bound.c, uslub_pages_bound), which empties the depots. */
	uint64_t threshold = bound_off();
	pthread_barrier_init(&filled, NULL, 2);
	pthread_barrier_init(&emptied, NULL, 2);
	CHECK(pthread_create(&consumer_tid, NULL, consumer, NULL) == 0);
	CHECK(pthread_create(&p, NULL, producer, NULL) == 0);
	pthread_join(p, NULL); /* the producer joins the consumer */
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages,
		 uslub_tls_thread->medium.pages + uslub_medium_depot_pages());
	CHECKF(uslub_medium_depot_pages() > 0, "the threads' exits left their caches in the depot");
	MALLOC_TRIM(0);
	CHECK_EQ(uslub_medium_depot_pages(), 0);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages, 0);
	uslub_trim_threshold = threshold;
}

/* A wave larger than the depot's cap: the producer allocates WAVE blocks of 48 KiB (48
 * MiB, past the 4 MiB the depot always holds and the 32 MiB it holds at most while it is
 * not emptied), the consumer frees all of them, round after round. From the second round
 * on - the producer having emptied the depot once - the depot must take the whole wave, so
 * the producer's next round comes from it and not from the zone. With a quarter of the
 * large blocks in use as its bound, three fifths of a 9 MiB wave went through the zone and
 * the bound handed them back to the OS to be faulted in again; with 32 MiB at most, a
 * larger wave went the same way past it (tools/bench/results/depot-wave.md). */
enum { WAVE = 1024, WAVE_PAGES = 12, WAVE_ROUNDS = 6 };
static void *wave[WAVE];
static uint64_t wave_depot[WAVE_ROUNDS], wave_zone[WAVE_ROUNDS];
static unsigned wave_rounds;

static uint64_t zone_refills(void)
{
	const uint64_t *st = uslub_tls_thread->medium_stat;
	return st[USLUB_MEDIUM_MISS] - st[USLUB_MEDIUM_DEPOT];
}

static void *wave_producer(void *arg)
{
	(void)arg;
	FREE(MALLOC(16)); /* a state of its own */
	for (unsigned round = 0; round < wave_rounds; round++) {
		uint64_t before = zone_refills();
		for (unsigned i = 0; i < WAVE; i++) {
			wave[i] = MALLOC(WAVE_PAGES * USLUB_PAGE_SIZE - 64);
			CHECK(wave[i] != NULL);
			*(unsigned *)wave[i] = round * WAVE + i;
		}
		wave_zone[round] = zone_refills() - before;
		pthread_barrier_wait(&filled);
		pthread_barrier_wait(&emptied);
	}
	return NULL;
}

static void *wave_consumer(void *arg)
{
	(void)arg;
	for (unsigned round = 0; round < wave_rounds; round++) {
		pthread_barrier_wait(&filled);
		for (unsigned i = 0; i < WAVE; i++) {
			CHECK(*(unsigned *)wave[i] == round * WAVE + i);
			FREE(wave[i]);
		}
		wave_depot[round] = uslub_medium_depot_pages();
		pthread_barrier_wait(&emptied);
	}
	return NULL;
}

/* The producer and consumer, `rounds` waves; with the bound out of it (a program this
 * small keeps 16 MiB once its live set collapses; the wave and what earlier sections left
 * may pass that), and the depots emptied after. */
static void run_wave(unsigned rounds)
{
	pthread_barrier_init(&filled, NULL, 2);
	pthread_barrier_init(&emptied, NULL, 2);
	wave_rounds = rounds;
	pthread_t p, c;
	CHECK(pthread_create(&c, NULL, wave_consumer, NULL) == 0);
	CHECK(pthread_create(&p, NULL, wave_producer, NULL) == 0);
	pthread_join(p, NULL);
	pthread_join(c, NULL);
	pthread_barrier_destroy(&filled);
	pthread_barrier_destroy(&emptied);
}

static void depot_wave(void)
{
	tu_section("a consumer's whole wave of blocks waits in the depot for the next one");
	uint64_t threshold = bound_off();
	MALLOC_TRIM(0);
	run_wave(WAVE_ROUNDS);
	unsigned wave_pages = WAVE * WAVE_PAGES;
	for (unsigned round = 0; round < WAVE_ROUNDS; round++) {
		printf("  round %u: %lu zone refills, depot %lu pages after the frees\n", round,
		       (unsigned long)wave_zone[round], (unsigned long)wave_depot[round]);
		/* The consumer's own cache and sheaves keep a little of it; the first round's
		 * frees find a depot nobody has emptied yet. */
		CHECKF(!round || wave_depot[round] >= wave_pages * 3 / 4,
		       "round %u: the depot held %lu pages of a %u-page wave", round,
		       (unsigned long)wave_depot[round], wave_pages);
		if (USLUB_STATS_ENABLED && round >= 2)
			CHECKF(wave_zone[round] <= WAVE / 16,
			       "round %u: %lu of %u blocks came from the zone", round,
			       (unsigned long)wave_zone[round], WAVE);
	}
	MALLOC_TRIM(0);
	CHECK_EQ(uslub_medium_depot_pages(), 0);
	/* A depot nobody takes from stays within 32 MiB: the same frees, no producer after.
	 * The blocks go home, so where the producer's came from two arenas' zones, each
	 * depot holds some. */
	run_wave(1);
	for (unsigned d = 0; d < DEPOT_SHARDS; d++) {
		uint64_t held = uslub_medium_depot_shard_pages(uslub_tls_thread->node, d);
		CHECKF(held <= 8192, "a depot never emptied held %lu pages (32 MiB: 8192)",
		       (unsigned long)held);
	}
	MALLOC_TRIM(0);
	uslub_trim_threshold = threshold;
}

/* A thread whose own depot is empty waits for another's that holds blocks of its size,
 * as for its own: a producer's depot is always empty, and with a trylock on its
 * consumer's it went to the zone whenever the consumer was flushing. */
enum { WAIT_BLOCKS = 8, WAIT_PAGES = 5 };

static void *exit_with_blocks(void *arg)
{
	(void)arg;
	void *p[WAIT_BLOCKS];
	for (unsigned i = 0; i < WAIT_BLOCKS; i++)
		p[i] = MALLOC(WAIT_PAGES * USLUB_PAGE_SIZE);
	for (unsigned i = 0; i < WAIT_BLOCKS; i++)
		FREE(p[i]);
	return NULL; /* its exit: to their home's depot (depot_home, below) */
}

struct waiter {
	unsigned shard; /* the taker's own depot: one without the blocks */
	_Atomic bool done;
	uint64_t from_depot;
};

static void *take_from_depot(void *arg)
{
	struct waiter *w = arg;
	FREE(MALLOC(16)); /* a state of its own, with an empty medium cache */
	uslub_tls_thread->medium_shard = w->shard;
	void *p = MALLOC(WAIT_PAGES * USLUB_PAGE_SIZE);
	atomic_store(&w->done, true);
	w->from_depot = uslub_tls_thread->medium_stat[USLUB_MEDIUM_DEPOT];
	FREE(p);
	return NULL;
}

static void depot_wait(void)
{
	tu_section("a thread waits for another's depot that holds its size, not the zone");
	uint64_t threshold = bound_off();
	MALLOC_TRIM(0);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, exit_with_blocks, NULL) == 0);
	CHECK(pthread_join(th, NULL) == 0);
	/* The depot that holds the blocks, and a taker whose own depot is another. */
	unsigned node = uslub_tls_thread->node, shard = 0, holding = 0;
	for (unsigned d = 0; d < DEPOT_SHARDS; d++)
		if (uslub_medium_depot_shard_pages(node, d)) {
			shard = d;
			holding++;
		}
	CHECKF(holding == 1 && uslub_medium_depot_shard_pages(node, shard) >= WAIT_PAGES,
	       "the exit left its blocks in one depot (%u hold some)", holding);
	struct waiter w = {.shard = (shard + 1) % DEPOT_SHARDS};
	/* The depot held as a thread flushing into it holds it, for 200 ms. */
	uslub_medium_depot_hold(node, shard, true);
	CHECK(pthread_create(&th, NULL, take_from_depot, &w) == 0);
	struct timespec pause = {0, 200 * 1000 * 1000};
	nanosleep(&pause, NULL);
	bool early = atomic_load(&w.done);
	uslub_medium_depot_hold(node, shard, false);
	CHECK(pthread_join(th, NULL) == 0);
	CHECKF(!early, "the taker waited for the held depot, not the zone");
	if (USLUB_STATS_ENABLED)
		CHECKF(w.from_depot == 1, "its block came from the depot (%lu depot refills)",
		       (unsigned long)w.from_depot);
	MALLOC_TRIM(0);
	uslub_trim_threshold = threshold;
}

/* A block another thread frees goes home: into the depot of the arena whose medium zone
 * holds it, not the freeing thread's. Thread A makes the blocks and empties its caches;
 * thread B, whose own depot is another than some block's home, frees them all and exits
 * (its exit flushes them). Each depot then holds exactly the pages of the blocks whose
 * home it is; before the blocks went home, B's held them all. */
enum { HOME_BLOCKS = 8 };

struct home {
	void *p[HOME_BLOCKS];
	unsigned home[HOME_BLOCKS];
	uint64_t pages[HOME_BLOCKS];
	_Atomic int stage; /* 1: A's blocks made, 2: A may go */
	unsigned freer_shard;
	bool free_them;
};

static void *home_maker(void *arg)
{
	struct home *h = arg;
	for (unsigned i = 0; i < HOME_BLOCKS; i++) {
		h->p[i] = MALLOC(WAIT_PAGES * USLUB_PAGE_SIZE);
		struct page_desc *d = page_desc_of(h->p[i]);
		int arena = medium_zone_arena((unsigned)(region_of(d)->node - uslub_nodes));
		h->home[i] =
		    arena < 0 ? uslub_tls_thread->medium_shard : (unsigned)arena % DEPOT_SHARDS;
		h->pages[i] = d->objects;
	}
	MALLOC_TRIM(0); /* its caches, and the depots, to the zones */
	atomic_store(&h->stage, 1);
	while (atomic_load(&h->stage) != 2)
		sched_yield();
	return NULL;
}

static void *home_freer(void *arg)
{
	struct home *h = arg;
	FREE(MALLOC(16)); /* a state of its own */
	h->freer_shard = uslub_tls_thread->medium_shard;
	h->free_them = false;
	for (unsigned i = 0; i < HOME_BLOCKS; i++)
		if (h->home[i] != h->freer_shard)
			h->free_them = true;
	if (h->free_them)
		for (unsigned i = 0; i < HOME_BLOCKS; i++)
			FREE(h->p[i]);
	return NULL; /* its exit flushes its cache */
}

static void depot_home(void)
{
	tu_section("a block another thread frees goes to its home's depot, not the freer's");
	/* With one arena (one CPU) every thread's depot is given round robin and no block
	 * has a home: arenas enough for the depots, as test_arenas makes four. */
	if (uslub_nr_arenas < DEPOT_SHARDS)
		uslub_pages_use(uslub_nr_nodes, DEPOT_SHARDS);
	uint64_t threshold = bound_off();
	MALLOC_TRIM(0);
	static struct home h;
	pthread_t maker, freer;
	CHECK(pthread_create(&maker, NULL, home_maker, &h) == 0);
	while (atomic_load(&h.stage) != 1)
		sched_yield();
	/* A freer whose depot is another than some block's home: the next thread's arena. */
	for (unsigned tries = 0; tries < 4 && !h.free_them; tries++) {
		CHECK(pthread_create(&freer, NULL, home_freer, &h) == 0);
		CHECK(pthread_join(freer, NULL) == 0);
	}
	CHECKF(h.free_them, "a freer with another depot than a block's home (its own %u)",
	       h.freer_shard);
	unsigned node = uslub_tls_thread->node;
	for (unsigned s = 0; s < DEPOT_SHARDS; s++) {
		uint64_t want = 0;
		for (unsigned i = 0; i < HOME_BLOCKS; i++)
			if (h.home[i] == s)
				want += h.pages[i];
		CHECKF(uslub_medium_depot_shard_pages(node, s) == want,
		       "depot %u holds %lu pages, its home blocks' %lu (the freer's is %u)", s,
		       (unsigned long)uslub_medium_depot_shard_pages(node, s), (unsigned long)want,
		       h.freer_shard);
	}
	atomic_store(&h.stage, 2);
	CHECK(pthread_join(maker, NULL) == 0);
	MALLOC_TRIM(0);
	uslub_trim_threshold = threshold;
}

static void *fill_depot(void *arg)
{
	(void)arg;
	void *p[16];
	for (unsigned i = 0; i < 16; i++)
		p[i] = MALLOC(5 * USLUB_PAGE_SIZE);
	for (unsigned i = 0; i < 16; i++)
		FREE(p[i]);
	return NULL; /* its exit moves its cache to the depot */
}

static void decay(void)
{
	tu_section("an unused depot goes back to the zones within two passes");
	pthread_t tid;
	CHECK(pthread_create(&tid, NULL, fill_depot, NULL) == 0);
	pthread_join(tid, NULL);
	CHECK(uslub_medium_depot_pages() > 0);
	for (unsigned pass = 0; pass < 3 && uslub_medium_depot_pages(); pass++) {
		struct timespec ts = {1, 100000000}; /* past DEPOT_DECAY_MS */
		nanosleep(&ts, NULL);
		uslub_medium_depots_decay();
	}
	CHECK_EQ(uslub_medium_depot_pages(), 0);
}

/* ---- the medium sheaves (core/thread/medium_sheaf.c) -------------------------------- */

static struct cache_cpu *msheaf(unsigned n)
{
	return &uslub_tls_thread->mcpu[n - MEDIUM_MIN_PAGES];
}

/* The first page of block p (n pages) carries free's test of the sheaf of n pages, and
 * its other pages none. */
static bool tested_as(void *p, unsigned n)
{
	const struct page_test *e = page_test_of(page_desc_of(p));
	if (e[0].start != (uint32_t)(uintptr_t)p || e[0].objects != 1 ||
	    e[0].cpu_off != MCPU_OFF(n))
		return false;
	for (unsigned i = 1; i < n; i++)
		if (e[i].start || e[i].objects || e[i].cpu_off)
			return false;
	return true;
}

static uint64_t msheaf_pages(const struct uslub_thread *t)
{
	uint64_t pages = 0;
	for (unsigned k = 0; k < NR_MSHEAVES; k++)
		pages += (uint64_t)t->mcpu[k].sheaf_count * (k + MEDIUM_MIN_PAGES);
	return pages;
}

static void *free_all(void *arg)
{
	void **blocks = arg;
	for (unsigned i = 0; i < 8; i++)
		FREE(blocks[i]);
	/* Held in this thread's sheaf until it exits. */
	CHECK_EQ(uslub_tls_thread->mcpu[4 - MEDIUM_MIN_PAGES].sheaf_count, 8);
	return NULL;
}

static void medium_sheaves(void)
{
	tu_section("blocks of 8-128 KiB go through the thread's medium sheaves");
	MALLOC_TRIM(0);
	CHECK_EQ(msheaf_pages(uslub_tls_thread), 0);
	/* A live block's pages carry its sheaf's test; free pushes it, malloc pops it. */
	void *p = MALLOC(20000);
	CHECK(tested_as(p, 5));
	unsigned before = msheaf(5)->sheaf_count;
	FREE(p);
	CHECK_EQ(msheaf(5)->sheaf_count, before + 1);
	CHECK(msheaf(5)->sheaf_cap >= 2 && msheaf(5)->sheaf_cap <= SHEAF_MAX);
	uint64_t pops = uslub_cc_stat(msheaf(5), USLUB_STAT_ALLOC_FASTPATH);
	void *again = MALLOC(17000);
	CHECK(again == p);
	CHECK_EQ(msheaf(5)->sheaf_count, before);
	if (USLUB_STATS_ENABLED)
		CHECK_EQ(uslub_cc_stat(msheaf(5), USLUB_STAT_ALLOC_FASTPATH), pops + 1);
	FREE(again);
	/* The largest sheaf's blocks too: 32 pages. */
	void *big = MALLOC(MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE - 100);
	CHECK(tested_as(big, MSHEAF_MAX_PAGES));
	before = msheaf(MSHEAF_MAX_PAGES)->sheaf_count;
	FREE(big);
	CHECK_EQ(msheaf(MSHEAF_MAX_PAGES)->sheaf_count, before + 1);
	CHECK(MALLOC(MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE) == big);
	CHECK_EQ(msheaf(MSHEAF_MAX_PAGES)->sheaf_count, before);
	FREE(big);

	/* A full sheaf sends its older blocks to the medium-block cache, where they keep
	 * their tests and their free marks (a second free stops on the fast path:
	 * test_bad_input), so a refill writes no test line that other threads' frees read;
	 * handed out again they are unmarked, and flushed out of the cache their tests go
	 * (the heap check looks at every page's test). */
	enum { MANY = 64 };
	static void *blocks[MANY];
	for (unsigned i = 0; i < MANY; i++)
		blocks[i] = MALLOC(medium_fits(3));
	for (unsigned i = 0; i < MANY; i++) {
		FREE(blocks[i]);
		CHECK(msheaf(3)->sheaf_count <= msheaf(3)->sheaf_cap);
	}
	CHECK(uslub_tls_thread->medium.count[3] > 0);
	unsigned kept = 0;
	for (unsigned i = 0; i < MANY; i++)
		if (page_desc_of(blocks[i])->flags & PF_CACHED) {
			CHECK(tested_as(blocks[i], 3) && is_marked_free(blocks[i]));
			kept++;
		}
	CHECK(kept > 0);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages, uslub_tls_thread->medium.pages +
					     msheaf_pages(uslub_tls_thread) +
					     uslub_medium_depot_pages());
	for (unsigned i = 0; i < MANY; i++) {
		blocks[i] = MALLOC(medium_fits(3));
		CHECK(tested_as(blocks[i], 3) && !is_marked_free(blocks[i]));
	}
	for (unsigned i = 0; i < MANY; i++)
		FREE(blocks[i]);
	MALLOC_TRIM(0);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages, 0);

	/* Resized in place, a block's test follows its page count: 5 pages, then 40 (past
	 * the sheaves' sizes: no test), then 24 (a shrink that keeps half stays); a shrink
	 * to less than half (24 to 4) moves, into a block tested as its own count. */
	MALLOC_TRIM(0);
	void *r = MALLOC(medium_fits(4));
	void *r2 = REALLOC(r, medium_fits(5));
	CHECK(r2 != NULL);
	CHECK(tested_as(r2, 5) || r2 != r);
	void *r3 = REALLOC(r2, 40 * USLUB_PAGE_SIZE);
	CHECK(r3 != NULL && page_test_of(page_desc_of(r3))->objects == 0);
	void *r4 = REALLOC(r3, medium_fits(24));
	CHECK(r4 == r3 && tested_as(r4, 24));
	void *r5 = REALLOC(r4, medium_fits(4));
	CHECK(r5 != NULL && r5 != r4 && tested_as(r5, 4));
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	FREE(r5);

	/* Another thread's frees go to that thread's sheaf, and back at its exit. */
	void *mine[8];
	for (unsigned i = 0; i < 8; i++)
		mine[i] = MALLOC(medium_fits(4) - 100);
	unsigned own = msheaf(4)->sheaf_count;
	pthread_t tid;
	CHECK(pthread_create(&tid, NULL, free_all, mine) == 0);
	pthread_join(tid, NULL);
	CHECK_EQ(msheaf(4)->sheaf_count, own);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	MALLOC_TRIM(0);
	CHECK_EQ(msheaf_pages(uslub_tls_thread), 0);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	CHECK_EQ(chk.cached_large_pages, 0);
}

static void *medium_worker(void *arg)
{
	(void)arg;
	void *p = MALLOC(medium_fits(6));
	FREE(p);
	/* The worker's sheaves are open; the main thread, which has a state but no medium
	 * sheaf open, takes no share of their bound (medium_sheaf.c, msheaf_user). */
	CHECK(uslub_tls_thread->medium_user);
	CHECKF(uslub_medium_users == 1, "medium users %u", uslub_medium_users);
	CHECK(uslub_nr_thread_states >= 2);
	CHECK_EQ(uslub_medium_sharers(), 1);
	/* Where address space is bounded every state takes its share again (slab.h). */
	bool limited = uslub_space_limited;
	uslub_space_limited = true;
	CHECK_EQ(uslub_medium_sharers(), uslub_nr_thread_states);
	uslub_space_limited = limited;
	return NULL;
}

/* The threads among whom the medium sheaves' bound is shared: those with sheaves open,
 * from their first slow path until a flush empties them (exit, malloc_trim). */
static void medium_users(void)
{
	tu_section("the medium sheaves' bound is shared among the threads that use them");
	MALLOC_TRIM(0);
	CHECK(!uslub_tls_thread->medium_user);
	CHECK_EQ(uslub_medium_users, 0);
	pthread_t tid;
	CHECK(pthread_create(&tid, NULL, medium_worker, NULL) == 0);
	pthread_join(tid, NULL);
	CHECK_EQ(uslub_medium_users, 0); /* its exit flushed its sheaves */
	void *p = MALLOC(medium_fits(7));
	FREE(p);
	CHECK(uslub_tls_thread->medium_user);
	CHECK_EQ(uslub_medium_users, 1);
	MALLOC_TRIM(0);
	CHECK_EQ(uslub_medium_users, 0);
}

enum { RUN = 48 };
static void *run_blocks[RUN];

static void *alloc_run(void *arg)
{
	for (unsigned i = 0; i < RUN; i++)
		run_blocks[i] = MALLOC(*(size_t *)arg);
	return NULL;
}

/* A sheaf a program walks from empty to full and back grows (medium_sheaf.c,
 * MSHEAF_GROW); one that only meets the same end - a thread that frees what another
 * allocated - keeps its capacity; the flush takes the growth back. */
static void growth(void)
{
	tu_section("a medium sheaf walked from end to end grows; a producer's does not");
	MALLOC_TRIM(0);
	size_t size = medium_fits(8);
	pthread_t tid;
	CHECK(pthread_create(&tid, NULL, alloc_run, &size) == 0);
	pthread_join(tid, NULL);
	for (unsigned i = 0; i < RUN; i++)
		FREE(run_blocks[i]);
	unsigned base = msheaf(8)->sheaf_cap;
	CHECK(base >= 2 && base < SHEAF_MAX);
	for (unsigned round = 0; round < 16; round++) {
		for (unsigned i = 0; i < RUN; i++)
			run_blocks[i] = MALLOC(size);
		for (unsigned i = 0; i < RUN; i++)
			FREE(run_blocks[i]);
	}
	/* 28 blocks of 32 KiB, within the 1 MiB a page count may grow to and the share of
	 * one or two thread states. */
	CHECKF(msheaf(8)->sheaf_cap == SHEAF_MAX, "grown to %u", msheaf(8)->sheaf_cap);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	MALLOC_TRIM(0);
	void *p = MALLOC(size);
	CHECK_EQ(msheaf(8)->sheaf_cap, base);
	FREE(p);
}

/* Medium blocks start at their colour (slab.h, medium_color_of): a cache line of the
 * first page chosen by its address, so that the first lines of many blocks do not all
 * fall in the same cache sets. */
static void colours(void)
{
	tu_section("medium blocks start at their colour; the largest count and aligned blocks "
		   "at their page");
	MALLOC_TRIM(0);
	enum { MANY = 64 };
	static void *b[MANY];
	unsigned seen = 0;
	for (unsigned i = 0; i < MANY; i++) {
		b[i] = MALLOC(medium_fits(5));
		size_t off = (uintptr_t)b[i] & (USLUB_PAGE_SIZE - 1);
		CHECKF(off == medium_color_of(page_desc_of(b[i])) && off % 64 == 0 &&
			   off <= MEDIUM_COLOR_ROOM,
		       "block %p: colour %zu", b[i], off);
		/* The request, then the rest of the five pages, the program's to use. */
		CHECK_EQ(USABLE_SIZE(b[i]) + off, 5 * USLUB_PAGE_SIZE);
		CHECK(tested_as(b[i], 5));
		memset(b[i], (int)i, USABLE_SIZE(b[i]));
		seen |= 1u << (off / 64);
	}
	CHECKF(__builtin_popcount(seen) >= 4, "colours seen: %#x", seen);
	for (unsigned i = 0; i < MANY; i++) {
		const unsigned char *c = b[i];
		CHECK(c[0] == (unsigned char)i && c[USABLE_SIZE(b[i]) - 1] == (unsigned char)i);
		FREE(b[i]);
	}
	/* A byte past what five pages hold with a colour takes six. */
	void *six = MALLOC(medium_fits(5) + 1);
	CHECK(tested_as(six, 6));
	FREE(six);
	/* 128 KiB, which programs ask for exactly: its sheaf holds page-aligned blocks. */
	void *big = MALLOC(MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE);
	CHECK(((uintptr_t)big & (USLUB_PAGE_SIZE - 1)) == 0 &&
	      USABLE_SIZE(big) == MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE);
	FREE(big);
	/* Aligned beyond a cache line, a block starts at its page, and keeps it through its
	 * sheaf: it holds every size that sheaf serves. */
	void *a = NULL, *line = NULL;
	CHECK(POSIX_MEMALIGN(&a, USLUB_PAGE_SIZE, medium_fits(7)) == 0);
	CHECK(((uintptr_t)a & (USLUB_PAGE_SIZE - 1)) == 0);
	CHECK(POSIX_MEMALIGN(&line, 64, medium_fits(7)) == 0);
	CHECK(((uintptr_t)line & 63) == 0 &&
	      ((uintptr_t)line & (USLUB_PAGE_SIZE - 1)) == medium_color_of(page_desc_of(line)));
	FREE(line);
	unsigned before = msheaf(7)->sheaf_count;
	FREE(a);
	CHECK_EQ(msheaf(7)->sheaf_count, before + 1);
	CHECK(MALLOC(medium_fits(7)) == a);
	FREE(a);
	/* A coloured block grown in place to the largest count leaves the fast path (that
	 * sheaf holds page-aligned blocks); its free gives it its page there. */
	MALLOC_TRIM(0);
	void *room = MALLOC(2 * MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE);
	FREE(room); /* free pages after the blocks below */
	void *b31 = NULL;
	for (unsigned i = 0; i < 8 && !b31; i++) {
		b[i] = MALLOC(medium_fits(31));
		if ((uintptr_t)b[i] & (USLUB_PAGE_SIZE - 1))
			b31 = b[i];
	}
	CHECK(b31 != NULL);
	void *grown = REALLOC(b31, MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE - MEDIUM_COLOR_ROOM);
	CHECKF(grown == b31, "grown in place: %p to %p", b31, grown);
	CHECK(page_test_of(page_desc_of(grown))->objects == 0);
	before = msheaf(MSHEAF_MAX_PAGES)->sheaf_count;
	FREE(grown);
	CHECK_EQ(msheaf(MSHEAF_MAX_PAGES)->sheaf_count, before + 1);
	void *page = (void *)((uintptr_t)grown & ~(uintptr_t)(USLUB_PAGE_SIZE - 1));
	CHECK(MALLOC(MSHEAF_MAX_PAGES * USLUB_PAGE_SIZE) == page);
	FREE(page);
	for (unsigned i = 0; i < 8 && b[i] != b31; i++)
		FREE(b[i]);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
}

/* Blocks of 132-256 KiB: the cache's counts past the sheaves', every eighth page. */
static void large_counts(void)
{
	tu_section("blocks of 132-256 KiB are medium blocks in counts of 40, 48, 56, 64 pages");
	CHECK(!medium_count(MSHEAF_MAX_PAGES + 1) && medium_count(40) && medium_count(64) &&
	      !medium_count(63) && !medium_count(MEDIUM_MAX_PAGES + 8));
	CHECK_EQ(medium_count_up(41), 48u);
	/* Where address space is bounded, past 128 KiB a block keeps its exact pages, and
	 * the cache takes none of those counts (no request would look there). */
	CHECK(medium_cacheable(64) && medium_max_bytes() == (size_t)64 << USLUB_PAGE_SHIFT);
	__atomic_store_n(&uslub_space_limited, true, __ATOMIC_RELAXED);
	CHECK(medium_cacheable(32) && !medium_cacheable(40) &&
	      medium_max_bytes() == (size_t)MSHEAF_MAX_PAGES << USLUB_PAGE_SHIFT);
	__atomic_store_n(&uslub_space_limited, false, __ATOMIC_RELAXED);
	/* 200 KiB: 49 pages, a block of 56; freed into the thread's cache, and the next
	 * request of 48 to 60 pages (190 KiB: 48) takes it back without the zone. The cache
	 * emptied first: a block of 56 to 70 pages there would serve the first request. */
	MALLOC_TRIM(0);
	CHECK_EQ(uslub_tls_thread->medium.pages, 0u);
	char *a = MALLOC(200 << 10);
	struct page_desc *d = page_desc_of(a);
	CHECK_EQ(d->objects, 56u);
	CHECK(medium_count(d->objects));
	memset(a, 0xa5, 200 << 10);
	uint64_t hits = uslub_tls_thread->medium_stat[USLUB_MEDIUM_HIT];
	uint32_t cached = uslub_tls_thread->medium.pages;
	FREE(a);
	CHECK_EQ(uslub_tls_thread->medium.pages, cached + 56);
	char *b = MALLOC(190 << 10);
	CHECKF(b == a, "reused from the cache: %p after %p", (void *)b, (void *)a);
	if (USLUB_STATS_ENABLED)
		CHECK_EQ(uslub_tls_thread->medium_stat[USLUB_MEDIUM_HIT], hits + 1);
	/* The cache marks what it holds, which a second free finds (lookup.c). */
	FREE(b);
	CHECK(page_desc_of(b)->flags & PF_CACHED);
	/* Exactly 256 KiB is the largest count; a page more is a large block of a class. */
	char *top = MALLOC(256 << 10);
	CHECK_EQ(page_desc_of(top)->objects, 64u);
	char *past = MALLOC((256 << 10) + 1);
	CHECK(page_desc_of(past)->objects > 64 && !medium_count(page_desc_of(past)->objects));
	FREE(top);
	FREE(past);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
}

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	FREE(MALLOC(1));
	ownership();
	depot();
	depot_wave();
	depot_wait();
	depot_home();
	decay();
	if (!uslub_block_debug && !uslub_block_pad) {
		medium_sheaves();
		medium_users();
		growth();
		colours();
		large_counts();
	}
	return tu_summary("test_medium");
}
