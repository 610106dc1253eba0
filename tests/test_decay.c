/* test_decay.c: free memory goes back to the OS by the clock, and never memory in use.
 *
 * Run with a short decay period (USLUB_DECAY_MS=1000, tests/meson.build) so it takes
 * seconds; the default thread setting (USLUB_BACKGROUND=auto) is what is tested.
 *
 * spike: 1024 live blocks, then 256 MiB of small blocks (16-512 bytes) allocated, touched
 *   and freed, then light traffic - one malloc/free pair a millisecond, all of it served
 *   without reaching the page allocator. Resident memory must come down to the live set
 *   plus M_TRIM_THRESHOLD (32 MiB) and some slack within SPIKE_LIGHT_S, and then, the
 *   program idle, to the live set plus IDLE_SLACK within SPIKE_IDLE_S: only the clock can
 *   do that, as nothing else calls into the allocator.
 * waves: 1024 blocks of 64 KiB allocated, written and freed, four times in a row from
 *   almost nothing in use: the bound keeps such waves warm (bound.c), and the decay must
 *   still give the last one back once the waves stop, within the same times as the spike.
 * in use: rounds of small and large blocks, each filled with its own pattern, every other
 *   one freed, across several decay periods; then every block still allocated must hold
 *   its pattern, memory must have gone back, and (linked build) the buddy lists and the
 *   heap walker must agree with each other.
 *
 * Built linked (uslub_ names, heap walker) and plain (under LD_PRELOAD). */
#include "test_util.h"

#include <sys/mman.h>

#ifdef USLUB_PREFIXED
#include "debug/check.h"
#include "thread/thread.h"
#include "replenish/replenish.h"
#endif

#define SPIKE_BYTES   ((size_t)256 << 20)
#define SPIKE_LIGHT_S 4	 /* seconds to come down with light traffic */
#define SPIKE_IDLE_S  6	 /* ... and to the live set once idle */
#define LIGHT_SLACK   48 /* MiB over the live set: 32 kept (M_TRIM_THRESHOLD), slabs */
#define IDLE_SLACK    16 /* MiB over the live set: empty slabs the caches keep */
#define LIVE	      1024

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static long process_rss_kib(void)
{
	return (long)(tu_rss_bytes() >> 10);
}

/* Resident memory - except under AddressSanitizer, where it counts the shadow of every
 * byte the spike touched stays resident, which no allocator can change: there the test bounds what
 * uslub itself keeps warm (free pages not handed back) on top of the resident figure at
 * the first look. */
static long rss_kib(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	static long base;
	struct uslub_totals t;
	tu_totals_fn()(&t);
	if (!base)
		base = process_rss_kib();
	return base + (long)(t.warm_free >> 10);
#else
	return process_rss_kib();
#endif
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* One malloc/free pair a millisecond until resident memory is at most `bound` KiB or
 * `limit` seconds have passed (light = 0: sleep only). Seconds it took, or -1. */
static double wait_below(long bound, double limit, int light)
{
	double start = now_s();
	for (unsigned ms = 0;; ms++) {
		/* Light traffic goes on for half a second at least, as a program's would:
		 * the thread starts at an allocation slow path after the frees (a program
		 * that never allocates again keeps its memory until it does). */
		if (ms % 50 == 0) {
			if (rss_kib() <= bound && (!light || ms >= 500))
				return now_s() - start;
			if (now_s() - start > limit)
				return -1;
		}
		if (light) {
			size_t size = 16 + next_rand() % 497;
			char *p = MALLOC(size);
			CHECK(p != NULL);
			p[0] = 1;
			FREE(p);
		}
		sleep_ms(1);
	}
}

static void spike(void)
{
	static char *live[LIVE];
	for (unsigned i = 0; i < LIVE; i++) {
		size_t size = 16 + next_rand() % 497;
		live[i] = MALLOC(size);
		CHECK(live[i] != NULL);
		memset(live[i], 0x5a, size);
	}
	long live_kib = rss_kib();
	size_t cap = SPIKE_BYTES / 16, n = 0, bytes = 0;
	char **objs = mmap(NULL, cap * sizeof(char *), PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(objs != MAP_FAILED);
	while (bytes < SPIKE_BYTES) {
		size_t size = 16 + next_rand() % 497;
		objs[n] = MALLOC(size);
		CHECK(objs[n] != NULL);
		memset(objs[n], 1, size);
		bytes += size;
		n++;
	}
	long peak_kib = rss_kib();
	for (size_t i = 0; i < n; i++)
		FREE(objs[i]);
	munmap(objs, cap * sizeof(char *));
	long freed_kib = rss_kib();

	double light = wait_below(live_kib + LIGHT_SLACK * 1024, SPIKE_LIGHT_S, 1);
	long light_kib = rss_kib();
	CHECKF(light >= 0,
	       "light traffic: resident %ld KiB after %d s (live %ld, peak %ld, just freed %ld)",
	       light_kib, SPIKE_LIGHT_S, live_kib, peak_kib, freed_kib);
	double idle = wait_below(live_kib + IDLE_SLACK * 1024, SPIKE_IDLE_S, 0);
	long idle_kib = rss_kib();
	CHECKF(idle >= 0, "idle: resident %ld KiB after %d s more (live %ld)", idle_kib,
	       SPIKE_IDLE_S, live_kib);
	printf("spike (%s): live %ld KiB, peak %ld, freed %ld; with light traffic %ld after "
	       "%.2f s, idle %ld after %.2f s more\n",
	       VARIANT, live_kib, peak_kib, freed_kib, light_kib, light, idle_kib, idle);
	for (unsigned i = 0; i < LIVE; i++)
		FREE(live[i]);
}

#define WAVES	    4
#define WAVE_BLOCKS 1024
#define WAVE_BLOCK  (64 << 10)

static void waves(void)
{
	static char *blocks[WAVE_BLOCKS];
	long live_kib = rss_kib();
	uint64_t kept = 0;
	for (unsigned w = 0; w < WAVES; w++) {
		for (unsigned i = 0; i < WAVE_BLOCKS; i++) {
			blocks[i] = MALLOC(WAVE_BLOCK);
			CHECK(blocks[i] != NULL);
			if (blocks[i])
				memset(blocks[i], (int)w + 1, WAVE_BLOCK);
		}
		for (unsigned i = 0; i < WAVE_BLOCKS; i++)
			FREE(blocks[i]);
		struct uslub_totals t;
		tu_totals_fn()(&t);
		kept = t.warm_free;
	}
	/* The last wave was kept (what the bound alone would have left is 16 MiB)... */
	CHECKF(kept >= (WAVE_BLOCKS * (uint64_t)WAVE_BLOCK) / 2,
	       "the waves are kept warm: %" PRIu64 " KiB warm free", kept >> 10);
	/* ... and goes back by the clock once they stop, as a spike does. */
	double light = wait_below(live_kib + LIGHT_SLACK * 1024, SPIKE_LIGHT_S, 1);
	CHECKF(light >= 0, "waves, light traffic: resident %ld KiB after %d s (live %ld)",
	       rss_kib(), SPIKE_LIGHT_S, live_kib);
	double idle = wait_below(live_kib + IDLE_SLACK * 1024, SPIKE_IDLE_S, 0);
	CHECKF(idle >= 0, "waves, idle: resident %ld KiB after %d s more (live %ld)", rss_kib(),
	       SPIKE_IDLE_S, live_kib);
	printf("waves (%s): %" PRIu64 " KiB kept warm after the last; back to live + %d MiB "
	       "in %.2f s with light traffic, to live + %d MiB %.2f s later\n",
	       VARIANT, kept >> 10, LIGHT_SLACK, light, IDLE_SLACK, idle);
}

/* Blocks of the in-use test: sizes drawn small (16 B - 4 KiB) and large (16 KiB - 1 MiB),
 * filled with a byte derived from the index. */
#define ROUNDS 12
#define BLOCKS 4096

static unsigned char fill_of(size_t i)
{
	return (unsigned char)(i * 131 + 7);
}

static int intact(const unsigned char *p, size_t size, unsigned char c)
{
	for (size_t k = 0; k < size; k++)
		if (p[k] != c)
			return 0;
	return 1;
}

static void in_use(void)
{
	static unsigned char *blk[ROUNDS * BLOCKS];
	static size_t sz[ROUNDS * BLOCKS];
	struct uslub_totals before, after;
	tu_get_totals_fn totals = tu_totals_fn();
	CHECK(totals != NULL);
	if (!totals)
		return;
	totals(&before);
	for (unsigned r = 0; r < ROUNDS; r++) {
		for (unsigned b = 0; b < BLOCKS; b++) {
			size_t i = (size_t)r * BLOCKS + b;
			sz[i] = b % 64 == 0 ? (16 << 10) + next_rand() % (1 << 20)
					    : 16 + next_rand() % 4081;
			blk[i] = MALLOC(sz[i]);
			CHECK(blk[i] != NULL);
			memset(blk[i], fill_of(i), sz[i]);
		}
		/* Every other block of the previous round goes: free memory of every age,
		 * between blocks in use. */
		if (r > 0)
			for (unsigned b = 0; b < BLOCKS; b += 2) {
				size_t i = (size_t)(r - 1) * BLOCKS + b;
				FREE(blk[i]);
				blk[i] = NULL;
			}
		sleep_ms(150);
	}
	sleep_ms(2500); /* past two decay periods: everything free is old now */
	/* A slow path after the wait (and the thread, if started, on its own) */
	for (unsigned k = 0; k < 64; k++)
		FREE(MALLOC((size_t)64 << 10));
	sleep_ms(300);
	totals(&after);
	CHECKF(after.returned > before.returned, "decay handed memory back: %" PRIu64 " bytes",
	       after.returned - before.returned);
	unsigned long bad = 0;
	for (size_t i = 0; i < (size_t)ROUNDS * BLOCKS; i++)
		if (blk[i] && !intact(blk[i], sz[i], fill_of(i)))
			bad++;
	CHECKF(bad == 0, "%lu blocks in use lost their contents", bad);
#ifdef USLUB_PREFIXED
	/* The walker needs a quiet heap: the thread may be between taking blocks off the
	 * lists and putting them back handed back. */
	uslub_replenish_stop();
	for (unsigned z = 0; z < uslub_nr_nodes; z++) {
		CHECKF(uslub_pages_check(z) == 0, "slab zone %u lists", z);
		CHECKF(uslub_pages_check(LARGE_ZONE(z)) == 0, "large zone %u lists", z);
	}
	struct uslub_check census;
	CHECKF(uslub_check_heap(&census, 2) == 0, "heap walker");
	CHECKF(census.released_pages > 0, "the walker finds pages handed back");
#endif
	for (size_t i = 0; i < (size_t)ROUNDS * BLOCKS; i++)
		FREE(blk[i]);
	printf("in use (%s): %" PRIu64 " MiB handed back, every block intact\n", VARIANT,
	       (after.returned - before.returned) >> 20);
}

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	spike();
	waves();
	in_use();
	return tu_summary("test_decay");
}
