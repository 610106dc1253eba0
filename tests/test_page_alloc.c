/* The buddy page allocator: split and coalesce keep its invariants (every free block
 * naturally aligned, marked in its first descriptor, no two free buddies left apart,
 * counts matching the lists), freeing everything restores the free lists exactly,
 * claiming a range takes just those pages, large blocks of more than 1 MiB go to the
 * tightest of the warmest holes (spans to the lowest) unless the run of a block freed
 * last, or a hole found first, is as warm as any can be, released memory reads back as
 * zero and is inaccessible until it is handed out again, and a warm block is zeroed
 * without writing its pages that are zero already. */
#include "thread/thread.h"
#include "os/os.h"
#include "test_util.h"
#include "uslub.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t snapshot[USLUB_MAX_ORDER + 1];

static void take_snapshot(void)
{
	memcpy(snapshot, uslub_nodes[0].nr_free, sizeof(snapshot));
}

static int same_as_snapshot(void)
{
	return memcmp(snapshot, uslub_nodes[0].nr_free, sizeof(snapshot)) == 0;
}

static void split_and_coalesce(void)
{
	/* Enough free memory that a fresh max-order block is split below. */
	struct page_desc *hold = uslub_pages_alloc(0, USLUB_MAX_ORDER, 0);
	CHECKF(hold != NULL, "max-order block");
	take_snapshot();
	uint64_t free_before = uslub_nodes[0].free_pages;
	struct page_desc *d = uslub_pages_alloc(0, 0, 0);
	CHECKF(d != NULL, "order-0 page");
	CHECKF(uslub_nodes[0].free_pages == free_before - 1, "one page fewer free");
	CHECKF(uslub_pages_check(0) == 0, "invariants after split: %d", uslub_pages_check(0));
	uslub_pages_free(d, 0);
	CHECKF(uslub_pages_check(0) == 0, "invariants after free: %d", uslub_pages_check(0));
	CHECKF(same_as_snapshot(), "free lists restored by coalescing");
	CHECKF(uslub_nodes[0].free_pages == free_before, "free page count restored");
	uslub_pages_free(hold, USLUB_MAX_ORDER);
}

static void random_orders(void)
{
	enum { N = 3000 };
	static struct page_desc *blocks[N];
	static unsigned orders[N];
	take_snapshot();
	uint64_t free_before = uslub_nodes[0].free_pages;
	srand(42);
	for (int i = 0; i < N; i++) {
		orders[i] = (unsigned)(rand() % 6);
		blocks[i] = uslub_pages_alloc(0, orders[i], 0);
		CHECKF(blocks[i] != NULL, "block %d", i);
		uintptr_t idx = ((uintptr_t)blocks[i] & REGION_MASK) >> DESC_SHIFT;
		CHECKF((idx & ((1UL << orders[i]) - 1)) == 0, "block %d of order %u misaligned", i,
		       orders[i]);
		/* The memory is usable. */
		memset(page_address(blocks[i]), 0xa5, USLUB_PAGE_SIZE << orders[i]);
	}
	/* No two blocks overlap. */
	for (int i = 0; i < N; i += 97)
		for (int j = 0; j < N; j++) {
			if (i == j)
				continue;
			char *a = page_address(blocks[i]), *b = page_address(blocks[j]);
			CHECKF(a + (USLUB_PAGE_SIZE << orders[i]) <= b ||
				   b + (USLUB_PAGE_SIZE << orders[j]) <= a,
			       "blocks %d and %d overlap", i, j);
		}
	for (int k = N - 1; k > 0; k--) {
		int j = rand() % (k + 1);
		struct page_desc *t = blocks[k];
		unsigned o = orders[k];
		blocks[k] = blocks[j], orders[k] = orders[j];
		blocks[j] = t, orders[j] = o;
	}
	for (int i = 0; i < N; i++) {
		uslub_pages_free(blocks[i], orders[i]);
		if (i % 500 == 0)
			CHECKF(uslub_pages_check(0) == 0, "invariants at %d: %d", i,
			       uslub_pages_check(0));
	}
	CHECKF(uslub_pages_check(0) == 0, "invariants at the end");
	CHECKF(uslub_nodes[0].free_pages >= free_before, "all pages back");
}

static void free_range_and_claim(void)
{
	struct page_desc *d = uslub_pages_alloc(0, 4, 0);
	CHECKF(d != NULL, "order-4 block");
	/* Keep 5 pages, give 11 back: they become blocks of order 0, 1 and 3. */
	uslub_pages_free_range(d + 5, 11);
	CHECKF(uslub_pages_check(0) == 0, "after partial free");
	CHECKF(d[5].kind == PAGE_FREE && d[5].order == 0, "page 5 free alone");
	CHECKF(d[6].kind == PAGE_FREE && d[6].order == 1, "pages 6-7 free as order 1");
	CHECKF(d[8].kind == PAGE_FREE && d[8].order == 3, "pages 8-15 free as order 3");
	/* Claim 5..9 back (as realloc growing in place does); 10..15 stay free. */
	CHECKF(uslub_pages_claim(d + 5, 5) == 0, "claim of free pages");
	CHECKF(d[5].kind != PAGE_FREE && d[8].kind != PAGE_FREE, "claimed pages taken");
	CHECKF(d[10].kind == PAGE_FREE, "page 10 still free");
	CHECKF(uslub_pages_check(0) == 0, "after claim");
	/* A range that is not all free cannot be claimed, and nothing changes. */
	take_snapshot();
	CHECKF(uslub_pages_claim(d + 9, 3) != 0, "claim over a used page");
	CHECKF(same_as_snapshot(), "a failed claim leaves the lists alone");
	uslub_pages_free_range(d, 10);
	CHECKF(uslub_pages_check(0) == 0, "after freeing all");
}

/* Placement by the span search (core/page/run.c): a large block of more than
 * PLACED_PAGES, up to a MAX_BLOCK, goes to the shortest run of free pages among the places
 * with the most warm pages, which leaves the longer holes to longer blocks; a span goes to
 * the lowest such place, which keeps the free memory above it in one piece. */
static void placed_tightest(void)
{
	unsigned z = LARGE_ZONE(0);
	tu_section("a 2.2 MiB block in a 2.5 MiB warm hole rather than a lower 3 MiB one; a "
		   "4.1 MiB span in the lower of holes of 5.1 and 4.3 MiB");
	/* 8 MiB freed warm in two holes between pages still held: 768 pages at its start,
	 * 640 from page 1024. */
	struct page_desc *d = uslub_pages_alloc_span(z, 2048);
	CHECKF(d != NULL, "8 MiB from the large zone");
	if (!d)
		return;
	uslub_pages_free_range(d, 768);
	uslub_pages_free_range(d + 1024, 640);
	CHECKF(563 > PLACED_PAGES, "2.2 MiB is a placed block");
	struct page_desc *p = uslub_pages_alloc_span(z, 563);
	CHECKF(p == d + 1024, "2.2 MiB at page 1024 of the 8 MiB (the 2.5 MiB hole), got %td",
	       p ? p - d : -1);
	CHECKF(uslub_pages_check(z) == 0, "zone consistent after the placed block");
	/* Holes of 1300 and 1100 pages for a span of 1050: the lower, though the upper fits
	 * closer. */
	struct page_desc *e = uslub_pages_alloc_span(z, 4096);
	CHECKF(e != NULL, "16 MiB from the large zone");
	struct page_desc *q = NULL;
	if (e) {
		uslub_pages_free_range(e, 1300);
		uslub_pages_free_range(e + 1400, 1100);
		q = uslub_pages_alloc_span(z, 1050);
		/* Within the lower hole: at its start, or at its end where the free pages
		 * before e (cold ones, when e was cut from the middle of a run) make the run's
		 * start less warm. */
		CHECKF(q && q >= e - 4096 && q + 1050 <= e + 1300,
		       "the span in the lower hole (page %td of the 16 MiB)", q ? q - e : -1);
	}
	if (p)
		uslub_pages_free_range(p, 563);
	uslub_pages_free_range(d + 768, 256);
	uslub_pages_free_range(d + 1664, 384);
	if (e) {
		if (q)
			uslub_pages_free_range(q, 1050);
		uslub_pages_free_range(e + 1300, 100);
		uslub_pages_free_range(e + 2500, 4096 - 2500);
	}
	CHECKF(uslub_pages_check(z) == 0, "zone consistent with all of it back");
}

/* The runs of the big blocks freed last are looked at before the search (core/page/run.c,
 * recent_fit): a span goes where a block was freed last rather than to a lower run as
 * warm, but never to one with fewer warm pages than another place has. The hint ring is
 * written here where the test needs a run freed "long ago" or "last". */
static void recent_runs(void)
{
	unsigned z = LARGE_ZONE(0);
	struct uslub_node *n = &uslub_nodes[z];
	tu_section("a 4.3 MiB span in the run freed last, not a lower one as warm; in a warm "
		   "run, not a cold one freed last");
	/* Memory in use (a mapping of its own, never touched), so that the bound does not
	 * take the live set for collapsed and hand the warm holes back (bound.c). */
	void *pin = uslub_malloc(40UL << 20);
	/* 16 MiB written through: holes L = pages [0, 1200) and R = [1400, 2600). */
	struct page_desc *d = uslub_pages_alloc_span(z, 4096);
	CHECKF(d != NULL, "16 MiB from the large zone");
	if (!d) {
		uslub_free(pin);
		return;
	}
	memset(page_address(d), 1, 16UL << 20);
	uslub_pages_free_range(d, 1200);
	pthread_mutex_lock(&n->lock);
	memset(n->freed, 0, sizeof(n->freed)); /* L was freed long ago */
	pthread_mutex_unlock(&n->lock);
	uslub_pages_free_range(d + 1400, 1200);
	struct page_desc *p = uslub_pages_alloc_span(z, 1100);
	CHECKF(p && p >= d + 1400 && p + 1100 <= d + 2600,
	       "the span in R, the run freed last (page %td; L starts at 0)", p ? p - d : -1);
	if (p)
		uslub_pages_free_range(p, 1100);
	CHECKF(uslub_pages_check(z) == 0, "zone consistent");
	/* Both holes handed back (cold), then L taken, written and freed again (warm) and
	 * forgotten; R named as freed last. */
	uslub_release_blocks(z, 0, RELEASE_ALL);
	CHECKF(uslub_pages_claim(d, 1200) == 0, "L claimed again");
	memset(page_address(d), 2, 1200UL << USLUB_PAGE_SHIFT);
	uslub_pages_free_range(d, 1200);
	pthread_mutex_lock(&n->lock);
	memset(n->freed, 0, sizeof(n->freed));
	n->freed[0] = d + 1400;
	pthread_mutex_unlock(&n->lock);
	p = uslub_pages_alloc_span(z, 1100);
	CHECKF(p && p + 1100 <= d + 1200 && p + 1100 > d,
	       "the span in L, the warm run (page %td), not R, the cold one freed last",
	       p ? p - d : -1);
	if (p)
		uslub_pages_free_range(p, 1100);
	uslub_pages_free_range(d + 1200, 200);
	uslub_pages_free_range(d + 2600, 4096 - 2600);
	CHECKF(uslub_pages_check(z) == 0, "zone consistent with all of it back");
	uslub_free(pin);
}

/* The search stops at the first place no other can beat on warm pages (core/page/run.c,
 * alloc_span): warm blocks head their lists newest first, so of two warm holes that both
 * hold a span, the one freed last takes it, though the other lies lower. */
static void search_stops_early(void)
{
	unsigned z = LARGE_ZONE(0);
	struct uslub_node *n = &uslub_nodes[z];
	tu_section("a 4.3 MiB span in the warm hole freed last, found first, not the lower one");
	void *pin = uslub_malloc(40UL << 20); /* the bound, as above */
	struct page_desc *d = uslub_pages_alloc_span(z, 7168);
	CHECKF(d != NULL, "28 MiB from the large zone");
	if (!d) {
		uslub_free(pin);
		return;
	}
	memset(page_address(d), 1, 7168UL << USLUB_PAGE_SHIFT);
	/* Holes of two naturally aligned max-order blocks each: L at k, R at k + 3072. */
	size_t k = (size_t)(-page_index(d) & ((1UL << USLUB_MAX_ORDER) - 1));
	struct page_desc *l = d + k, *r = d + k + 3072;
	uslub_pages_free_range(l, 2048);
	uslub_pages_free_range(r, 2048);
	pthread_mutex_lock(&n->lock);
	memset(n->freed, 0, sizeof(n->freed)); /* neither is a recent run */
	pthread_mutex_unlock(&n->lock);
	struct page_desc *p = uslub_pages_alloc_span(z, 1100);
	CHECKF(p && p >= r && p + 1100 <= r + 2048,
	       "the span in R, freed last (page %td of the 28 MiB; L at %zu, R at %zu)",
	       p ? p - d : -1, k, k + 3072);
	if (p)
		uslub_pages_free_range(p, 1100);
	uslub_pages_free_range(d, k);
	uslub_pages_free_range(l + 2048, 1024);
	uslub_pages_free_range(r + 2048, 7168 - (k + 5120));
	CHECKF(uslub_pages_check(z) == 0, "zone consistent with all of it back");
	uslub_free(pin);
}

/* A large block that no free block of its order holds is made of neighbouring smaller
 * free blocks before the heap grows. */
static void large_runs(void)
{
	/* The slab zone: the large zone has nothing before it first grows (it borrows). The
	 * run search is the same in both. */
	unsigned z = 0;
	struct uslub_node *n = &uslub_nodes[z];
	enum { MAXHOG = 4096 };
	static struct page_desc *hog[MAXHOG];
	unsigned nhog = 0;
	/* Hold every free block of order 3 and up, without growing. */
	for (int o = USLUB_MAX_ORDER; o >= 3; o--) {
		struct page_desc *d;
		while (nhog < MAXHOG && (d = uslub_pages_alloc(z, (unsigned)o, GFP_NOGROW)))
			hog[nhog++] = d;
	}
	CHECKF(nhog > 0 && nhog < MAXHOG, "%u blocks of order >= 3 held", nhog);
	struct page_desc *d = hog[--nhog];
	unsigned order = d->order;
	/* Free 6 of its pages: they become blocks of order 2 and 1 next to each other, with
	 * the rest of it still held. */
	uslub_pages_free_range(d, 6);
	CHECKF(d[0].kind == PAGE_FREE && d[0].order == 2 && d[4].kind == PAGE_FREE &&
		   d[4].order == 1,
	       "pages 0-3 and 4-5 free as blocks of order 2 and 1");
	uint64_t grows = n->grows, runs = n->runs;
	struct page_desc *r = uslub_pages_alloc_run(z, 6, RUN_TRIES);
	CHECKF(r != NULL, "6 pages from smaller neighbouring blocks");
	CHECKF(n->grows == grows, "the zone did not grow");
	CHECKF(n->runs == runs + 1, "large_runs counted");
	CHECKF(uslub_pages_check(z) == 0, "zone consistent after the run");
	if (r)
		for (unsigned i = 0; i < 6; i++)
			CHECKF(r[i].kind != PAGE_FREE, "page %u of the run taken", i);
	/* With a block of the order at hand, that block serves, cut to size. */
	uslub_pages_free_range(hog[--nhog], 1UL << order);
	struct page_desc *b = uslub_pages_alloc_run(z, 6, RUN_TRIES);
	CHECKF(b != NULL && n->runs == runs + 1, "a whole block, not a run");
	CHECKF(uslub_pages_check(z) == 0, "zone consistent after the cut");
	if (b)
		uslub_pages_free_range(b, 6);
	if (r)
		uslub_pages_free_range(r, 6);
	uslub_pages_free_range(d + 6, (1UL << order) - 6);
	while (nhog) {
		struct page_desc *h = hog[--nhog];
		uslub_pages_free_range(h, 1UL << h->order);
	}
	CHECKF(uslub_pages_check(z) == 0, "zone consistent with everything back");
}

static void release_to_os(void)
{
	struct page_desc *d = uslub_pages_alloc(0, 8, 0);
	CHECKF(d != NULL, "order-8 block");
	char *p = page_address(d);
	memset(p, 0x5a, USLUB_PAGE_SIZE << 8);
	uint64_t mapped = atomic_load(&uslub_mapped_bytes);
	uslub_pages_free(d, 8);
	size_t released = uslub_pages_release(0, 0);
	CHECKF(released >= (USLUB_PAGE_SIZE << 8), "released %zu bytes", released);
	CHECKF(atomic_load(&uslub_mapped_bytes) <= mapped - (USLUB_PAGE_SIZE << 8),
	       "mapped figure drops by what was released");
	CHECKF(uslub_nodes[0].warm_free_pages == 0, "no warm free page left");
	CHECKF(uslub_pages_check(0) == 0, "after release");
	struct page_desc *again = uslub_pages_alloc(0, 8, 0);
	CHECKF(again != NULL, "allocation after release");
	CHECKF(again->flags & PF_COLD, "a released block comes back cold");
	char *q = page_address(again);
	size_t nonzero = 0;
	for (size_t i = 0; i < (USLUB_PAGE_SIZE << 8); i++)
		nonzero += q[i] != 0;
	CHECKF(nonzero == 0, "released memory reads as zero (%zu bytes were not)", nonzero);
	uslub_pages_free(again, 8);
}

/* Whether the kernel can read p's byte (into a pipe, and back): a page made inaccessible
 * (PROT_NONE) gives EFAULT, without a signal. */
static int readable(const void *p)
{
	static int fds[2] = {-1, -1};
	char c;
	if (fds[0] < 0 && pipe(fds) != 0)
		return -1;
	if (write(fds[1], p, 1) != 1)
		return 0;
	return read(fds[0], &c, 1) == 1;
}

/* A block handed back is inaccessible until it is handed out again (decay.c, section 8):
 * taken whole, merged with a buddy that was not handed back, cut into by a claim. At most
 * PROTECT_BLOCKS (2048) released blocks, in all zones, are made inaccessible: the mappings
 * they split off stay bounded. */
static void released_inaccessible(void)
{
	tu_section("released blocks inaccessible until taken, merged or claimed; at most 2048 "
		   "in all");
	struct page_desc *d = uslub_pages_alloc(0, 8, 0);
	CHECK(d != NULL);
	if (!d)
		return;
	char *p = page_address(d);
	memset(p, 1, USLUB_PAGE_SIZE << 8);
	uslub_pages_free(d, 8);
	uslub_pages_release(0, 0);
	CHECKF(!readable(p) && !readable(p + (USLUB_PAGE_SIZE << 8) - 1),
	       "a block handed back is inaccessible");
	struct page_desc *again = uslub_pages_alloc(0, 8, 0);
	CHECK(again != NULL);
	if (!again)
		return;
	char *q = page_address(again);
	CHECKF(readable(q) && readable(q + (USLUB_PAGE_SIZE << 8) - 1),
	       "accessible once handed out");
	memset(q, 2, USLUB_PAGE_SIZE << 8);
	/* Half of it handed back, then the other half freed: the merged block is not
	 * released, so all of it is accessible. */
	uslub_pages_free_range(again, 128);
	uslub_pages_release(0, 0);
	CHECKF(!readable(q), "the first half, handed back, is inaccessible");
	uslub_pages_free_range(again + 128, 128);
	CHECKF(readable(q) && readable(q + (USLUB_PAGE_SIZE << 7)),
	       "merged with a half not handed back: accessible");
	CHECKF(uslub_pages_check(0) == 0, "after the merge");
	/* A claim cutting into a released block: the whole block accessible again. */
	struct page_desc *e = uslub_pages_alloc(0, 4, 0);
	CHECK(e != NULL);
	if (e) {
		uslub_pages_free(e, 4);
		uslub_pages_release(0, 0);
		CHECK(!readable(page_address(e)));
		/* Refused, the claim fails and the block stays as it was. */
		uslub_os_fail(0, 1);
		CHECKF(uslub_pages_claim(e + 2, 3) != 0, "a claim the OS refuses fails");
		uslub_os_fail(0, 0);
		struct page_desc *h = uslub_free_block_of(e + 2);
		CHECKF(h == e && (h->flags & PF_RELEASED) && uslub_pages_check(0) == 0,
		       "... and leaves the released block free and whole");
		CHECK(uslub_pages_claim(e + 2, 3) == 0);
		CHECKF(readable(page_address(e)) && readable(page_address(e + 15)),
		       "a claim makes the released block it cuts into accessible");
		memset(page_address(e + 2), 3, 3 * USLUB_PAGE_SIZE);
		uslub_pages_free_range(e + 2, 3);
	}
	CHECKF(uslub_pages_check(0) == 0, "after the claim");
	/* 2500 released blocks apart from each other: no more than 2048 inaccessible. */
	enum { N = 5000 };
	static struct page_desc *pg[N];
	int n = 0;
	while (n < N && (pg[n] = uslub_pages_alloc(0, 0, 0)))
		memset(page_address(pg[n++]), 1, USLUB_PAGE_SIZE);
	for (int i = 0; i < n; i += 2)
		uslub_pages_free(pg[i], 0);
	uslub_pages_release(0, 0);
	int closed = 0, released = 0;
	for (int i = 0; i < n; i += 2) {
		struct page_desc *h = uslub_free_block_of(pg[i]);
		if (h && (h->flags & PF_RELEASED)) {
			released++;
			closed += !readable(page_address(pg[i]));
		}
	}
	CHECKF(released > 2048 && closed > 0 && closed <= 2048,
	       "%d released pages apart, %d inaccessible", released, closed);
	for (int i = 1; i < n; i += 2)
		uslub_pages_free(pg[i], 0);
	CHECKF(uslub_pages_check(0) == 0, "everything back");
}

static void os_failure(void)
{
	/* Exhaust what is free, then make the OS refuse: allocation fails with ENOMEM and
	 * nothing breaks; it works again once the OS does. */
	enum { N = 4096 };
	static struct page_desc *held[N];
	static unsigned zone_of[N], order_of[N];
	int n = 0;
	/* Every free block of both zones of node 0: the slab zone borrows from the large
	 * one before it gives up. */
	for (unsigned z = 0; z < 2; z++) {
		unsigned zone = z ? LARGE_ZONE(0) : 0;
		for (int o = USLUB_MAX_ORDER; o >= 0; o--) {
			struct page_desc *d;
			while (n < N && (d = uslub_pages_alloc(zone, (unsigned)o,
							       GFP_TRYLOCK | GFP_NOGROW))) {
				zone_of[n] = zone;
				order_of[n] = (unsigned)o;
				held[n++] = d;
			}
		}
	}
	struct region *r = uslub_nodes[0].regions;
	size_t keep = r->grown;
	r->grown = REGION_PAGES; /* region full: growing needs a new one from the OS */
	uslub_os_fail(0, 10);	 /* the slab zone tries to grow twice: before and after borrowing */
	errno = 0;
	struct page_desc *d = uslub_pages_alloc(0, USLUB_MAX_ORDER, 0);
	uslub_os_fail(0, 0);
	CHECKF(d == NULL && errno == ENOMEM, "OS failure gives ENOMEM");
	CHECKF(uslub_pages_check(0) == 0, "after the failure");
	d = uslub_pages_alloc(0, USLUB_MAX_ORDER, 0);
	CHECKF(d != NULL, "allocation works again");
	if (d)
		uslub_pages_free(d, USLUB_MAX_ORDER);
	r->grown = keep;
	while (n > 0) {
		n--;
		uslub_pages_free(held[n], order_of[n]);
	}
	(void)zone_of;
	CHECKF(uslub_pages_check(0) == 0, "at the end");
}

/* The decay's clock (uslub_os_now_ms) is the vDSO's, found without libc's wrapper: it
 * must be found on Linux, agree with clock_gettime and move with it. */
static void clock_from_vdso(void)
{
	CHECKF(uslub_os_clock_is_vdso(), "the vDSO's clock_gettime is found");
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &a);
	uint64_t ours = uslub_os_now_ms();
	clock_gettime(CLOCK_MONOTONIC_COARSE, &b);
	uint64_t lo = (uint64_t)a.tv_sec * 1000 + (uint64_t)a.tv_nsec / 1000000;
	uint64_t hi = (uint64_t)b.tv_sec * 1000 + (uint64_t)b.tv_nsec / 1000000;
	CHECKF(ours >= lo && ours <= hi, "now_ms %lu within [%lu, %lu]", (unsigned long)ours,
	       (unsigned long)lo, (unsigned long)hi);
	struct timespec nap = {0, 50 * 1000000L};
	nanosleep(&nap, NULL);
	uint64_t later = uslub_os_now_ms();
	CHECKF(later >= ours + 40 && later <= ours + 5000, "50 ms later: +%lu ms",
	       (unsigned long)(later - ours));
	clock_gettime(CLOCK_REALTIME, &a);
	uslub_os_clock(CLOCK_REALTIME, &b);
	CHECKF(b.tv_sec >= a.tv_sec && b.tv_sec <= a.tv_sec + 1, "CLOCK_REALTIME agrees");
}

/* lock_stat: a zone lock held by one thread makes another's take a counted wait, and a
 * try a counted failure (lock_stat.h). Deterministic: the holder keeps the lock until
 * the other thread has been seen waiting for it. */
static void *take_zone(void *arg)
{
	(void)arg;
	struct page_desc *d = uslub_pages_alloc(0, 0, 0); /* waits for the holder */
	if (d)
		uslub_pages_free(d, 0);
	return NULL;
}

static void lock_contention(void)
{
	tu_section("a held zone lock: the other thread's take is a wait, a try a failure");
	struct uslub_lock_stat *z = &uslub_lock_stats[USLUB_LOCK_ZONE];
	uint64_t waits = atomic_load(&z->waits), fails = atomic_load(&z->trylock_failures);
	uslub_pages_lock_all();
	CHECKF(uslub_pages_alloc(0, 0, GFP_NOWAIT) == NULL, "a no-wait try took a held zone");
	CHECKF(atomic_load(&z->trylock_failures) == fails + 1, "trylock failures %lu -> %lu",
	       (unsigned long)fails, (unsigned long)atomic_load(&z->trylock_failures));
	pthread_t t;
	pthread_create(&t, NULL, take_zone, NULL);
	/* Bounded: 10 s for the other thread to find the lock held. */
	for (int i = 0; i < 10000 && atomic_load(&z->waits) == waits; i++) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	CHECKF(atomic_load(&z->waits) == waits + 1, "waits %lu -> %lu", (unsigned long)waits,
	       (unsigned long)atomic_load(&z->waits));
	uslub_pages_unlock_all();
	pthread_join(t, NULL);
	CHECKF(uslub_pages_check(0) == 0, "invariants after the contended take");
}

/* The span search's question of the page before a free block (run.c, free_before): the
 * free block ending there, told by the order its last page keeps, checked against the
 * block; a middle page, a page in use or a stale order answers NULL. */
static void free_block_ending(void)
{
	struct page_desc *a = uslub_pages_alloc(0, 6, 0);
	CHECK(a != NULL);
	if (!a)
		return;
	uslub_pages_free_range(a + 8, 8); /* its buddy a .. a + 7 is in use: one block */
	uslub_pages_free_range(a + 16, 1);
	CHECKF(uslub_free_block_ending(a + 15) == a + 8, "the last page of an order-3 block");
	CHECKF(uslub_free_block_ending(a + 12) == NULL && uslub_free_block_of(a + 12) == a + 8,
	       "a middle page: not a last page, but in the block");
	CHECKF(uslub_free_block_ending(a + 16) == a + 16, "an order-0 block ends at its head");
	CHECKF(uslub_free_block_ending(a + 7) == NULL, "a page in use");
	atomic_store(&a[23].word, 3); /* as a slab's word might read: order 3 */
	CHECKF(uslub_free_block_ending(a + 23) == NULL, "a stale order naming pages in use");
	uslub_pages_release(0, 0);
	CHECKF(uslub_free_block_ending(a + 15) == a + 8,
	       "handed back (its descriptors with it): the order is written again");
	atomic_store(&a[23].word, 0);
	uslub_pages_free_range(a, 8);
	uslub_pages_free_range(a + 17, 47);
	CHECKF(uslub_pages_check(0) == 0, "invariants after the last-page checks");
}

/* The span search starts only from free blocks of the order a run that holds the buffer
 * must contain (run.c): a warm hole of 2100 pages whose first pages are blocks of orders
 * 0-9, with an order-10 block after them, is where a 2000-page span goes, at its start -
 * not at the cold top the zone would grow. Run first, while the large zone holds no other
 * warm free memory. */
static void span_from_high_orders(void)
{
	unsigned z = LARGE_ZONE(0);
	tu_section("a 2000-page span in a warm 2100-page hole that starts with blocks of orders "
		   "0-9: at the hole's start");
	struct page_desc *d = uslub_pages_alloc_span(z, 6144);
	CHECKF(d != NULL, "24 MiB from the large zone");
	if (!d)
		return;
	/* The hole starts a page past a 2048-page boundary of the region. */
	size_t lead = ((page_index(d) + 2047) & ~(size_t)2047) - page_index(d) + 1;
	struct page_desc *h = d + lead;
	uslub_pages_free_range(h, 2100);
	CHECKF(uslub_free_block_of(h) == h && h->order == 0, "the hole starts with a single page");
	struct page_desc *q = uslub_pages_alloc_span(z, 2000);
	CHECKF(q == h, "the span at the hole's start (page %td of it)", q ? q - h : -1);
	if (q)
		uslub_pages_free_range(q, 2000);
	uslub_pages_free_range(d, lead);
	uslub_pages_free_range(h + 2100, 6144 - lead - 2100);
	CHECKF(uslub_pages_check(z) == 0, "zone consistent with all of it back");
}

/* uslub_pages_zero (page/zero.c): every byte zero after it, a length that is no multiple
 * of a word included, and the pages that were zero already not written - read, they map
 * the kernel's zero page, which adds nothing to the resident set (mincore would count
 * them). */
static void zero_reads_first(void)
{
	tu_section("a warm block zeroed: written pages cleared, pages still zero not written");
	enum { PAGES = 1024 }; /* 4 MiB: a memset would make all of it resident */
	size_t bytes = PAGES * 4096 - 3;
	unsigned char *b = uslub_os_map(PAGES * 4096);
	CHECK(b != NULL);
	if (!b)
		return;
	b[10 * 4096 + 100] = 1;
	b[bytes - 1] = 2;
	size_t before = tu_rss_bytes();
	uslub_pages_zero(b, bytes);
	size_t after = tu_rss_bytes();
	size_t nonzero = 0;
	for (size_t i = 0; i < bytes; i++)
		nonzero += b[i] != 0;
	CHECK_EQ(nonzero, 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* A sanitizer's shadow of the bytes read grows the resident set itself (TSan's: four
	 * times the bytes). */
	after = before;
#endif
	CHECKF(after <= before + (256 << 10), "the zeroing grew the resident set by %zu KiB",
	       (after - before) / 1024);
	uslub_os_unmap(b, PAGES * 4096);
}

int main(void)
{
	uslub_free(uslub_malloc(1)); /* start-up */
	CHECKF(uslub_pages_check(0) == 0, "invariants at start");
	span_from_high_orders();
	split_and_coalesce();
	random_orders();
	free_range_and_claim();
	/* Placement by warmth: no hand-back meanwhile. With little memory in use the bound
	 * holds warm free memory to half of M_TRIM_THRESHOLD and sheds the oldest first (a
	 * hole freed before another), and the decay passes of the background thread run
	 * when they will: in a parallel test run the lower hole once went cold before the
	 * span's search (bound.c, decay.c). */
	uint64_t threshold = uslub_trim_threshold;
	uslub_trim_threshold = 1ULL << 40;
	placed_tightest();
	recent_runs();
	search_stops_early();
	large_runs();
	uslub_trim_threshold = threshold;
	free_block_ending();
	release_to_os();
	released_inaccessible();
	os_failure();
	clock_from_vdso();
	lock_contention();
	zero_reads_first();
	return tu_summary("test_page_alloc");
}
