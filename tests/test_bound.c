/* test_bound.c: free memory follows the live set at once, and never memory in use.
 *
 * Issue 13's mixed workload, shortened: two threads each keep LIVE blocks and replace a
 * random one by malloc, free or realloc for CHURN_S seconds, sizes log-uniform over
 * 1 B - 8 MiB (slab objects, large blocks and huge mappings alike). Every block carries a
 * pattern - all of it up to FULL_FILL bytes, a word a page above - checked before it is
 * freed or reallocated and, for the blocks still live, at the end: a page in use handed
 * back to the OS would read as zero.
 *
 * Then everything is freed. With the decay period set to an hour (tests/meson.build), only
 * the bound on free memory kept (core/page/bound.c) can give the memory back, and it
 * must have done so by the time the last free returns: resident memory at most SLACK MiB
 * over what it was before the churn, free memory kept within the bound's floor, and
 * (linked build) the buddy lists and the heap walker in agreement.
 *
 * Then waves: WAVES times, WAVE_BLOCKS blocks of 64 KiB are allocated, a word of each
 * page written, checked and all freed - a batch at a time, from almost nothing in use.
 * The live set collapses at the end of each wave; from the second collapse within the
 * decay period on, the bound must keep the wave (bound.c): the waves after the first
 * hand nothing back, where each wave used to hand back all but the floor and fault its
 * pages in again.
 *
 * Built linked (uslub_ names, heap walker) and plain (under LD_PRELOAD). */
#include "test_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#ifdef USLUB_PREFIXED
#include "debug/check.h"
#include "thread/thread.h"
#include "replenish/replenish.h"
#endif

#define THREADS	  2
#define LIVE	  128
#define CHURN_S	  1.5
#define FULL_FILL (64 << 10)
/* MiB resident over the start once everything is freed: the bound's floor (16 MiB, half
 * of M_TRIM_THRESHOLD), empty slabs the caches keep, and the thread stacks' pages. */
#define SLACK	    28
#define WAVES	    4
#define WAVE_BLOCKS 1024 /* of 64 KiB: 64 MiB a wave */
#define WAVE_BLOCK  (64 << 10)

struct block {
	unsigned char *p;
	size_t size;
	uint64_t key;
};

static _Atomic unsigned long bad_blocks;
static double churn_end;

static size_t rand_size(uint64_t *s)
{
	unsigned bits = (unsigned)(tu_rand(s) % 23); /* 2^0 .. 2^22 */
	size_t lo = (size_t)1 << bits;
	return lo + (size_t)(tu_rand(s) % lo) + 1;
}

/* The whole block when small; the first word of every page (and the last bytes) when
 * large, so a multi-MiB block costs a touch a page rather than a memset. */
static void fill(const struct block *b)
{
	if (b->size <= FULL_FILL) {
		tu_fill(b->p, 0, b->size, b->key);
		return;
	}
	for (size_t i = 0; i + 8 <= b->size; i += 4096)
		tu_fill(b->p, i, i + 8, b->key);
	tu_fill(b->p, b->size - 8, b->size, b->key);
}

/* Bytes [0, n) of the block checked against its pattern, as fill wrote it. */
static int intact(const struct block *b, size_t n)
{
	if (b->size <= FULL_FILL)
		return tu_verify(b->p, n, b->key) == (size_t)-1;
	for (size_t i = 0; i + 8 <= n; i += 4096)
		for (size_t k = i; k < i + 8; k++)
			if (b->p[k] != tu_pattern_byte(b->key, k))
				return 0;
	return 1;
}

static void check_block(const struct block *b)
{
	if (b->p && !intact(b, b->size))
		bad_blocks++;
}

static void *churn(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1, serial = (uintptr_t)arg << 40;
	static struct block all[THREADS][LIVE];
	struct block *live = all[(uintptr_t)arg];
	/* Every slot filled first: a live set still building up could fall back under the
	 * collapse line when its first large block went, and that collapse made the one after
	 * the churn a second, a wave (bound.c), which may keep the waves' height: one run in
	 * twenty under load kept 30 MiB and failed the floor's check below. */
	for (unsigned i = 0; i < LIVE; i++) {
		struct block *b = &live[i];
		b->size = rand_size(&s);
		b->p = MALLOC(b->size);
		CHECK(b->p != NULL);
		b->key = serial++;
		if (b->p)
			fill(b);
	}
	for (unsigned long op = 0; (op & 63) || tu_now() < churn_end; op++) {
		struct block *b = &live[tu_rand(&s) % LIVE];
		check_block(b);
		unsigned what = (unsigned)(tu_rand(&s) % 3);
		if (what == 0 && b->p) {
			FREE(b->p);
			b->p = NULL;
			continue;
		}
		size_t size = rand_size(&s);
		if (what == 1 && b->p) {
			unsigned char *q = REALLOC(b->p, size);
			CHECK(q != NULL);
			if (!q)
				continue;
			/* What realloc kept must have come along; the pattern is by offset,
			 * so the old key still holds over the kept bytes. */
			struct block moved = {q, b->size, b->key};
			if (!intact(&moved, size < b->size ? size : b->size))
				bad_blocks++;
			b->p = q;
		} else {
			if (b->p)
				FREE(b->p);
			b->p = MALLOC(size);
			CHECK(b->p != NULL);
			if (!b->p)
				continue;
		}
		b->size = size;
		b->key = serial++;
		fill(b);
	}
	for (unsigned i = 0; i < LIVE; i++)
		check_block(&live[i]);
	for (unsigned i = 0; i < LIVE; i++) {
		FREE(live[i].p);
		live[i].p = NULL;
	}
	return NULL;
}

/* One wave: allocated, every page written, checked, freed. Blocks that lost a page's word
 * are counted in bad_blocks. */
static void wave(unsigned char **blocks, uint64_t key)
{
	for (unsigned i = 0; i < WAVE_BLOCKS; i++) {
		blocks[i] = MALLOC(WAVE_BLOCK);
		CHECK(blocks[i] != NULL);
		if (blocks[i])
			for (size_t o = 0; o < WAVE_BLOCK; o += 4096)
				blocks[i][o] = (unsigned char)(key + i + o / 4096);
	}
	for (unsigned i = 0; i < WAVE_BLOCKS; i++) {
		if (!blocks[i])
			continue;
		for (size_t o = 0; o < WAVE_BLOCK; o += 4096)
			if (blocks[i][o] != (unsigned char)(key + i + o / 4096)) {
				bad_blocks++;
				break;
			}
		FREE(blocks[i]);
	}
}

/* Waves from a collapsed live set: what each hands back to the OS, by the totals. */
static void waves(tu_get_totals_fn totals)
{
	static unsigned char *blocks[WAVE_BLOCKS];
	uint64_t back[WAVES];
	struct uslub_totals t0, t1;
	for (unsigned w = 0; w < WAVES; w++) {
		totals(&t0);
		wave(blocks, w * 7);
		totals(&t1);
		back[w] = t1.returned - t0.returned;
	}
	CHECKF(bad_blocks == 0, "%lu wave blocks lost a page's word", (unsigned long)bad_blocks);
	/* The first wave's collapse is the second in the period (the churn's was the first):
	 * from the second wave on, nothing of a wave goes back (before: 48 MiB a wave). */
	for (unsigned w = 1; w < WAVES; w++)
		CHECKF(back[w] <= (4UL << 20), "wave %u handed back %" PRIu64 " KiB", w + 1,
		       back[w] >> 10);
	CHECKF(t1.warm_free >= (WAVE_BLOCKS * (uint64_t)WAVE_BLOCK) / 2,
	       "the wave is kept warm: %" PRIu64 " KiB warm free", t1.warm_free >> 10);
	printf("waves: handed back %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 " KiB; %" PRIu64
	       " KiB warm free after the last\n",
	       back[0] >> 10, back[1] >> 10, back[2] >> 10, back[3] >> 10, t1.warm_free >> 10);
}

int main(int argc, char **argv)
{
	/* "rss": check resident memory too (not in sanitizer builds, tests/meson.build). */
	bool check_rss = argc > 1 && strcmp(argv[1], "rss") == 0;
	tu_clean_env(argv);
	tu_get_totals_fn totals = tu_totals_fn();
	CHECK(totals != NULL);
	if (!totals)
		return tu_summary("test_bound");
	size_t start = tu_rss_bytes();
	struct uslub_totals before, after;
	totals(&before);
	churn_end = tu_now() + CHURN_S;
	pthread_t t[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, churn, (void *)i) == 0);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	size_t freed = tu_rss_bytes();
	totals(&after);
	CHECKF(bad_blocks == 0, "%lu blocks in use lost their contents", (unsigned long)bad_blocks);
	CHECKF(after.peak_in_use > before.in_use + (64UL << 20),
	       "the churn had a live set to lose: peak in use %" PRIu64 " MiB",
	       after.peak_in_use >> 20);
	CHECKF(after.returned > before.returned, "memory went back to the OS");
	/* Within the floor, whatever the decay (an hour here) would have kept. */
	CHECKF(after.warm_free <= (16UL << 20), "free memory kept: %" PRIu64 " KiB",
	       after.warm_free >> 10);
	if (check_rss)
		CHECKF(freed <= start + ((size_t)SLACK << 20),
		       "resident %zu MiB after everything was freed (%zu at the start)",
		       freed >> 20, start >> 20);
	else
		printf("  resident memory not checked (a sanitizer build): %zu MiB after "
		       "everything was freed, %zu at the start\n",
		       freed >> 20, start >> 20);
	waves(totals);
#ifdef USLUB_PREFIXED
	uslub_replenish_stop();
	for (unsigned z = 0; z < uslub_nr_nodes; z++) {
		CHECKF(uslub_pages_check(z) == 0, "slab zone %u lists", z);
		CHECKF(uslub_pages_check(LARGE_ZONE(z)) == 0, "large zone %u lists", z);
	}
	struct uslub_check census;
	CHECKF(uslub_check_heap(&census, 2) == 0, "heap walker");
#endif
	printf("bound (%s): peak in use %" PRIu64 " MiB, peak mapped %" PRIu64
	       " MiB; resident %zu MiB at the start, %zu after everything was freed; %" PRIu64
	       " MiB handed back\n",
	       VARIANT, after.peak_in_use >> 20, after.peak_mapped >> 20, start >> 20, freed >> 20,
	       (after.returned - before.returned) >> 20);
	return tu_summary("test_bound");
}
