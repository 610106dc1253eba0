/* The node's depots behind the threads' medium-block caches (medium.c): what a thread's
 * cache flushes past its high goes to a depot, and a cache's miss takes a batch from one
 * before it goes to the zone, so a thread that frees what another allocated (producer and
 * consumer) hands the blocks over a batch at a time, without the zone's split and coalesce.
 *  - DEPOT_SHARDS a node, each holding up to what the large blocks in use were at their
 *    highest since the last decay pass, 4-32 MiB, or up to 256 MiB for one that threads
 *    empty (depot_max), under its lock. A thread's own is its arena's; it refills from
 *    its own first, then from the others, and a block it flushes goes home: to the depot
 *    of the arena whose medium zone holds it (home_shard).
 *  - A full depot makes room from its fullest bin, its oldest blocks first.
 *  - The background thread gives a depot back to the zones once a pass finds it unused
 *    since the pass before (one DEPOT_DECAY_MS at least); malloc_trim at once; a large
 *    request that would grow the heap first (large.c).
 * A block in a depot stays a large block (PF_CACHED), as in a thread's cache: freeing it
 * again is a double free. Lock order: a depot's lock, then a zone's (only for the batch's
 * rest, after the depot's is dropped: they never nest). */
#include "slab/slab.h"
#include "os/os.h"
#include "page/page.h"

/* A node's depot holds at least 4 MiB (two threads' caches at their high, what a
 * producer hands a consumer between two of its refills), more for a larger heap: as much
 * as the large blocks in use were at their highest since the depots' last decay pass, up
 * to 32 MiB, or 256 MiB for a depot that threads emptied since the pass before.
 *   - Why the high: a consumer that frees a whole wave of a producer's blocks - a batch, a
 *     request, a round of a ring - hands the next wave its blocks only if the depot holds
 *     them all; with a quarter of the large blocks in use (what a depot held before, the
 *     wave's blocks counted in it), 256 messages of 8-64 KiB sent a round at a time put
 *     three fifths of each wave through the zone's split and coalesce and the bound handed
 *     ~1 MiB a round back to be faulted in again: 0.60-0.94 s and 21-26 MiB against
 *     glibc's 0.10-0.21 s and 10.6 MiB; holding the wave, 0.05-0.20 s and 11.6 MiB
 *     (tools/bench/results/depot-wave.md). What it holds was in use within the last
 *     pass, so it adds no new memory; a collapse hands it back through the bound
 *     (bound.c), a growing heap first (large.c), an unused depot at the next pass.
 *   - Why more for a depot emptied: the producer of a wave takes all the depot holds, so
 *     what it holds is the next wave's, however large; a wave of 4,000 blocks of 4-64 KiB
 *     (130 MiB asked for) freed past 32 MiB into the zone took 0.49-0.86 s at 170-179
 *     MiB, held whole 0.29-0.58 s at 95 (glibc 0.43-0.63 s, 131 MiB). A depot never
 *     emptied is where frees outrun allocations, and a larger cap let it fill: `stress`
 *     peaked 4% higher with 256 MiB for every depot (depot-wave.md).
 *   - Why up to 32 MiB: threads that replace blocks of 31 sizes over a large live set
 *     miss their own caches often, and a miss the depot cannot serve goes to the zone,
 *     which cuts the block somewhere new: at 8-128 KiB over a 64 MiB live set, 4 MiB made
 *     4,200 page faults per million replacements and 32 MiB 500
 *     (tools/bench/results/medium-blocks.md). */
#define DEPOT_MIN_PAGES	 1024
#define DEPOT_MAX_PAGES	 8192
#define DEPOT_WAVE_PAGES 65536

/* The large blocks in use (out of the zones, not in a depot), in pages, at their highest
 * since the last decay pass: looked at where a thread's cache takes a batch, the only
 * place a medium block comes into use past the caches. Races only move the guess. */
static _Atomic uint64_t use_high;

static uint64_t use_pages(void)
{
	uint64_t large = uslub_large_in_use();
	uint64_t held = atomic_load_explicit(&uslub_depot_bytes, memory_order_relaxed);
	return large > held ? (large - held) >> USLUB_PAGE_SHIFT : 0; /* read apart */
}

void uslub_depot_note_use(void)
{
	uint64_t now = use_pages(), high = atomic_load_explicit(&use_high, memory_order_relaxed);
	while (now > high && !atomic_compare_exchange_weak_explicit(
				 &use_high, &high, now, memory_order_relaxed, memory_order_relaxed))
		;
}

/* `drained`: the depot's (depot.drained). */
static uint64_t depot_max(bool drained)
{
	uint64_t pages = atomic_load_explicit(&use_high, memory_order_relaxed);
	uint64_t cap = drained ? DEPOT_WAVE_PAGES : DEPOT_MAX_PAGES;
	return pages < DEPOT_MIN_PAGES ? DEPOT_MIN_PAGES : pages > cap ? cap : pages;
}
/* ... and gives it all back once unused for a second, as a barn does (thread/barn.c). */
#define DEPOT_DECAY_MS 1000

/* DEPOT_SHARDS depots a node (medium.h): a thread flushes into its own and refills from
 * it first, then from the others without waiting. One depot was where two threads met -
 * 243,710 waits in a million replacements each at 128 KiB, two threads at a third of one
 * thread's rate (tools/bench/results/medium-blocks.md) - while a thread that frees what
 * another allocates still finds the other's blocks. */
#define NR_DEPOTS (MAX_NODES * DEPOT_SHARDS)

struct depot {
	pthread_mutex_t lock;
	struct medium_bins bins;
	bool used; /* a thread took from it since the last decay pass */
	/* A thread's take left it under DEPOT_MIN_PAGES since the pass before last
	 * (`drained`) or the last (`drained_now`): a conduit, not a store. */
	bool drained, drained_now;
} __attribute__((aligned(64)));
static struct depot depots[NR_DEPOTS] = {
    [0 ... NR_DEPOTS - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};
static _Atomic unsigned next_shard;

/* The change to a depot since it held `before` pages, into uslub_depot_bytes: called
 * under its lock, once a critical section, so the counter costs one atomic a batch. */
static void depot_note(const struct depot *dp, uint64_t before)
{
	uint64_t now = dp->bins.pages;
	if (now != before)
		atomic_fetch_add_explicit(&uslub_depot_bytes, (now - before) << USLUB_PAGE_SHIFT,
					  memory_order_relaxed);
}

static unsigned depot_of(const struct uslub_thread *t)
{
	return t->medium_node * DEPOT_SHARDS + t->medium_shard;
}

/* Where a node has an arena for every shard, a thread's own shard is its arena's, which
 * the blocks of its medium zone go home to (home_shard); else one given round robin. */
void uslub_depot_join(struct uslub_thread *t)
{
	t->medium_shard =
	    uslub_nr_arenas >= DEPOT_SHARDS
		? uslub_thread_arena() % DEPOT_SHARDS
		: atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % DEPOT_SHARDS;
}

/* The shard a flushed block goes to: its home, the shard of the arena whose medium zone
 * holds it, wherever the thread that frees it found it. A block a thread took from
 * another's shard had stayed with it, flushed into its own: over a run the two threads'
 * blocks lay mixed in both zones, whose pages' tests share lines (8 pages a line) that
 * flushes and refills write. Two threads replacing blocks of 16 B - 128 KiB ran at 0.745x
 * two processes, though only 429 of 15,600 refills crossed; going home, 1.07-1.08x
 * (tools/bench/results/two-threads-128k.md). A block of the slab zone has no home: the
 * thread's own shard. */
static unsigned home_shard(const struct uslub_thread *t, const struct page_desc *d)
{
	int arena = medium_zone_arena((unsigned)(region_of(d)->node - uslub_nodes));
	return arena < 0 || uslub_nr_arenas < DEPOT_SHARDS ? t->medium_shard
							   : (unsigned)arena % DEPOT_SHARDS;
}

/* Up to `take` of bin n's oldest blocks, its last, into out[] (their bin in pages[]);
 * how many. What a full depot gives up: evicting the newest kept the oldest blocks in
 * the depot for good, pinned between free blocks that would have merged (stress peaked
 * 9 MiB higher: tools/bench/results/medium-blocks.md). One walk, bounded by the bin's
 * count (at most DEPOT_WAVE_PAGES / MEDIUM_MIN_PAGES). */
static unsigned bin_cut_oldest(struct medium_bins *m, unsigned n, unsigned take,
			       struct page_desc **out, uint16_t *pages)
{
	unsigned count = m->count[n];
	if (take > count)
		take = count;
	struct page_desc **link = &m->head[n];
	for (unsigned i = 0; i < count - take; i++)
		link = &(*link)->next;
	struct page_desc *d = *link;
	*link = NULL;
	for (unsigned i = 0; i < take; i++, d = d->next) {
		out[i] = d;
		pages[i] = (uint16_t)n;
	}
	m->count[n] = (uint16_t)(count - take);
	if (!m->count[n]) /* relaxed: see medium_bin_push */
		__atomic_store_n(&m->nonempty, m->nonempty & ~(1ULL << medium_bit(n)),
				 __ATOMIC_RELAXED);
	__atomic_store_n(&m->pages, m->pages - take * n, __ATOMIC_RELAXED);
	return take;
}

/* Up to b blocks of n pages (or a little more) from the node's depot, the first returned
 * and the rest into the thread's cache; NULL if the depot has none. Larger blocks are not
 * cut to size: cutting them scattered the blocks' first pages over memory never touched,
 * three times the page faults at 8-128 KiB (tools/bench/results/medium-blocks.md). */
struct page_desc *uslub_depot_take(struct uslub_thread *t, unsigned n, unsigned b)
{
	unsigned base = t->medium_node * DEPOT_SHARDS;
	for (unsigned k = 0; k < DEPOT_SHARDS; k++) {
		struct depot *dp = &depots[base + (t->medium_shard + k) % DEPOT_SHARDS];
		if (!(__atomic_load_n(&dp->bins.nonempty, __ATOMIC_RELAXED) >> medium_bit(n)))
			continue;
		/* Another's depot waited for too, as the barns are (sheaf.c, barn_get_other): a
		 * producer's own depot is always empty, and with a trylock on its consumer's
		 * it went to the zone whenever the consumer was flushing, while the consumer's
		 * depot overflowed into the zones and the bound handed it back: 8-64 KiB
		 * messages through a ring, 1.9 GB returned and faulted in again in 1 million
		 * (tools/bench/results/depot-wait.md). */
		uslub_lock(&dp->lock, USLUB_LOCK_DEPOT);
		unsigned m = medium_bin_fit(&dp->bins, n);
		struct page_desc *d = NULL;
		if (m) {
			uint64_t before = dp->bins.pages;
			d = medium_bin_pop(&dp->bins, m);
			for (unsigned i = 1; i < b && dp->bins.count[m]; i++)
				medium_bin_push(&t->medium, medium_bin_pop(&dp->bins, m), m);
			dp->used = true;
			if (dp->bins.pages < DEPOT_MIN_PAGES)
				dp->drained = dp->drained_now = true;
			depot_note(dp, before);
		}
		pthread_mutex_unlock(&dp->lock);
		if (d)
			return d;
	}
	return NULL;
}

/* Blocks back to their zones: the kind first, so that from here on they are free pages
 * and no longer a cache's. */
static void hand_back(struct page_desc **batch, const uint16_t *pages, unsigned k)
{
	size_t total = 0;
	for (unsigned i = 0; i < k; i++) {
		batch[i]->flags = 0;
		__atomic_store_n(&batch[i]->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
		total += pages[i];
	}
	atomic_fetch_sub(&uslub_large_bytes, total << USLUB_PAGE_SHIFT);
	uslub_pages_free_blocks(batch, pages, k);
}

/* The depot's bin that holds the most pages: what it has too much of. */
static unsigned bin_fullest(const struct medium_bins *m)
{
	unsigned best = 0;
	for (uint64_t left = m->nonempty; left; left &= left - 1) {
		unsigned n = medium_of_bit((unsigned)__builtin_ctzll(left));
		if (!best || (unsigned)m->count[n] * n > (unsigned)m->count[best] * best)
			best = n;
	}
	return best;
}

/* A batch into node's depot. A full depot makes room from its fullest bin, so it keeps
 * the sizes threads ask for rather than clogging with those they do not (the depot of
 * a producer and a consumer filled with blocks the producer never asked for, and the
 * consumer's frees went past it). What it cannot take goes to the zones. */
static void put_into(unsigned depot, struct page_desc **batch, uint16_t *pages, unsigned k)
{
	struct depot *dp = &depots[depot];
	struct page_desc *out[FLUSH_BATCH];
	uint16_t out_pages[FLUSH_BATCH];
	unsigned i = 0, e = 0;
	uslub_lock(&dp->lock, USLUB_LOCK_DEPOT);
	uint64_t max = depot_max(dp->drained);
	uint64_t before = dp->bins.pages;
	for (; i < k; i++) {
		/* Room made a quarter of the fullest bin at a time (at least what this
		 * block needs), so a long bin is walked once for many evictions. */
		while (dp->bins.pages + pages[i] > max && e < FLUSH_BATCH && dp->bins.nonempty) {
			unsigned n = bin_fullest(&dp->bins);
			unsigned need = (unsigned)((dp->bins.pages + pages[i] - max + n - 1) / n);
			unsigned take = dp->bins.count[n] / 4 > need ? dp->bins.count[n] / 4 : need;
			if (take > FLUSH_BATCH - e)
				take = FLUSH_BATCH - e;
			e += bin_cut_oldest(&dp->bins, n, take, out + e, out_pages + e);
		}
		if (dp->bins.pages + pages[i] > max)
			break;
		medium_bin_push(&dp->bins, batch[i], pages[i]);
	}
	depot_note(dp, before);
	pthread_mutex_unlock(&dp->lock);
	if (e)
		hand_back(out, out_pages, e);
	if (i < k)
		hand_back(batch + i, pages + i, k - i);
}

void uslub_depot_put(const struct uslub_thread *t, struct page_desc **batch, uint16_t *pages,
		     unsigned k)
{
	/* One thread (and the orphan state): nobody to hand blocks to, and blocks held
	 * apart from the zones keep larger blocks from the holes they leave (realloc_mix's
	 * peak: 320 MiB before this cache, 512 with a depot, 353 without). */
	if (__atomic_load_n(&uslub_nr_thread_states, __ATOMIC_RELAXED) <= 2) {
		hand_back(batch, pages, k);
		return;
	}
	uint8_t shard[FLUSH_BATCH];
	for (unsigned i = 0; i < k; i++)
		shard[i] = (uint8_t)home_shard(t, batch[i]);
	for (unsigned s = 0; s < DEPOT_SHARDS; s++) {
		struct page_desc *group[FLUSH_BATCH];
		uint16_t group_pages[FLUSH_BATCH];
		unsigned g = 0;
		for (unsigned i = 0; i < k; i++)
			if (shard[i] == s) {
				group[g] = batch[i];
				group_pages[g++] = pages[i];
			}
		if (g)
			put_into(t->medium_node * DEPOT_SHARDS + s, group, group_pages, g);
	}
}

/* All of a depot to the zones, a batch at a time, unless a thread took from it since the
 * last look (`if_unused`). */
static void depot_empty(unsigned depot, bool if_unused)
{
	struct depot *dp = &depots[depot];
	struct page_desc *batch[FLUSH_BATCH];
	uint16_t pages[FLUSH_BATCH];
	for (unsigned rounds = 0; rounds < DEPOT_MAX_PAGES; rounds++) {
		unsigned k = 0;
		uslub_lock(&dp->lock, USLUB_LOCK_DEPOT);
		uint64_t before = dp->bins.pages;
		bool used = dp->used;
		dp->used = false;
		if (!rounds) { /* a new period: a decay pass's, or a fresh start */
			dp->drained = if_unused && dp->drained_now;
			dp->drained_now = false;
		}
		if (!(if_unused && used))
			for (; k < FLUSH_BATCH && dp->bins.nonempty; k++) {
				unsigned n =
				    medium_of_bit((unsigned)__builtin_ctzll(dp->bins.nonempty));
				batch[k] = medium_bin_pop(&dp->bins, n);
				pages[k] = (uint16_t)n;
			}
		depot_note(dp, before);
		pthread_mutex_unlock(&dp->lock);
		if (!k)
			return;
		hand_back(batch, pages, k);
		if_unused = false; /* decided at the first look */
	}
}

void uslub_medium_depots_decay(void)
{
	static _Atomic uint64_t last;
	uint64_t now = uslub_os_now_ms(), then = atomic_load_explicit(&last, memory_order_relaxed);
	if (now - then < DEPOT_DECAY_MS || !atomic_compare_exchange_strong(&last, &then, now))
		return;
	atomic_store_explicit(&use_high, use_pages(), memory_order_relaxed); /* a new period */
	/* Every depot, an empty one too: its `drained` starts the new period. */
	for (unsigned i = 0; i < NR_DEPOTS; i++)
		depot_empty(i, true);
}

void uslub_medium_depots_flush(void)
{
	for (unsigned i = 0; i < NR_DEPOTS; i++)
		if (__atomic_load_n(&depots[i].bins.pages, __ATOMIC_RELAXED))
			depot_empty(i, false);
}

uint64_t uslub_medium_depot_bound(const struct uslub_thread *t)
{
	struct depot *dp = &depots[depot_of(t)];
	uslub_lock(&dp->lock, USLUB_LOCK_DEPOT);
	uint64_t max = depot_max(dp->drained);
	pthread_mutex_unlock(&dp->lock);
	return max;
}

uint64_t uslub_medium_depot_pages(void)
{
	uint64_t pages = 0;
	for (unsigned i = 0; i < NR_DEPOTS; i++)
		pages += __atomic_load_n(&depots[i].bins.pages, __ATOMIC_RELAXED);
	return pages;
}

uint64_t uslub_medium_depot_shard_pages(unsigned node, unsigned shard)
{
	return __atomic_load_n(&depots[node * DEPOT_SHARDS + shard % DEPOT_SHARDS].bins.pages,
			       __ATOMIC_RELAXED);
}

void uslub_medium_depot_hold(unsigned node, unsigned shard, bool hold)
{
	struct depot *dp = &depots[node * DEPOT_SHARDS + shard % DEPOT_SHARDS];
	if (hold)
		uslub_lock(&dp->lock, USLUB_LOCK_DEPOT);
	else
		pthread_mutex_unlock(&dp->lock);
}

void uslub_medium_lock_all(void)
{
	for (unsigned i = 0; i < NR_DEPOTS; i++)
		uslub_lock(&depots[i].lock, USLUB_LOCK_DEPOT);
}

void uslub_medium_unlock_all(void)
{
	for (unsigned i = 0; i < NR_DEPOTS; i++)
		pthread_mutex_unlock(&depots[i].lock);
}
