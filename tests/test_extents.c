/* Free runs kept whole (core/page/extent.c): the large-block zones' front.
 *
 * - Three neighbouring blocks of 64 pages freed in the order first, last, middle make
 *   one run of 192 pages headed by the first: the middle joins both.
 * - A block of 100 pages is cut from the run's start; the rest stays a run.
 * - realloc grows a block into the run after it, in place, and a shrink's tail joins it.
 * - The zone's decay pass, and malloc_trim, give the buddy every run; the zone's lists
 *   and counters consistent throughout (uslub_pages_check counts the runs).
 * - Many blocks freed in a random order over a live set: every run's pages counted, and
 *   the blocks cut from them keep their bytes. */
#include "page/page.h"
#include "test_util.h"

#include <string.h>

#define PAGE 4096UL

static struct uslub_node *zone_of(const void *p)
{
	return region_of(p)->node;
}

static struct page_desc *desc_of(const void *p)
{
	return region_desc(region_of(p), p);
}

static bool is_run(const void *p, size_t pages)
{
	struct page_desc *d = desc_of(p);
	return d->kind == PAGE_EXTENT && d->objects == pages;
}

static void merge_and_cut(void)
{
	tu_section("three neighbouring blocks freed first, last, middle: one run of 192 pages; "
		   "a block of 100 pages cut from its start; realloc into the run and back");
	char *a = MALLOC(64 * PAGE), *b = MALLOC(64 * PAGE), *c = MALLOC(64 * PAGE);
	char *guard = MALLOC(64 * PAGE);
	CHECK(a && b && c && guard);
	if (b != a + 64 * PAGE || c != b + 64 * PAGE) {
		printf("  (blocks not laid end to end: %p %p %p; skipped)\n", a, b, c);
		return;
	}
	struct uslub_node *n = zone_of(a);
	CHECKF(n >= &uslub_nodes[MAX_NODES], "a large-block zone (%td)", n - uslub_nodes);
	uint64_t pages0 = n->ext_pages, hits0 = n->ext_hits;
	FREE(a);
	FREE(c);
	CHECK(is_run(a, 64) && is_run(c, 64));
	CHECK_EQ(n->ext_pages, pages0 + 128);
	FREE(b);
	CHECKF(is_run(a, 192), "run at the first block: kind %u, %u pages", desc_of(a)->kind,
	       desc_of(a)->objects);
	CHECK(desc_of(b)->kind == PAGE_UNUSED && desc_of(c)->kind == PAGE_UNUSED);
	CHECK_EQ(n->ext_pages, pages0 + 192);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);

	char *x = MALLOC(100 * PAGE);
	CHECKF(x == a, "cut at the run's start: %p, run at %p", x, a);
	CHECK_EQ(n->ext_hits, hits0 + 1);
	CHECK(is_run(a + 100 * PAGE, 92));
	memset(x, 7, 100 * PAGE);
	char *y = REALLOC(x, 150 * PAGE);
	CHECKF(y == x, "grown into the run in place: %p, was %p", y, x);
	CHECK(is_run(a + 150 * PAGE, 42));
	CHECK(y[0] == 7 && y[100 * PAGE - 1] == 7);
	y = REALLOC(y, 120 * PAGE);
	CHECKF(y == x, "shrunk in place: %p", y);
	CHECK(is_run(a + 120 * PAGE, 72));
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);

	FREE(y);
	CHECK(is_run(a, 192));
	uint32_t step = uslub_step_now() + 1;
	uslub_decay_zone(n, step);
	CHECKF(n->ext_pages == 0, "after the decay pass: %lu pages in runs",
	       (unsigned long)n->ext_pages);
	CHECK(desc_of(a)->kind == PAGE_FREE);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	FREE(guard);
}

static void random_frees(void)
{
	tu_section("2,000 blocks of 33-600 pages over 64 live, freed in a random order: bytes "
		   "kept, every run's pages counted; malloc_trim leaves no run");
	enum { LIVE = 64, TURNS = 2000 };
	char *live[LIVE] = {0};
	size_t size[LIVE] = {0};
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	int bad = 0;
	for (int s = 0; s < TURNS; s++) {
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		unsigned i = (unsigned)(seed % LIVE);
		if (live[i]) {
			bad += live[i][0] != (char)i || live[i][size[i] - 1] != (char)i;
			FREE(live[i]);
		}
		size[i] = (33 + (seed >> 20) % 568) * PAGE - (seed >> 40) % PAGE;
		live[i] = MALLOC(size[i]);
		live[i][0] = live[i][size[i] - 1] = (char)i;
	}
	CHECKF(bad == 0, "%d blocks lost their bytes", bad);
	struct uslub_node *n = zone_of(live[0]);
	CHECKF(n->ext_hits > TURNS / 2, "%lu of %d blocks cut from runs",
	       (unsigned long)n->ext_hits, TURNS);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	for (unsigned i = 0; i < LIVE; i++)
		FREE(live[i]);
	CHECK(n->ext_pages > 0);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	MALLOC_TRIM(0);
	CHECKF(n->ext_pages == 0, "after malloc_trim: %lu pages in runs",
	       (unsigned long)n->ext_pages);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	(void)argc;
	FREE(MALLOC(1));
	merge_and_cut();
	random_frees();
	return tu_summary("test_extents");
}
