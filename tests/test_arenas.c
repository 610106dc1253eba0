/* Arenas: a node's large-block zones, one a thread (core/page/page.h, core/page/arena.c).
 *
 * - A span cut from fresh pages of one arena is paid for by another arena's warm free
 *   memory over its keep, so the arenas together hold what one zone held (page level,
 *   on two arenas no thread uses).
 * - A block freed by another thread goes back to the zone it came from.
 * - A block of more than 1 MiB takes another arena's free pages before its own grows.
 * - Two threads replacing blocks of 128 KiB - 3 MiB at random, one in four freed by the
 *   other thread: each in its own arena, and every zone's lists and counters consistent.
 * - A node has four arenas a CPU, up to MAX_ARENAS (one on a machine of one CPU).
 * - Large blocks are counted in the thread that takes or frees them (page/usage.c): a
 *   thread's blocks under its batch are not in uslub_large_bytes yet, the heap walker
 *   finds the count right with them, and the thread's exit folds them in; a thread that
 *   frees them subtracts them from its own count.
 *
 * - An arena's zone is made by the first block cut from it, not at start-up: none of a
 *   program without large blocks, then only the thread's own.
 * - Medium blocks come from the thread's medium zone (one an arena), which takes another
 *   medium zone's free memory before it grows: a thread that builds and frees 64 MiB of
 *   64 KiB blocks, then main building as much, and no zone grows.
 *
 * With fewer CPUs the node has fewer arenas; the test asks for four before any thread
 * but main has made a large block. */
#include "debug/check.h"
#include "page/page.h"
#include "page/node.h"
#include "os/os.h"
#include "test_util.h"

#include <pthread.h>
#include <string.h>

#define MIB (1UL << 20)

static unsigned zone_of(const void *p)
{
	struct region *r = region_of(p);
	return r ? (unsigned)(r->node - uslub_nodes) : ~0u;
}

/* The calling thread's large-block zone. */
static unsigned my_zone(void)
{
	return LARGE_ARENA_ZONE(uslub_node_current(), uslub_thread_arena());
}

static uint64_t grown(unsigned z)
{
	return __atomic_load_n(&uslub_nodes[z].grown_pages, __ATOMIC_RELAXED);
}

static uint64_t warm(unsigned z)
{
	return __atomic_load_n(&uslub_nodes[z].warm_free_pages, __ATOMIC_RELAXED);
}

/* A thread that does `step` if its arena is not main's (`ran` says whether it did). */
struct job {
	void (*step)(struct job *);
	unsigned main_zone, zone;
	void *p[2];
	int ran;
};

static void *job_run(void *arg)
{
	struct job *j = arg;
	j->zone = my_zone();
	if (j->zone != j->main_zone) {
		j->ran = 1;
		j->step(j);
	}
	return NULL;
}

/* Threads are made until one gets another arena than main's (round robin: the next). */
static void on_other_arena(struct job *j)
{
	j->main_zone = my_zone();
	for (int tries = 0; tries < 2 * MAX_ARENAS && !j->ran; tries++) {
		pthread_t th;
		CHECK(pthread_create(&th, NULL, job_run, j) == 0);
		pthread_join(th, NULL);
	}
	CHECKF(j->ran, "no thread of %d got an arena other than main's", 2 * MAX_ARENAS);
}

static unsigned arenas_made(void)
{
	unsigned made = 0;
	for (unsigned a = 0; a < MAX_ARENAS; a++)
		made += zone_made(LARGE_ARENA_ZONE(0, a));
	return made;
}

/* Before main's first large block, and after it. */
static void made_lazily(void)
{
	tu_section("an arena's zone made by its first block");
	CHECKF(arenas_made() == 0, "no arena's zone made at start-up (%u)", arenas_made());
	CHECK_EQ(uslub_pages_check(LARGE_ARENA_ZONE(0, 1)), 0);
	void *p = MALLOC(3 * MIB);
	CHECK(p != NULL);
	memset(p, 1, 3 * MIB);
	CHECKF(zone_made(my_zone()) && zone_of(p) == my_zone(),
	       "main's arena made, the block in it");
	CHECKF(arenas_made() == 1, "only main's (%u made)", arenas_made());
	FREE(p);
	CHECK_EQ(uslub_pages_check(my_zone()), 0);
}

/* Arenas 2 and 3 of node 0: no thread's so far (main's is 0, a thread's the next). */
static void others_pay(void)
{
	unsigned za = LARGE_ARENA_ZONE(0, 2), zb = LARGE_ARENA_ZONE(0, 3);
	tu_section("a span of fresh pages in one arena is paid for by another's warm pages");
	/* A keep under the holes below (M_TRIM_THRESHOLD is 32 MiB by default). */
	uint64_t threshold = uslub_trim_threshold;
	uslub_trim_threshold = MIB;
	/* Memory in use (a mapping of its own, never touched), so that the bound does not
	 * take the live set for collapsed and hand the warm pages back (bound.c). */
	void *pin = MALLOC(40 * MIB);
	/* 16 MiB in zone b, written, every other 2 MiB freed: warm holes no 8 MiB fits. */
	struct page_desc *d = uslub_pages_alloc_span(zb, 4096);
	CHECKF(d != NULL, "16 MiB from arena 3");
	if (!d)
		goto out;
	memset(page_address(d), 1, 16 * MIB);
	for (int i = 0; i < 8; i += 2)
		uslub_pages_free_range(d + i * 512, 512);
	uint64_t keep = uslub_pay_keep(&uslub_nodes[zb]), before = warm(zb);
	CHECKF(before >= keep + 1024, "arena 3 keeps %ju warm pages, its keep %ju",
	       (uintmax_t)before, (uintmax_t)keep);
	CHECK(uslub_node_over(&uslub_nodes[za]) >= 1024);
	uint64_t grown_a = grown(za);
	struct page_desc *e = uslub_pages_alloc_span(za, 2048);
	CHECKF(e && grown(za) >= grown_a + 2048, "arena 2 grew for 8 MiB");
	/* The span's 2048 fresh pages: paid for by arena 3, down to its keep (the last
	 * block paid whole: a hole of 512 pages). */
	uint64_t keep_now = uslub_pay_keep(&uslub_nodes[zb]);
	CHECKF(warm(zb) <= before - 1024 && warm(zb) + 512 >= keep_now,
	       "arena 3's warm pages %ju -> %ju (keep %ju)", (uintmax_t)before, (uintmax_t)warm(zb),
	       (uintmax_t)keep_now);
	CHECKF(uslub_pages_check(za) == 0 && uslub_pages_check(zb) == 0, "both zones' lists");
	if (e)
		uslub_pages_free_range(e, 2048);
	for (int i = 1; i < 8; i += 2)
		uslub_pages_free_range(d + i * 512, 512);
	CHECKF(uslub_pages_check(za) == 0 && uslub_pages_check(zb) == 0, "both zones' lists");
out:
	FREE(pin);
	uslub_trim_threshold = threshold;
}

static void take_half_mib(struct job *j)
{
	j->p[0] = MALLOC(MIB / 2);
	memset(j->p[0], 1, MIB / 2);
}

static void goes_home(void)
{
	tu_section("a block freed by another thread goes back to the zone it came from");
	struct job j = {.step = take_half_mib};
	on_other_arena(&j);
	if (!j.ran)
		return;
	/* From the thread's arena, the slab zone (which lends a free block, buddy.c) or
	 * another arena (a free block there before the thread's grows): wherever, its pages
	 * go back there, and main's arena, if another, is untouched. */
	unsigned z = zone_of(j.p[0]);
	CHECKF(z < NR_ZONES && zone_in_use(z), "block in zone %u", z);
	if (z >= NR_ZONES)
		return;
	uint64_t free_z = uslub_nodes[z].free_pages, free_m = uslub_nodes[j.main_zone].free_pages;
	FREE(j.p[0]); /* by main */
	CHECK_EQ(uslub_nodes[z].free_pages, free_z + 128);
	if (z != j.main_zone)
		CHECK_EQ(uslub_nodes[j.main_zone].free_pages, free_m);
}

static void take_three_mib(struct job *j)
{
	uint64_t g = grown(j->zone);
	j->p[0] = MALLOC(3 * MIB);
	memset(j->p[0], 1, 3 * MIB);
	j->p[1] = (void *)(uintptr_t)(grown(j->zone) - g);
	FREE(j->p[0]);
}

static uint64_t grown_all(void)
{
	uint64_t g = 0;
	for (unsigned z = MAX_NODES; z < NR_ZONES; z++)
		if (zone_in_use(z))
			g += grown(z);
	return g;
}

static void borrows_before_growing(void)
{
	tu_section("a block of 3 MiB from another arena's free pages before its own grows");
	struct job j = {.step = take_three_mib};
	on_other_arena(&j);
	if (!j.ran)
		return;
	/* From another arena, the thread's own did not grow for it. */
	unsigned z = zone_of(j.p[0]);
	CHECKF(z == j.zone || j.p[1] == NULL, "block in zone %u, yet its arena (%u) grew %zu pages",
	       z, j.zone, (size_t)(uintptr_t)j.p[1]);
	/* The thread freed it: zone z has a free run of 3 MiB, so main's 3 MiB comes from
	 * its own arena's free pages or from another's, and no zone grows for it. */
	uint64_t before = grown_all();
	void *q = MALLOC(3 * MIB);
	CHECKF(grown_all() == before, "a zone grew %ju pages though zone %u had 3 MiB free",
	       (uintmax_t)(grown_all() - before), z);
	CHECK(zone_of(q) >= MAX_NODES && zone_of(q) < NR_ZONES);
	FREE(q);
}

#define MEDIUM_BLOCK (64UL << 10)
#define MEDIUM_COUNT 1024
static void *medium_blocks[MEDIUM_COUNT];

static void medium_build(void)
{
	for (unsigned i = 0; i < MEDIUM_COUNT; i++) {
		medium_blocks[i] = MALLOC(MEDIUM_BLOCK);
		CHECK(medium_blocks[i] != NULL);
		memset(medium_blocks[i], 1, MEDIUM_BLOCK);
	}
}

static void medium_free(void)
{
	for (unsigned i = 0; i < MEDIUM_COUNT; i++)
		FREE(medium_blocks[i]);
}

static void build_and_free(struct job *j)
{
	(void)j;
	medium_build();
	/* The thread's medium zone, or one that lent to it before it grew (arena.c). */
	unsigned z = zone_of(medium_blocks[0]);
	CHECKF(z < NR_ZONES && !zone_is_large(z), "a medium block in zone %u", z);
	medium_free();
}

static void medium_zones_lend(void)
{
	tu_section("medium blocks: another medium zone's free memory before the thread's grows");
	struct job j = {.step = build_and_free};
	on_other_arena(&j);
	if (!j.ran)
		return;
	uint64_t before = grown_all();
	medium_build();
	/* The depot takes part of it (at most 32 MiB); the zone the rest. */
	CHECKF(grown_all() - before < (8UL << 20) >> USLUB_PAGE_SHIFT,
	       "the zones grew %ju pages for 64 MiB another zone held free",
	       (uintmax_t)(grown_all() - before));
	medium_free();
	for (unsigned z = MAX_NODES; z < NR_ZONES; z++)
		if (zone_in_use(z))
			CHECK_EQ(uslub_pages_check(z), 0);
}

/* Three blocks of 200 KiB, under the batch while 32 MiB of large blocks are in use (an
 * eighth of them shared among a few threads): the thread's own count holds them. */
#define COUNTED	      3
#define COUNTED_BYTES (384UL << 10) /* a size class (large.c): its pages exactly */
static int64_t counted_delta;
static void *counted[COUNTED];

static void *count_three(void *arg)
{
	(void)arg;
	/* Its state published (a first free): before, the thread counts into the total. */
	FREE(MALLOC(16));
	for (int i = 0; i < COUNTED; i++)
		counted[i] = MALLOC(COUNTED_BYTES);
	counted_delta = atomic_load(&uslub_tls_thread->large_delta);
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	return NULL;
}

static void counted_per_thread(void)
{
	tu_section("large blocks counted in their thread's state, folded in at its exit");
	void *pin[8];
	for (int i = 0; i < 8; i++)
		pin[i] = MALLOC(4 * MIB);
	int64_t before = (int64_t)atomic_load(&uslub_large_bytes);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, count_three, NULL) == 0);
	pthread_join(th, NULL);
	CHECKF(counted_delta == (int64_t)(COUNTED * COUNTED_BYTES),
	       "the thread's own count %jd, its blocks %lu", (intmax_t)counted_delta,
	       COUNTED * COUNTED_BYTES);
	/* Folded in at the exit: nothing else made or freed a large block meanwhile. */
	CHECK_EQ((int64_t)atomic_load(&uslub_large_bytes) - before,
		 (int64_t)(COUNTED * COUNTED_BYTES));
	int64_t mine = atomic_load(&uslub_tls_thread->large_delta);
	for (int i = 0; i < COUNTED; i++)
		FREE(counted[i]); /* by main: out of main's count */
	CHECK_EQ(atomic_load(&uslub_tls_thread->large_delta),
		 mine - (int64_t)(COUNTED * COUNTED_BYTES));
	struct uslub_check chk;
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
	for (int i = 0; i < 8; i++)
		FREE(pin[i]);
	CHECK_EQ(uslub_check_heap(&chk, 2), 0);
}

/* Blocks a thread frees for the other (one in four of its own). */
#define TURNS 2000
#define LIVE  16
static void *volatile handoff[2][LIVE];

struct churn {
	int id;
	unsigned zone; /* its arena's zone */
	uint64_t seed;
};

static void *churn(void *arg)
{
	struct churn *c = arg;
	c->zone = my_zone();
	void *live[LIVE] = {0};
	for (int s = 0; s < TURNS; s++) {
		c->seed ^= c->seed << 13, c->seed ^= c->seed >> 7, c->seed ^= c->seed << 17;
		unsigned i = (unsigned)(c->seed % LIVE);
		size_t size = 128 * 1024 + (size_t)(c->seed >> 20) % (3 * MIB);
		if (live[i] && (c->seed >> 8) % 4 == 0) {
			void *p =
			    __atomic_exchange_n(&handoff[c->id][i], live[i], __ATOMIC_ACQ_REL);
			FREE(p);
		} else {
			FREE(live[i]);
		}
		void *mine = __atomic_exchange_n(&handoff[!c->id][i], NULL, __ATOMIC_ACQ_REL);
		FREE(mine);
		live[i] = MALLOC(size);
		((char *)live[i])[0] = (char)s;
		((char *)live[i])[size - 1] = (char)s;
	}
	for (unsigned i = 0; i < LIVE; i++)
		FREE(live[i]);
	return NULL;
}

static void two_threads(void)
{
	pthread_t th[2];
	struct churn c[2] = {{.id = 0, .seed = 0x9e3779b97f4a7c15ULL},
			     {.id = 1, .seed = 0x2545f4914f6cdd1dULL}};
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&th[i], NULL, churn, &c[i]) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int side = 0; side < 2; side++)
		for (unsigned i = 0; i < LIVE; i++)
			FREE(handoff[side][i]);
	CHECKF(c[0].zone != c[1].zone, "both threads in zone %u", c[0].zone);
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z))
			CHECKF(uslub_pages_check(z) == 0, "zone %u lists %d", z,
			       uslub_pages_check(z));
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	(void)argc;
	FREE(MALLOC(1)); /* start-up and this thread's state */
	/* Four arenas a CPU of a node, up to MAX_ARENAS; one where there is one CPU. */
	unsigned cpus = uslub_os_ncpus(), want = cpus > 1 ? 4 * cpus / uslub_nr_nodes : 1;
	want = want < 1 ? 1 : want > MAX_ARENAS ? MAX_ARENAS : want;
	tu_section("%u arenas a node for %u CPUs in %u nodes", want, cpus, uslub_nr_nodes);
	CHECKF(uslub_nr_arenas == want, "%u arenas", uslub_nr_arenas);
	if (uslub_nr_arenas < 4)
		uslub_pages_use(uslub_nr_nodes, 4);
	made_lazily();
	others_pay();
	goes_home();
	borrows_before_growing();
	medium_zones_lend();
	two_threads();
	counted_per_thread();
	return tu_summary("test_arenas");
}
