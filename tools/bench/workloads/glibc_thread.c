/* glibc_thread: the pattern of glibc's own thread benchmark (benchtests/bench-malloc-
 * thread), written here: each thread keeps a working set of 1024 blocks and replaces a
 * random one per step with a block of a new size, sizes 4 B .. 32 KiB drawn with density
 * proportional to 1/size^2 (mostly small, a long tail up to large). Frees come in an order
 * unrelated to allocation, the case a per-thread slab does not hold.
 *
 * THREADS threads (1 or 2, set at build time: glibc_thread1, glibc_thread2), each with its
 * own working set; every block is checked before it is freed. A thread counts in locals
 * and writes its totals once at the end, as glibc's benchmark does: the totals of both
 * threads share a cache line, and a store there every step made two threads take 1.9x
 * one thread's time under tcmalloc and 1.4x under mimalloc (glibc, slower per step,
 * hid it: 1.0x), which measured the line's transfers rather than the allocators.
 *
 * Usage: glibc_thread1|glibc_thread2 [SCALE]   (steps per thread scale) */
#include <math.h>

#include "workload.h"

#ifndef THREADS
#define THREADS 1
#endif

enum { WORKING_SET = 1024, STEPS = 12000000, MIN_SIZE = 4, MAX_SIZE = 32768 };

struct worker {
	unsigned id;
	uint64_t steps, bytes;
};

static uint64_t steps;

/* Inverse of the CDF of density c / s^2 on [MIN_SIZE, MAX_SIZE]. */
static size_t inverse_square(uint64_t *rng)
{
	double u = (double)(wl_rand(rng) >> 11) / (double)(1ULL << 53);
	double a = 1.0 / MIN_SIZE, b = 1.0 / MAX_SIZE;
	size_t s = (size_t)(1.0 / (a - u * (a - b)));
	return s < MIN_SIZE ? MIN_SIZE : s > MAX_SIZE ? MAX_SIZE : s;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = wl_seed(100 + w->id), serial = 0, bytes = 0;
	static __thread void *block[WORKING_SET];
	static __thread size_t size[WORKING_SET];
	static __thread uint64_t key[WORKING_SET];
	for (unsigned i = 0; i < WORKING_SET; i++) {
		size[i] = inverse_square(&rng);
		key[i] = serial++;
		block[i] = wl_malloc(size[i]);
		wl_fill(block[i], size[i], key[i]);
	}
	for (uint64_t n = 0; n < steps; n++) {
		unsigned i = (unsigned)(wl_rand(&rng) % WORKING_SET);
		wl_check(block[i], size[i], key[i]);
		free(block[i]);
		size[i] = inverse_square(&rng);
		key[i] = serial++;
		block[i] = wl_malloc(size[i]);
		wl_fill(block[i], size[i], key[i]);
		bytes += size[i];
	}
	for (unsigned i = 0; i < WORKING_SET; i++) {
		wl_check(block[i], size[i], key[i]);
		free(block[i]);
	}
	w->steps = steps;
	w->bytes = bytes;
	return NULL;
}

int main(int argc, char **argv)
{
	steps = wl_scaled(STEPS, wl_scale(argc, argv));
	struct worker w[THREADS] = {0};
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++) {
		w[i].id = i;
		t[i] = wl_spawn(work, &w[i]);
	}
	uint64_t total = 0, bytes = 0;
	for (unsigned i = 0; i < THREADS; i++) {
		wl_join(t[i]);
		total += w[i].steps;
		bytes += w[i].bytes;
	}
	return wl_done("%u threads, %" PRIu64 " replacements, %" PRIu64 " MiB allocated", THREADS,
		       total, bytes >> 20);
}
