/* micro: micro-benchmarks of the malloc family, through Google Benchmark (gbench_c.h).
 *
 * Linked against nothing but libc, so the one binary measures whichever allocator
 * LD_PRELOAD names. Every case reports items per second, an item being one malloc-family
 * call paired with its free, so the cases compare across allocators and sizes.
 *
 *   pair/S          malloc(S) then free, repeated: the fast paths, hot in cache
 *   batch_lifo/S    1000 mallocs of S, freed newest first
 *   batch_fifo/S    1000 mallocs of S, freed oldest first (walks the free list the
 *                   other way round, and empties slabs in allocation order)
 *   calloc/S        calloc(1, S) then free: the zeroing, and whether fresh memory
 *                   is known to be zero
 *   realloc_grow/S  one block grown by half at a time from 16 B to S, then freed; an item
 *                   is one realloc
 *   aligned/A       posix_memalign(A, 64) then free
 *   cross_thread/S  one thread allocates batches of 1000, another frees them
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gbench_c.h"

enum { BATCH = 1000 };

/* The compiler must see each pointer escape, or it may pair and drop malloc/free. */
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void bm_pair(gb_state *st)
{
	size_t size = (size_t)gb_range(st, 0);
	while (gb_keep_running(st)) {
		void *p = malloc(size);
		escape(p);
		free(p);
	}
	gb_set_items_processed(st, gb_iterations(st));
}

static void batch(gb_state *st, int lifo)
{
	size_t size = (size_t)gb_range(st, 0);
	void *p[BATCH];
	while (gb_keep_running_batch(st, BATCH)) {
		for (int i = 0; i < BATCH; i++) {
			p[i] = malloc(size);
			escape(p[i]);
		}
		if (lifo)
			for (int i = BATCH - 1; i >= 0; i--)
				free(p[i]);
		else
			for (int i = 0; i < BATCH; i++)
				free(p[i]);
	}
	gb_set_items_processed(st, gb_iterations(st));
}

static void bm_batch_lifo(gb_state *st)
{
	batch(st, 1);
}

static void bm_batch_fifo(gb_state *st)
{
	batch(st, 0);
}

static void bm_calloc(gb_state *st)
{
	size_t size = (size_t)gb_range(st, 0);
	while (gb_keep_running(st)) {
		void *p = calloc(1, size);
		escape(p);
		free(p);
	}
	gb_set_items_processed(st, gb_iterations(st));
}

static void bm_realloc_grow(gb_state *st)
{
	size_t limit = (size_t)gb_range(st, 0);
	int64_t reallocs = 0;
	while (gb_keep_running(st)) {
		void *p = NULL;
		for (size_t n = 16; n <= limit; n += n / 2) {
			p = realloc(p, n);
			escape(p);
			reallocs++;
		}
		free(p);
	}
	gb_set_items_processed(st, reallocs);
}

static void bm_aligned(gb_state *st)
{
	size_t align = (size_t)gb_range(st, 0);
	while (gb_keep_running(st)) {
		void *p;
		if (posix_memalign(&p, align, 64) != 0) {
			gb_skip_with_error(st, "posix_memalign failed");
			break;
		}
		escape(p);
		free(p);
	}
	gb_set_items_processed(st, gb_iterations(st));
}

/* cross_thread: batches pass from the allocating thread to the freeing one through two
 * slots, so one batch is being freed while the next is allocated. The waits yield: on a
 * machine with fewer free CPUs than threads, spinning would time the scheduler. The rate
 * is from wall-clock time, as the frees are done by the other thread. */
struct handoff {
	void *batch[2][BATCH];
	atomic_int full[2];
	atomic_bool stop;
};

static void *freer(void *arg)
{
	struct handoff *h = arg;
	for (unsigned k = 0;; k ^= 1) {
		while (!atomic_load_explicit(&h->full[k], memory_order_acquire)) {
			if (atomic_load_explicit(&h->stop, memory_order_acquire) &&
			    !atomic_load_explicit(&h->full[k], memory_order_acquire))
				return NULL;
			sched_yield();
		}
		for (int i = 0; i < BATCH; i++)
			free(h->batch[k][i]);
		atomic_store_explicit(&h->full[k], 0, memory_order_release);
	}
}

static void bm_cross_thread(gb_state *st)
{
	size_t size = (size_t)gb_range(st, 0);
	static struct handoff h;
	memset(&h, 0, sizeof(h));
	pthread_t t;
	if (pthread_create(&t, NULL, freer, &h) != 0) {
		gb_skip_with_error(st, "pthread_create failed");
		return;
	}
	unsigned k = 0;
	while (gb_keep_running_batch(st, BATCH)) {
		while (atomic_load_explicit(&h.full[k], memory_order_acquire))
			sched_yield();
		for (int i = 0; i < BATCH; i++)
			h.batch[k][i] = malloc(size);
		atomic_store_explicit(&h.full[k], 1, memory_order_release);
		k ^= 1;
	}
	atomic_store_explicit(&h.stop, true, memory_order_release);
	pthread_join(t, NULL);
	gb_set_items_processed(st, gb_iterations(st));
}

static const int64_t sizes[] = {16, 64, 256, 1024, 4096, 8192, 65536};

int main(int argc, char **argv)
{
	struct {
		const char *name;
		gb_fn fn;
	} by_size[] = {
	    {"pair", bm_pair},
	    {"batch_lifo", bm_batch_lifo},
	    {"batch_fifo", bm_batch_fifo},
	    {"calloc", bm_calloc},
	};
	for (size_t c = 0; c < sizeof(by_size) / sizeof(by_size[0]); c++) {
		gb_bench *b = gb_register(by_size[c].name, by_size[c].fn);
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			gb_arg(b, sizes[i]);
	}
	gb_bench *b = gb_register("realloc_grow", bm_realloc_grow);
	gb_arg(gb_arg(gb_arg(b, 4096), 65536), 1 << 20);
	b = gb_register("aligned", bm_aligned);
	gb_arg(gb_arg(gb_arg(b, 64), 256), 4096);
	b = gb_use_real_time(gb_register("cross_thread", bm_cross_thread));
	gb_arg(gb_arg(gb_arg(b, 64), 1024), 8192);
	return gb_main(argc, argv);
}
