/* The bound: free memory follows the live set once it has collapsed (decay.c, section 7).
 *
 * Decay alone keeps what recent reuse called for, so a program whose live set collapses
 * would keep its last wave for the period. So once less than a quarter of
 * M_TRIM_THRESHOLD (8 MiB) is in use (slab pages, large and huge blocks), free memory
 * kept - warm free pages of every zone, cached huge mappings (huge.c) and the depots'
 * blocks - may not exceed half of it (16 MiB).
 *   - Where: uslub_pages_bound, on the slow paths where free memory grows or memory in
 *     use falls - a page free, a huge free - never on an allocation. Past the bound, what
 *     exceeds three quarters of it goes back at once, oldest first (the decay's order,
 *     uslub_shed_locked), large zone first; the huge cache is cut to that too, and a
 *     mapping the bound has no room for is not cached. One thread sheds at a time, so two
 *     do not hand back the same excess.
 *   - Why only a collapse: a bound that follows a larger live set handed back memory that
 *     steady churn faulted in again at once; at 8 MiB in use no workload changed
 *     (tools/bench/results/).
 *   - Waves after a collapse. A program that builds a working set from almost nothing,
 *     frees all of it and builds it again - a batch, a request, a file at a time - shows
 *     the bound a collapse per wave. Handing each wave back made it fault every page in
 *     again every time: 1000 blocks of 64 KiB allocated and freed in a loop cost 15 us a
 *     block against tcmalloc's 0.13 (glibc, trimming its heap's top, 11-23). So the
 *     second collapse within the decay period is taken for a wave: the bound then
 *     allows the live set's high since the collapse before, and an eighth (the decay's
 *     margin), beyond its floor (what the collapse before kept is still there), until
 *     the next collapse says again; the decay hands it back once the
 *     waves stop (free for the whole period). A live set that collapses once - a spike,
 *     a program's end - keeps 16 MiB as before, and the first wave after it faults in
 *     again (tools/bench/results/collapse-waves.md).
 *   - The cost: a program with almost nothing in use that frees and reallocates more than
 *     16 MiB at a time faults the first repetition in again; from the second on, it keeps
 *     the wave warm until it stops for the decay period. */
#include "page/page.h"

#include "hooks.h"

/* The highest live set seen since the last collapse (at the bound's looks: page and
 * huge frees), the step after that collapse's (0: none yet), and what the last collapse
 * allowed beyond the bound's floor. Races between threads only move the guess. */
static _Atomic uint64_t wave_high;
static _Atomic uint32_t collapse_step;
static _Atomic uint64_t wave_keep;
static _Atomic uint64_t last_high; /* the live set's high before the last collapse */

static uint64_t in_use_bytes(void)
{
	/* The depots' blocks are free: counted in use, up to 32 MiB of them hid a collapse
	 * from the bound (test_bound kept 600 MiB free). */
	uint64_t large = uslub_large_in_use();
	uint64_t held = atomic_load_explicit(&uslub_depot_bytes, memory_order_relaxed);
	return atomic_load_explicit(&uslub_slab_bytes, memory_order_relaxed) +
	       (large > held ? large - held : 0) +
	       atomic_load_explicit(&uslub_huge_bytes, memory_order_relaxed);
}

static void note_high(uint64_t in_use)
{
	uint64_t high = atomic_load_explicit(&wave_high, memory_order_relaxed);
	while (in_use > high &&
	       !atomic_compare_exchange_weak_explicit(&wave_high, &high, in_use,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

void uslub_bound_leaving(_Atomic uint64_t *in_use, uint64_t bytes)
{
	note_high(in_use_bytes());
	atomic_fetch_sub(in_use, bytes);
}

/* The live set is below the collapse line: a first look since it grew past the line marks
 * a collapse, and one within the decay period of the last makes it a wave. */
static uint64_t collapsed(uint64_t in_use)
{
	uint64_t line = uslub_trim_threshold / 4, floor = uslub_trim_threshold / 2;
	uint64_t high = atomic_load_explicit(&wave_high, memory_order_relaxed);
	uint32_t now = uslub_step_now() + 1; /* 0 stays "never" */
	if (high >= line &&
	    atomic_compare_exchange_strong_explicit(&wave_high, &high, in_use, memory_order_relaxed,
						    memory_order_relaxed)) {
		uint32_t last = atomic_exchange_explicit(&collapse_step, now, memory_order_relaxed);
		uint64_t before = atomic_exchange_explicit(&last_high, high, memory_order_relaxed);
		/* The next wave is guessed from the last two: the smaller of their highs. */
		uint64_t keep = before < high ? before : high;
		keep += keep / 8;
		bool wave = last && now - last <= DECAY_STEPS && keep > floor;
		atomic_store_explicit(&wave_keep, wave ? keep : 0, memory_order_relaxed);
	}
	uint64_t keep = atomic_load_explicit(&wave_keep, memory_order_relaxed);
	if (keep && now - atomic_load_explicit(&collapse_step, memory_order_relaxed) > DECAY_STEPS)
		keep = 0; /* the waves stopped: the decay has had its period */
	/* Beside the floor: what the last collapse kept is still there under the wave. */
	return floor + keep;
}

uint64_t uslub_keep_bound(void)
{
	uint64_t in_use = in_use_bytes();
	note_high(in_use);
	/* A live set under a quarter of M_TRIM_THRESHOLD has collapsed (or never grew): free
	 * memory kept is held to half the threshold, or to the waves' height. Above, the
	 * decay alone decides. */
	return in_use < uslub_trim_threshold / 4 ? collapsed(in_use) : UINT64_MAX;
}

/* One thread sheds at a time: two reading the same excess would hand it back twice. */
static _Atomic int bounding;

/* Warm free memory of every zone, peeked at without the locks. */
static uint64_t warm_bytes(void)
{
	uint64_t pages = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z))
			pages += __atomic_load_n(&uslub_nodes[z].warm_free_pages, __ATOMIC_RELAXED);
	return pages << USLUB_PAGE_SHIFT;
}

void uslub_pages_bound(void)
{
	uint64_t bound = uslub_keep_bound();
	if (likely(bound == UINT64_MAX))
		return; /* the live set has not collapsed: the decay alone decides */
	uint64_t warm = warm_bytes();
	uint64_t huge = atomic_load_explicit(&uslub_huge_cached_bytes, memory_order_relaxed);
	uint64_t held = atomic_load_explicit(&uslub_depot_bytes, memory_order_relaxed);
	if (likely(warm + huge + held <= bound) || atomic_exchange(&bounding, 1))
		return;
	/* Down to three quarters of the bound, so a program hovering at it does not pay a
	 * hand-back at every free. */
	uint64_t target = bound - bound / 4;
	if (huge > target)
		uslub_huge_cache_trim(target);
	/* The depots' blocks become free pages of their zones, shed below with the rest: two
	 * depots at their 4 MiB floor held resident memory past test_bound's slack. Their
	 * frees come back here, and find `bounding` taken. */
	if (held)
		uslub_hooks.release_held();
	uint32_t step = uslub_step_now();
	for (unsigned z = 0; z < NR_ZONES; z++) {
		unsigned zone = (z + MAX_NODES) % NR_ZONES; /* the large-block zones first */
		if (!zone_in_use(zone))
			continue;
		struct uslub_node *n = &uslub_nodes[zone];
		uint64_t kept = warm_bytes() + atomic_load_explicit(&uslub_huge_cached_bytes,
								    memory_order_relaxed);
		if (kept <= target)
			break;
		uint64_t excess = (kept - target) >> USLUB_PAGE_SHIFT;
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
		uint64_t keep = n->warm_free_pages > excess ? n->warm_free_pages - excess : 0;
		struct page_desc *batch =
		    n->warm_free_pages ? uslub_shed_locked(n, step, keep, 0) : NULL;
		if (batch)
			n->bound_sheds++;
		uslub_zone_unlock(n);
		if (batch)
			uslub_hand_back(n, batch);
	}
	atomic_store(&bounding, 0);
}
