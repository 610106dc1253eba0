/* Free runs kept whole (core/page/extent.c): the large-block zones' front.
 *
 * - Three neighbouring blocks of 320 pages (the zone keeps blocks of more than
 *   PLACED_PAGES) freed in the order first, last, middle make one run of 960 pages
 *   headed by the first: the middle joins both.
 * - A block of 300 pages takes its size class's 320 (slab/large.c), cut from the run's
 *   start; the rest stays a run. realloc within the class leaves it as it is.
 * - realloc grows a block into the run after it, in place, and a shrink's tail joins it.
 * - A freed span (more than 4 MiB) goes to the buddy, whose search places spans.
 * - The zone's decay pass, and malloc_trim, give the buddy every run; the zone's lists
 *   and counters consistent throughout (uslub_pages_check counts the runs).
 * - Blocks of 1-4 MiB freed in a random order over a live set: every run's pages counted, and
 *   the blocks cut from them keep their bytes. */
#include "page/page.h"
#include "hooks.h"
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
	tu_section(
	    "three neighbouring blocks of 320 pages freed first, last, middle: one run of "
	    "960; a block of 300 pages takes its class's 320 from its start; realloc in and back");
	/* Sizes of the large classes (slab/large.c): the blocks take their pages exactly. */
	char *a = MALLOC(320 * PAGE), *b = MALLOC(320 * PAGE), *c = MALLOC(320 * PAGE);
	char *guard = MALLOC(320 * PAGE);
	CHECK(a && b && c && guard);
	if (b != a + 320 * PAGE || c != b + 320 * PAGE) {
		printf("  (blocks not laid end to end: %p %p %p; skipped)\n", a, b, c);
		return;
	}
	/* Written through: a block of more than 1 MiB freed unwritten goes back to the OS
	 * (decay.c, section 11) rather than into a run. */
	memset(a, 1, 960 * PAGE);
	/* The step's decay pass made (a zone's first free makes it, and it gives the buddy
	 * every run): meson sets a decay period of an hour, so no other comes. */
	struct uslub_node *n = zone_of(a);
	uslub_decay_zone(n, uslub_step_now());
	CHECKF(n >= &uslub_nodes[MAX_NODES], "a large-block zone (%td)", n - uslub_nodes);
	uint64_t pages0 = n->ext_pages, hits0 = n->ext_hits;
	FREE(a);
	FREE(c);
	CHECK(is_run(a, 320) && is_run(c, 320));
	CHECK_EQ(n->ext_pages, pages0 + 640);
	FREE(b);
	CHECKF(is_run(a, 960), "run at the first block: kind %u, %u pages", desc_of(a)->kind,
	       desc_of(a)->objects);
	CHECK(desc_of(b)->kind == PAGE_UNUSED && desc_of(c)->kind == PAGE_UNUSED);
	CHECK_EQ(n->ext_pages, pages0 + 960);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);

	/* 300 pages take their class's 320: the block is cut at the run's start. */
	char *x = MALLOC(300 * PAGE);
	CHECKF(x == a, "cut at the run's start: %p, run at %p", x, a);
	CHECK_EQ(desc_of(x)->objects, 320);
	CHECK_EQ(n->ext_hits, hits0 + 1);
	CHECK(is_run(a + 320 * PAGE, 640));
	memset(x, 7, 300 * PAGE);
	char *y = REALLOC(x, 310 * PAGE);
	CHECKF(y == x && desc_of(y)->objects == 320, "within its class in place: %p, %u pages", y,
	       desc_of(y)->objects);
	y = REALLOC(y, 640 * PAGE);
	CHECKF(y == x, "grown into the run in place: %p, was %p", y, x);
	CHECK(is_run(a + 640 * PAGE, 320));
	CHECK(y[0] == 7 && y[300 * PAGE - 1] == 7);
	y = REALLOC(y, 512 * PAGE);
	CHECKF(y == x, "shrunk in place: %p", y);
	CHECK(is_run(a + 512 * PAGE, 448));
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);

	FREE(y);
	CHECK(is_run(a, 960));
	uint32_t step = uslub_step_now() + 1;
	uslub_decay_zone(n, step);
	CHECKF(n->ext_pages == 0, "after the decay pass: %lu pages in runs",
	       (unsigned long)n->ext_pages);
	CHECK(desc_of(a)->kind == PAGE_FREE);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	FREE(guard);

	/* A span (more than 4 MiB) is no run's: the buddy's search places spans, warmest
	 * first, and a freed one goes back to it. */
	char *span = MALLOC(6UL << 20);
	memset(span, 3, 6UL << 20);
	uint64_t kept = zone_of(span)->ext_pages;
	FREE(span);
	CHECKF(zone_of(span)->ext_pages == kept && desc_of(span)->kind != PAGE_EXTENT,
	       "a freed span kept as a run");
}

static void random_frees(void)
{
	tu_section("1,000 blocks of 258-1,000 pages over 32 live, freed in a random order: bytes "
		   "kept, every run's pages counted; malloc_trim leaves no run");
	enum { LIVE = 32, TURNS = 1000 };
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
		size[i] = (258 + (seed >> 20) % 743) * PAGE - (seed >> 40) % PAGE;
		live[i] = MALLOC(size[i]);
		memset(live[i], (char)i, size[i]); /* written through, as above */
	}
	CHECKF(bad == 0, "%d blocks lost their bytes", bad);
	struct uslub_node *n = zone_of(live[0]);
	CHECKF(n->ext_hits > TURNS / 2, "%lu of %d blocks cut from runs",
	       (unsigned long)n->ext_hits, TURNS);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	/* Half of them first: with the other half live, their runs stay (once the live set
	 * has collapsed the bound may give the buddy every run, as it sheds). */
	for (unsigned i = 0; i < LIVE / 2; i++)
		FREE(live[i]);
	CHECKF(n->ext_pages > 0, "freed: %lu pages in runs, %lu hits", (unsigned long)n->ext_pages,
	       (unsigned long)n->ext_hits);
	CHECK_EQ(uslub_pages_check((unsigned)(n - uslub_nodes)), 0);
	for (unsigned i = LIVE / 2; i < LIVE; i++)
		FREE(live[i]);
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
	if (uslub_block_debug || uslub_block_pad) {
		/* A checker watches the blocks (ASan, memcheck, Z or P): they are laid out for
		 * it and go back to the buddy as they are, never into a run (large.c). */
		printf("test_extents: blocks watched by a checker keep no runs; skipped\n");
		return 0;
	}
	merge_and_cut();
	random_frees();
	return tu_summary("test_extents");
}
