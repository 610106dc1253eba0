/* The soak run: threads mixing every kind of allocation for a given time, then the whole
 * heap accounted for.
 *
 *   test_soak [SECONDS [THREADS]]      (default 60 s, 4 threads; the suite runs 10 s)
 *
 * Each worker keeps SLOTS blocks. Every block carries its size and a key in its first 16
 * bytes and a pattern after them, so whoever holds it - the thread that made it, or one
 * it was handed to through the shared mailbox - checks it before freeing or resizing it.
 * Operations: malloc, calloc (checked zero), realloc (contents kept), posix_memalign,
 * aligned_alloc, free, hand-off to another thread, malloc_trim. Sizes: mostly small,
 * some large (to 256 KiB), a few huge (own mapping). Workers live a random 0.2-2 s and
 * hand their blocks on when they exit, so thread states are built and torn down all the
 * time and memory allocated by dead threads is freed by live ones.
 *
 * The main thread samples resident memory (/proc/self/smaps_rollup, tu_rss_bytes) every 20 ms. At
 * the end, with every block freed, the heap walker (core/debug/check.c) must find every page in
 * exactly one place, every counter right and no object left live; peak resident memory must stay
 * within a bound of the peak live bytes. Linked (uslub_ names) for the walker. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdatomic.h>

#include "test_util.h"

#include "debug/check.h"
#include "thread/thread.h"

#define SLOTS	1024
#define MAILBOX 256
#define HDR	16

struct block_hdr {
	uint64_t size, key;
};

static _Atomic(unsigned char *) mailbox[MAILBOX];
static _Atomic uint64_t live_bytes, peak_live, total_ops, bad_blocks, next_key = 1;
static _Atomic int stop;
static double deadline;

static void note_live(int64_t delta)
{
	uint64_t now = atomic_fetch_add(&live_bytes, (uint64_t)delta) + (uint64_t)delta;
	uint64_t peak = atomic_load(&peak_live);
	while (now > peak && !atomic_compare_exchange_weak(&peak_live, &peak, now))
		;
}

/* Pattern bytes after the header: all of a block up to 64 KiB, else its first and last
 * 4 KiB (a large block's middle pages are left untouched, like many programs'). */
static void fill(unsigned char *p, size_t size, uint64_t key)
{
	struct block_hdr h = {size, key};
	memcpy(p, &h, sizeof(h));
	if (size <= 65536) {
		tu_fill(p, HDR, size, key);
	} else {
		tu_fill(p, HDR, 4096, key);
		tu_fill(p, size - 4096, size, key);
	}
}

/* Bytes [from, to) hold the key's pattern. */
static int range_ok(const unsigned char *p, size_t from, size_t to, uint64_t key)
{
	size_t i = from;
	for (; i < to && (i % 8); i++)
		if (p[i] != tu_pattern_byte(key, i))
			return 0;
	for (; i + 8 <= to; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		if (w != tu_pattern_word(key, i / 8))
			return 0;
	}
	for (; i < to; i++)
		if (p[i] != tu_pattern_byte(key, i))
			return 0;
	return 1;
}

/* The first `n` bytes of a block of `size` made with `key` are as fill() left them. */
static int intact(const unsigned char *p, size_t n, size_t size, uint64_t key)
{
	struct block_hdr h;
	memcpy(&h, p, sizeof(h));
	if (h.size != size || h.key != key)
		return 0;
	if (size <= 65536)
		return range_ok(p, HDR, n, key);
	return range_ok(p, HDR, n < 4096 ? n : 4096, key) &&
	       (n < size || range_ok(p, size - 4096, size, key));
}

/* A whole block checked against its own header. */
static int check_block(const unsigned char *p)
{
	struct block_hdr h;
	memcpy(&h, p, sizeof(h));
	if (h.size < HDR || h.size > (64u << 20))
		return 0;
	return intact(p, h.size, h.size, h.key);
}

static void release(unsigned char *p)
{
	if (!check_block(p)) {
		if (atomic_fetch_add(&bad_blocks, 1) < 10)
			fprintf(stderr, "FAIL block %p: pattern damaged\n", (void *)p);
	}
	struct block_hdr h;
	memcpy(&h, p, sizeof(h));
	note_live(-(int64_t)h.size);
	uslub_free(p);
}

static size_t pick_size(uint64_t r)
{
	unsigned k = (unsigned)(r % 1000);
	r >>= 10;
	if (k == 0 && (r & 3) == 0)
		return (4u << 20) + r % (4u << 20); /* huge */
	if (k < 40)
		return 8192 + r % (256u << 10); /* large */
	if (k < 250)
		return HDR + r % 4096;
	return HDR + r % 240;
}

static void *worker(void *arg)
{
	uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
	unsigned char *slot[SLOTS] = {0};
	double end = tu_now() + 0.2 + (double)(tu_rand(&rng) % 1800) / 1000.0;
	uint64_t ops = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if ((ops & 255) == 0 && tu_now() > end)
			break;
		ops++;
		uint64_t r = tu_rand(&rng);
		unsigned k = (unsigned)(r % SLOTS);
		r >>= 10;
		unsigned op = (unsigned)(r % 100);
		r >>= 7;
		unsigned char *p = slot[k];
		if (p && op < 45) {
			release(p);
			slot[k] = NULL;
		} else if (p && op < 60) {
			struct block_hdr h;
			memcpy(&h, p, sizeof(h));
			size_t size = pick_size(tu_rand(&rng));
			if (!check_block(p))
				atomic_fetch_add(&bad_blocks, 1);
			unsigned char *q = uslub_realloc(p, size);
			if (!q)
				continue; /* the old block stays */
			/* The kept part is the old block's: check its pattern, then refill. */
			if (!intact(q, h.size < size ? h.size : size, h.size, h.key))
				atomic_fetch_add(&bad_blocks, 1);
			note_live((int64_t)size - (int64_t)h.size);
			fill(q, size, atomic_fetch_add(&next_key, 1));
			slot[k] = q;
		} else if (p && op < 70) {
			/* Hand off: whatever was in the mailbox comes back in exchange. */
			unsigned m = (unsigned)(r % MAILBOX);
			slot[k] = atomic_exchange(&mailbox[m], p);
			if (slot[k] && !check_block(slot[k]))
				atomic_fetch_add(&bad_blocks, 1);
		} else if (p && op == 70 && (r & 63) == 0) {
			uslub_malloc_trim((r >> 6) & 1 ? 0 : 1 << 20);
		} else if (!p) {
			size_t size = pick_size(r);
			uint64_t key = atomic_fetch_add(&next_key, 1);
			unsigned char *q = NULL;
			switch (op % 5) {
			case 0:
			case 1:
				q = uslub_malloc(size);
				break;
			case 2:
				q = uslub_calloc(1, size);
				if (q)
					for (size_t i = 0; i < size && i < 8192; i += 61)
						if (q[i])
							atomic_fetch_add(&bad_blocks, 1);
				break;
			case 3:
				if (uslub_posix_memalign((void **)&q, (size_t)16 << (r % 9), size))
					q = NULL;
				break;
			default:
				q = uslub_aligned_alloc((size_t)64 << (r % 6), size);
				break;
			}
			if (!q) {
				fprintf(stderr, "FAIL allocation of %zu bytes failed\n", size);
				atomic_fetch_add(&bad_blocks, 1);
				continue;
			}
			note_live((int64_t)size);
			fill(q, size, key);
			slot[k] = q;
		}
	}
	/* Exit: hand every block on, so live threads free what this one allocated. */
	for (unsigned k = 0; k < SLOTS; k++) {
		if (!slot[k])
			continue;
		unsigned char *back = atomic_exchange(&mailbox[k % MAILBOX], slot[k]);
		if (back)
			release(back);
	}
	atomic_fetch_add(&total_ops, ops);
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 60;
	unsigned nthreads = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
	if (nthreads < 1 || nthreads > 64)
		nthreads = 4;
	tu_clean_env(argv);
	printf("test_soak: %.0f s, %u threads at a time\n", seconds, nthreads);
	fflush(stdout);

	uslub_free(uslub_malloc(1)); /* start-up, so the first sample sees the allocator */
	size_t rss_start = tu_rss_bytes(), rss_peak = rss_start;
	pthread_t th[64];
	unsigned long started = 0;
	uint64_t seq = 0;
	deadline = tu_now() + seconds;
	for (unsigned i = 0; i < nthreads; i++, started++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)++seq);
	while (tu_now() < deadline) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
		size_t rss = tu_rss_bytes();
		if (rss > rss_peak)
			rss_peak = rss;
		/* Replace the workers that finished. */
		for (unsigned i = 0; i < nthreads; i++) {
			if (pthread_tryjoin_np(th[i], NULL) == 0) {
				pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)++seq);
				started++;
			}
		}
	}
	atomic_store(&stop, 1);
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	for (unsigned m = 0; m < MAILBOX; m++) {
		unsigned char *p = atomic_exchange(&mailbox[m], NULL);
		if (p)
			release(p);
	}
	size_t rss_before_trim = tu_rss_bytes();
	/* Once before the trim too: then the thread caches hold pages. */
	struct uslub_check c0;
	uint64_t errors0 = uslub_check_heap(&c0, 2);
	uslub_malloc_trim(0);
	size_t rss_end = tu_rss_bytes();

	tu_section("%lu operations in %lu threads, every block checked before it was freed",
		   (unsigned long)atomic_load(&total_ops), started);
	CHECK_EQ(atomic_load(&bad_blocks), 0);
	CHECK_EQ(atomic_load(&live_bytes), 0);
	CHECK(atomic_load(&total_ops) > 0);

	tu_section("every page in exactly one place, every counter right, nothing live");
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	uslub_check_print(&c, 1);
	CHECK_EQ(errors0, 0);
	CHECK_EQ(c0.live_objects, 0);
	CHECK_EQ(errors, 0);
	CHECK_EQ(c.live_objects, 0);
	CHECK_EQ(c.large_blocks, 0);
	CHECK_EQ(c.huge_bytes, 0);

	/* Resident memory: the program's own peak plus room for what the allocator keeps
	 * (partial slabs, thread caches, warm free memory up to the trim threshold, the
	 * descriptors) and for the threads' stacks. */
	uint64_t peak = atomic_load(&peak_live);
	size_t bound = rss_start + 2 * peak + (96u << 20);
	tu_section("resident memory: start %zu KiB, peak %zu KiB (bound %zu KiB; peak live "
		   "%lu KiB), end %zu KiB (%zu KiB before malloc_trim)",
		   rss_start >> 10, rss_peak >> 10, bound >> 10, (unsigned long)(peak >> 10),
		   rss_end >> 10, rss_before_trim >> 10);
	CHECKF(rss_peak <= bound, "peak %zu KiB over %zu KiB", rss_peak >> 10, bound >> 10);
	CHECKF(rss_end <= rss_start + (64u << 20), "end %zu KiB, start %zu KiB", rss_end >> 10,
	       rss_start >> 10);
	return tu_summary("test_soak");
}
