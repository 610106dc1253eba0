/* Decay: free memory goes back to the OS by age and recent reuse, within a bound once
 * the live set has collapsed, and as a big buffer's fresh pages are faulted in; the
 * hand-back itself (MADV_DONTNEED, then PROT_NONE) and malloc_trim's.
 *
 * 6. Decay: free memory follows recent use. Warm free memory goes back to the OS
 *    (MADV_DONTNEED) by the clock, not only when pages are freed.
 *    - Age. Time is counted in steps, an eighth of USLUB_DECAY_MS (10 s: 1.25 s steps). A
 *      warm block carries the step it went free in; a split keeps it, a merge of two warm
 *      halves takes the mean (the age of its pages on average). Reuse is LIFO (warm
 *      blocks head each list), so what a program takes again stays young.
 *    - Recent reuse. Free memory that was in use once - warm, or handed back and still
 *      free - is a level that frees raise, reuse lowers and hand-backs leave alone; its
 *      largest fall from a high within the period is what the program took again. Up to
 *      that much (at least M_TRIM_THRESHOLD) is kept; it is the wave that a program which
 *      frees and reallocates in waves needs warm, and it is bounded by recent use, not by
 *      the peak.
 *    - A pass (uslub_decay_zone), once a step per zone: blocks free for the whole period
 *      go back; of the rest, what exceeds the recent reuse goes back oldest first, from
 *      blocks free for at least two steps. After a 1 GiB spike and with no reuse, that
 *      is everything but 32 MiB after two to three steps, and the rest after the period.
 *    - Who makes it: the first page allocation or free of a new step (a look at the
 *      coarse clock otherwise; never the no-wait high-order try, which must not wait for
 *      the lock), and the background thread (replenish.c) each step while any zone holds
 *      warm free memory - a program whose traffic is all fast paths reaches neither
 *      slow path.
 *    Free memory handed back the moment it exceeds a bound is faulted in again at once,
 *    hence the minimum age and the reuse bound (tools/bench/results/). malloc_trim hands
 *    back everything at once; the cap's reclaim too.
 *
 * 7. The bound: a collapsed live set keeps little (bound.c).
 *
 * 8. Handed back, inaccessible. A block handed back is also made inaccessible (mprotect
 *    PROT_NONE) until the page allocator hands it out again, as glibc's unmapped chunks
 *    are: a use after free of memory that went back faults where it is made, instead of
 *    landing in zeroed pages the next block gets. Only free blocks marked PF_RELEASED are
 *    ever inaccessible; what takes one makes it accessible again: uslub_take_block (the
 *    block taken; halves split off stay released), claim_locked (run.c: each released
 *    block it cuts into, whole) and a merge with a block not handed back
 *    (merge_released, buddy.c).
 *    - Mappings: each inaccessible range is a mapping of the kernel's own, so a heap whose
 *      handed-back memory lies in many pieces adds mappings toward vm.max_map_count
 *      (65530). A block goes back inaccessible only while fewer than PROTECT_BLOCKS
 *      released blocks are free in all zones, which bounds what this adds (an
 *      inaccessible range holds at least one released block, and splits one accessible
 *      range); past it, or refused, a block goes back accessible as before. Where making one
 * accessible again is refused, the allocation that took it fails with ENOMEM, a claim fails, a
 * merge hands the other half back too.
 *    - The cost: an mprotect at each hand-back and each reuse of a released block,
 *      beside the madvise and the page faults that block costs anyway
 *      (tools/bench/results/debug-letters.md).
 *
 * 9. Fresh pages paid for. Big buffers (spans, run.c) replaced one after another leave
 *    warm free memory in pieces too short for the next, which then comes from pages never
 *    touched: resident memory grows by the new buffer while the pieces stay resident, and
 *    the decay is too slow to matter for a program that runs for seconds (big_buffers:
 *    peak 159 MiB for a live peak of 110, glibc 146). So when a span is cut, as many warm
 *    free pages as it has pages not resident go back, beyond what the zone keeps: a
 *    quarter of the large blocks in use, at least M_TRIM_THRESHOLD (also where the pages
 *    paid move into the span instead, section 10, move.c). Resident memory then
 *    rises only while the zone keeps less than that, so its peak stays within the keep of
 *    the live set's.
 *    - Which: the highest addresses first. Spans are cut lowest first, so the pieces at
 *      the top are the last to be reused; the lowest or the smallest pieces first handed
 *      back what the next buffers took again (tools/bench/span_model.py, big_buffers'
 *      shape: 1.5-10x the memory faulted in for the same peak).
 *    - How many: mincore on the span says which of its pages are resident, as the
 *      flags cannot: a warm half merged with a never-touched one is a warm block. Only
 *      looked at while the zone keeps more than its keep (a peek, then the lock). The
 *      highest blocks go whole, up to 4 MiB for a few fresh pages: handing back only as
 *      many pages, from each block's top, faulted less (two threads replacing buffers of
 *      up to 8 MiB: 82 thousand against 160; malloc_large 156 against 184) but raised
 *      the peaks past glibc's (234 MiB against 227; malloc_large 490.3 against 489.9).
 *    - The cost: faults where a piece handed back is reused. With run.c's placement
 *      (measured at ac3cc9f against no pay): big_buffers 38 -> 46 thousand (glibc's
 *      415) for a peak of 140.4 MiB against 149.2; malloc_large 132 -> 184 thousand
 *      (glibc's 424) for 477.4 MiB against 503.0; glibc 146.1 and 489.9.
 *      tools/bench/results/big-buffers.md.
 *
 * 11. Big blocks freed unfilled. A program may ask for a MiB buffer and write only its
 *    start (a buffer sized for the most it might hold). Freed, such a block counted as
 *    warm free memory, all of it, so the zone's warm count passed its keep and every
 *    later span paid (section 9): a look at its pages, blocks that held nothing handed
 *    back and made inaccessible, faults (8 MiB buffers written at the first byte: 84
 *    thousand replacements a second, glibc 347). So a block of more than PLACED_PAGES (1
 *    MiB), freed while the zone's warm memory with it passes the keep, is looked at:
 *    where two windows of UNFILLED_PROBE pages, at 1/16 and 9/16 of it, hold no
 *    resident page, the program did not write it through, and the whole block is handed
 *    back (MADV_DONTNEED, which drops what it did write) and goes free cold: not counted
 *    warm, and known to read zero, as fresh pages are. A block with a resident page in a
 *    window goes free warm, as before. A cold block merged with a warm buddy counts
 *    warm (section 6's rule), so a block freed beside a warm one may still be counted.
 *    - Why windows, not a count: a system call costs 1.3 us on the KVM VM, and mincore
 *      of a 4 MiB block 6.6 us against 1.6 for 16 pages. The exact count (cold where at
 *      most 1/16 of the pages are resident) made 8 MiB buffers 1.5x and 2.5x faster on
 *      one and two threads; the windows 1.7x and 2.6x (span-unfilled.md).
 *    - What windows cost: a block written sparsely, past neither window, loses its
 *      resident pages at its free, as the decay would take them later; so does a buffer
 *      laid over pages an earlier one filled, where the windows miss those - which is
 *      what lowered the peaks of a program that fills a share of its buffers (mib_mix,
 *      1% filled: 64 MiB against 116, glibc 102). Four windows kept more (103 MiB) for
 *      no more speed; one window was faster unfilled (1.9x) and 30% slower at 3-10%
 *      filled.
 *    - Not blocks of 1 MiB or less: realloc_mix frees one in 21 at exactly 1 MiB, written
 *      through, and the look at each (52,000 mincore calls a run) cost it 5-8% of its
 *      time.
 *    - Pages moved into the block (section 10) go too; their record stays for the
 *      hand-back that maps the range afresh. Leaving such blocks warm kept mib_mix's 1%
 *      peak at 104 MiB.
 *    - Blocks of up to 4 MiB only while spans pay: such a block is no span's pages, and
 *      counts warm only for what the spans pay (section 9). A program that replaces
 *      buffers of up to 2 MiB written at their start, and no bigger ones, paid two
 *      looks, a hand-back and a fault a replacement for nothing: 0.53x of the speed
 *      before section 11 on one thread, 0.59x on two. So the look at one waits for a
 *      span that found the zone over its keep in this step or the last (pay_step);
 *      mib_mix's peaks stayed where they were (span-unfilled.md). */
#include "page/page.h"

#include "hooks.h"
#include "os/options.h"
#include "os/os.h"

/* Warm free memory beyond this is handed back to the OS at free time (mallopt's
 * M_TRIM_THRESHOLD sets it); half of it is kept. */
uint64_t uslub_trim_threshold = 32UL << 20;

/* ---- decay: free memory follows recent use ---------------------------------------- */

/* Time in decay steps: an eighth of USLUB_DECAY_MS each (1.25 s by default), read from
 * the coarse clock (vDSO: no system call, a few nanoseconds). */
static uint64_t step_ms(void)
{
	/* Tests that link core/ without reading the settings see 0: the default then. */
	unsigned period = uslub_config.decay_ms ? uslub_config.decay_ms : 10000;
	return period / DECAY_STEPS ? period / DECAY_STEPS : 1;
}

uint32_t uslub_step_now(void)
{
	return (uint32_t)(uslub_os_now_ms() / step_ms());
}

uint64_t uslub_release_threshold(void)
{
	return uslub_trim_threshold;
}

/* Free memory that was in use once: warm, or handed back and not used since. Frees raise
 * it, allocations that reuse memory lower it, hand-backs leave it as it is - so how far it
 * falls from a recent high is how much freed memory the program has taken again. */
static uint64_t used_free_pages(const struct uslub_node *n)
{
	return n->warm_free_pages + n->released_free_pages;
}

/* After pages went free, under the lock. */
void uslub_note_free(struct uslub_node *n)
{
	uint64_t level = used_free_pages(n);
	uint64_t *high = &n->reuse_high[n->reuse_step % DECAY_STEPS];
	if (level > *high)
		*high = level;
	if (level > n->reuse_window_high)
		n->reuse_window_high = level;
}

/* After pages were taken, under the lock: the fall from the period's high is reuse. */
void uslub_note_reuse(struct uslub_node *n)
{
	uint64_t high = n->reuse_window_high, level = used_free_pages(n);
	uint64_t *reuse = &n->reuse[n->reuse_step % DECAY_STEPS];
	if (high > level && high - level > *reuse)
		*reuse = high - level;
}

/* The slots of the steps since the last pass start empty; under the lock. */
static void reuse_advance(struct uslub_node *n, uint32_t step)
{
	uint32_t gap = step - n->reuse_step;
	if (gap > DECAY_STEPS)
		gap = DECAY_STEPS;
	for (uint32_t k = 1; k <= gap; k++) {
		n->reuse[(n->reuse_step + k) % DECAY_STEPS] = 0;
		n->reuse_high[(n->reuse_step + k) % DECAY_STEPS] = 0;
	}
	n->reuse_step = step;
	n->reuse_window_high = 0;
	for (unsigned k = 0; k < DECAY_STEPS; k++)
		if (n->reuse_high[k] > n->reuse_window_high)
			n->reuse_window_high = n->reuse_high[k];
	uslub_note_free(n); /* a fall from today's level counts */
}

static unsigned age_of(const struct page_desc *d, uint32_t step)
{
	unsigned age = (uint16_t)((uint16_t)step - d->objects);
	return age < DECAY_STEPS ? age : DECAY_STEPS;
}

/* Free block d of order o off zone n's lists, onto a hand-back batch (under the lock). */
static struct page_desc *batch_add(struct uslub_node *n, struct page_desc *d, unsigned o,
				   struct page_desc *batch)
{
	uslub_list_remove(n, d);
	d->order = (uint8_t)o;
	d->next = batch;
	return d;
}

/* Warm blocks looked at per pass, under the lock (largest orders first, so a heap of
 * whole free blocks is seen whole; a heap cut into more small free blocks than this is
 * decayed a part at a time). */
#define DECAY_SCAN 16384
/* Below this age (in steps) free memory stays, whatever the reuse says: long enough for
 * a program that frees and reallocates in waves to show its reuse. */
#define DECAY_MIN_AGE 2
/* Released blocks made inaccessible at most, in all zones (section 8): a few thousand
 * mappings, of the 65530 a process has by default. */
#define PROTECT_BLOCKS 2048

struct page_desc *uslub_shed_locked(struct uslub_node *n, uint32_t step, uint64_t keep, int min_age)
{
	uint64_t by_age[DECAY_STEPS + 1] = {0};
	unsigned seen = 0;
	struct page_desc *d, *batch = NULL;
	uslub_extents_flush_locked(n);
	for (int o = USLUB_MAX_ORDER; o >= 0 && seen < DECAY_SCAN; o--)
		cds_list_for_each_entry(d, &n->free_area[o], list)
		{
			if ((d->flags & PF_COLD) || ++seen > DECAY_SCAN)
				break;
			by_age[age_of(d, step)] += 1UL << o;
		}
	/* Everything of age > cut goes, and `quota` pages of age == cut. */
	uint64_t left = n->warm_free_pages - by_age[DECAY_STEPS], quota = by_age[DECAY_STEPS];
	unsigned cut = DECAY_STEPS;
	for (int a = DECAY_STEPS - 1; a >= min_age && left > keep; a--) {
		uint64_t take = left - keep < by_age[a] ? left - keep : by_age[a];
		left -= take;
		cut = (unsigned)a;
		quota = take;
	}
	seen = 0;
	for (int o = USLUB_MAX_ORDER; o >= 0 && seen < DECAY_SCAN && (cut < DECAY_STEPS || quota);
	     o--) {
		struct page_desc *tmp;
		cds_list_for_each_entry_safe(d, tmp, &n->free_area[o], list)
		{
			if ((d->flags & PF_COLD) || ++seen > DECAY_SCAN)
				break;
			unsigned age = age_of(d, step);
			if (age < cut || (age == cut && !quota))
				continue;
			if (age == cut)
				quota = quota > (1UL << o) ? quota - (1UL << o) : 0;
			batch = batch_add(n, d, o, batch);
		}
	}
	if (batch)
		n->handing_back++;
	return batch;
}

/* One pass over zone n for `step`, if no one has made it yet:
 *   - warm blocks free for the whole period (DECAY_STEPS steps) go back;
 *   - of the rest, what the recent reuse does not call for goes back, oldest first,
 *     from blocks free at least DECAY_MIN_AGE steps.
 * "Recent reuse" is the most freed memory the program took again within the period
 * (note_reuse), at least M_TRIM_THRESHOLD: a program that reallocates in waves keeps a
 * wave's worth warm, one that freed a spike and stays small keeps the threshold. */
size_t uslub_decay_zone(struct uslub_node *n, uint32_t step)
{
	uint32_t last = atomic_load_explicit(&n->decay_last, memory_order_relaxed);
	if (last == step ||
	    !atomic_compare_exchange_strong_explicit(&n->decay_last, &last, step,
						     memory_order_relaxed, memory_order_relaxed))
		return 0;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	reuse_advance(n, step);
	/* An eighth more than the largest reuse: waves differ a little from one to the
	 * next, and without the margin the few MiB a wave needs beyond the last one's went
	 * back and were faulted in again every wave (tools/bench/results/). */
	uint64_t keep = 0;
	for (unsigned k = 0; k < DECAY_STEPS; k++)
		if (n->reuse[k] > keep)
			keep = n->reuse[k];
	keep += keep / 8;
	/* A node's arenas (page.h) share the floor one large-block zone had, and its medium
	 * zones one floor likewise. */
	uint64_t floor = uslub_trim_threshold >> USLUB_PAGE_SHIFT;
	if (n >= &uslub_nodes[MAX_NODES])
		floor /= uslub_nr_arenas;
	if (keep < floor)
		keep = floor;
	struct page_desc *batch = uslub_shed_locked(n, step, keep, DECAY_MIN_AGE);
	if (batch)
		n->decay_passes++;
	uslub_zone_unlock(n);
	if (!batch)
		return 0;
	return uslub_hand_back(n, batch);
}

/* ---- fresh pages paid for (section 9) --------------------------------------------- */

/* Batches a span pays with, at most, where its pages move (section 10). */
#define PAY_ROUNDS 4

/* Warm blocks looked at for the highest addresses, at most. */
#define PAY_CANDIDATES 64

/* Warm blocks of zone n off its lists, highest addresses first, until `pages` pages are
 * taken or the PAY_CANDIDATES highest of those scanned are. Under the lock; the batch is
 * for hand_back. */
static struct page_desc *shed_high_locked(struct uslub_node *n, uint64_t pages)
{
	struct page_desc *top[PAY_CANDIDATES], *d;
	unsigned nr = 0, seen = 0;
	for (int o = USLUB_MAX_ORDER; o >= 0 && seen < DECAY_SCAN; o--)
		cds_list_for_each_entry(d, &n->free_area[o], list)
		{
			if ((d->flags & PF_COLD) || ++seen > DECAY_SCAN)
				break;
			if (nr == PAY_CANDIDATES && d < top[nr - 1])
				continue;
			/* Kept in falling address order; the lowest drops out when full. */
			unsigned i = nr < PAY_CANDIDATES ? nr++ : nr - 1;
			for (; i > 0 && top[i - 1] < d; i--)
				top[i] = top[i - 1];
			top[i] = d;
		}
	struct page_desc *batch = NULL;
	for (unsigned i = 0; i < nr && pages; i++) {
		size_t len = 1UL << top[i]->order;
		batch = batch_add(n, top[i], top[i]->order, batch);
		pages = pages > len ? pages - len : 0;
	}
	if (batch)
		n->handing_back++;
	return batch;
}

/* Blocks of a batch onto zone n's lists again as they were. */
static void put_back(struct uslub_node *n, struct page_desc *batch)
{
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	for (struct page_desc *d = batch, *next; d; d = next) {
		next = d->next;
		d->next = NULL;
		uslub_free_one(n, d, d->order, d->flags, d->objects);
	}
	uslub_zone_unlock(n);
}

void uslub_pages_pay(struct uslub_node *n, struct page_desc *d, size_t npages)
{
	uint64_t keep = uslub_pay_keep(n);
	/* A peek first: with no more kept than that (by the node's arenas together),
	 * nothing is paid, and the look at the span's pages is not made. Arenas pay no
	 * more than that together; one zone alone, what its lock's figures say. */
	uint64_t room = uslub_node_over(n);
	if (!room)
		return;
	if (uslub_nr_arenas == 1 || !zone_is_large((unsigned)(n - uslub_nodes)))
		room = UINT64_MAX;
	__atomic_store_n(&n->pay_step, uslub_step_now(), __ATOMIC_RELAXED);
	/* Which of its pages the program will fault in, from the OS: a warm free block may
	 * hold pages never touched (a warm half merged with a fresh one counts as warm). */
	long resident = uslub_os_resident_pages(page_address(d), npages << USLUB_PAGE_SHIFT);
	if (resident < 0 || (size_t)resident >= npages)
		return;
	uint64_t fresh = npages - (size_t)resident;
	/* The pages paid move into the span's fresh ones where the kernel lets them
	 * (section 10, move.c); the rest of each batch goes back as before. A warm block
	 * may hold pages never touched, which move nothing: then the next highest blocks
	 * are paid too, a few rounds at most, within the keep. The span then holds what the
	 * batches held: not known to be zero. */
	bool moves = uslub_pages_can_move();
	/* Zone n first, then the node's other arenas (page.h, arena.c): two threads'
	 * arenas, each grown to its own thread's peak, held more than one zone grown to
	 * the peak of the two. Moved pages are recorded in n, where they now lie. */
	for (unsigned a = 0; fresh && room && a <= uslub_nr_arenas; a++) {
		struct uslub_node *o = a ? uslub_other_arena(n, a - 1) : n;
		if (!o || (a && !uslub_over_keep(o)))
			continue;
		uint64_t o_keep = a ? uslub_pay_keep(o) : keep;
		for (unsigned round = 0; fresh && round < (moves ? PAY_ROUNDS : 1); round++) {
			struct page_desc *batch = NULL;
			uslub_lock(&o->lock, USLUB_LOCK_ZONE);
			uslub_extents_flush_locked(o);
			if (o->warm_free_pages > o_keep) {
				uint64_t over = o->warm_free_pages - o_keep;
				over = over < room ? over : room;
				batch = shed_high_locked(o, fresh < over ? fresh : over);
			}
			uslub_zone_unlock(o);
			if (!batch)
				break;
			uint64_t pages = 0;
			for (struct page_desc *b = batch; b; b = b->next)
				pages += 1UL << b->order;
			struct page_desc *rest = NULL;
			size_t moved =
			    moves ? uslub_pages_move(n, d, npages, batch, fresh, &rest) : 0;
			if (moved)
				d->flags &= ~PF_COLD;
			if (rest)
				put_back(o, rest);
			uslub_hand_back(o, batch);
			fresh -= moved ? moved : pages < fresh ? pages : fresh;
			room -= room == UINT64_MAX ? 0 : pages < room ? pages : room;
			if (!moved)
				break;
		}
	}
}

/* On the allocator's slow paths (pages freed or taken, never the no-wait try): a pass
 * when a step has begun since the last; a look at the clock otherwise. */
void uslub_maybe_decay(struct uslub_node *n)
{
	uint32_t step = uslub_step_now();
	if (step != atomic_load_explicit(&n->decay_last, memory_order_relaxed))
		uslub_decay_zone(n, step);
}

size_t uslub_pages_decay_all(void)
{
	uint32_t step = uslub_step_now();
	size_t released = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z))
			released += uslub_decay_zone(&uslub_nodes[z], step);
	return released;
}

/* Read under each zone's lock: a free that the thread does not see here takes the lock
 * after it, and so sees the thread's `idle` (uslub_background_note) - no fence on the
 * free path. */
static bool zone_warm(struct uslub_node *n)
{
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	bool warm = n->warm_free_pages != 0;
	uslub_zone_unlock(n);
	return warm;
}

long uslub_pages_decay_wait_ms(void)
{
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z) && zone_warm(&uslub_nodes[z])) {
			uint64_t len = step_ms();
			return (long)(len - uslub_os_now_ms() % len + 1);
		}
	return -1;
}

/* Descriptors inside a free block describe nothing; those filling whole pages after the
 * block's first descriptor page are handed back too, so a trimmed heap keeps ~1/64 of
 * nothing rather than 1/64 of its peak. */
static void release_descriptors(struct page_desc *d, unsigned order)
{
	uintptr_t first = ((uintptr_t)d + USLUB_PAGE_SIZE) & ~(USLUB_PAGE_SIZE - 1);
	uintptr_t end = (uintptr_t)(d + (1UL << order));
	if (end > first)
		uslub_os_release((void *)first, end - first);
}

size_t uslub_pages_release(unsigned node, uint64_t keep)
{
	return uslub_release_blocks(node, keep, RELEASE_ANY);
}

/* Hand warm free blocks back until at most `keep` warm pages stay (RELEASE_ANY), or every
 * block (RELEASE_ALL). */
size_t uslub_release_blocks(unsigned node, uint64_t keep, enum release_mode mode)
{
	struct uslub_node *n = &uslub_nodes[node];
	struct page_desc *batch = NULL;
	if (!zone_made(node))
		return 0; /* never made: holds nothing */

	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	uslub_extents_flush_locked(n);
	for (int o = USLUB_MAX_ORDER; o >= 0 && (mode == RELEASE_ALL || n->warm_free_pages > keep);
	     o--) {
		struct page_desc *d, *tmp;
		cds_list_for_each_entry_safe(d, tmp, &n->free_area[o], list)
		{
			if (d->flags & PF_RELEASED)
				continue;
			/* Cold blocks trail the list. Never-touched ones count against the cap
			 * all the same: RELEASE_ALL (reclaim at the cap) hands them back too,
			 * which costs the kernel nothing to undo. */
			if ((d->flags & PF_COLD) && mode != RELEASE_ALL)
				break;
			if (mode != RELEASE_ALL && n->warm_free_pages <= keep)
				break;
			batch = batch_add(n, d, o, batch);
		}
	}
	if (batch)
		n->handing_back++;
	uslub_zone_unlock(n);
	if (!batch)
		return 0;
	return uslub_hand_back(n, batch);
}

/* Handed back, or as they were where the OS refused. madvise outside the lock: other
 * threads keep allocating meanwhile. */
size_t uslub_hand_back(struct uslub_node *n, struct page_desc *batch)
{
	size_t released = 0;
	struct page_desc *done = batch;
	uint64_t blocks = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z))
			blocks +=
			    __atomic_load_n(&uslub_nodes[z].released_blocks, __ATOMIC_RELAXED);
	for (struct page_desc *d = batch; d; d = d->next) {
		uint64_t bytes = block_bytes(d->order);
		/* Memory pages were moved into is mapped afresh (section 10, move.c). */
		int r = uslub_moved_take(n, page_address(d), bytes)
			    ? uslub_os_renew(page_address(d), bytes)
			    : uslub_os_release(page_address(d), bytes);
		if (r == -2) {
			/* Neither mapped again nor there: never handed out again. */
			d->flags = PF_LOST;
			continue;
		}
		if (r == 0) {
			/* Inaccessible until handed out again (section 8); refused, or past
			 * the cap, it stays accessible, which costs nothing but the catch. */
			if (blocks++ < PROTECT_BLOCKS)
				uslub_os_protect(page_address(d), bytes, false);
			d->flags = PF_COLD | PF_RELEASED;
			released += bytes;
			release_descriptors(d, d->order);
		} else {
			d->flags &= PF_COLD; /* as it was: still counted, still in place */
		}
	}
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	while (done) {
		struct page_desc *next = done->next;
		done->next = NULL;
		if (done->flags == PF_LOST) {
			atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(done->order));
			done = next;
			continue;
		}
		if (done->flags & PF_RELEASED)
			atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(done->order));
		uslub_free_one(n, done, done->order, done->flags, done->objects);
		done = next;
	}
	/* Atomic: the statistics read them without the lock, now also while the
	 * background thread hands memory back. */
	__atomic_fetch_add(&n->released_bytes, released, __ATOMIC_RELAXED);
	__atomic_fetch_add(&n->release_calls, 1, __ATOMIC_RELAXED);
	n->handing_back--;
	uslub_zone_unlock(n);
	return released;
}

/* ---- big blocks freed unfilled (section 11) ---------------------------------------- */

/* Pages of each window looked at. */
#define UNFILLED_PROBE 16

unsigned uslub_pages_unfilled(struct uslub_node *n, struct page_desc *d, size_t npages,
			      uint32_t step)
{
	/* A block a span's pages could not be (up to 4 MiB) counts warm only for the pays:
	 * with no span paying in this step or the last, it is not looked at. Signed: another
	 * thread may have stored a step later than the one read here. First, as the cheaper
	 * test: the keep's below was 160 of a 2 MiB block's free's 900 instructions. */
	if (npages <= (1UL << USLUB_MAX_ORDER) &&
	    (int32_t)(step - __atomic_load_n(&n->pay_step, __ATOMIC_RELAXED)) > 1)
		return 0;
	/* Where the zone keeps no more than its keep with this block warm, no span pays for
	 * it, and it is not looked at either. */
	if (__atomic_load_n(&n->warm_free_pages, __ATOMIC_RELAXED) + npages <= uslub_pay_keep(n))
		return 0;
	char *p = page_address(d);
	size_t bytes = npages << USLUB_PAGE_SHIFT;
	for (size_t at = npages >> 4; at < npages; at += npages >> 1) {
		long resident = uslub_os_resident_pages(p + (at << USLUB_PAGE_SHIFT),
							UNFILLED_PROBE << USLUB_PAGE_SHIFT);
		if (resident != 0)
			return 0; /* written there, or the look refused: warm, as ever */
	}
	/* Pages moved in (section 10) go too; their record waits for a hand-back. */
	if (uslub_os_release(p, bytes) != 0)
		return 0;
	return PF_COLD;
}
