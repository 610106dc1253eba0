/* Memory in use: pages in slabs and large blocks (huge blocks count in huge.c), and its
 * peak, kept at slab granularity - objects are counted on the fast path only per
 * thread, so a peak of them cannot be taken without work there. */
#include "page/page.h"

_Atomic uint64_t uslub_slab_bytes;
_Atomic uint64_t uslub_large_bytes;
_Atomic uint64_t uslub_depot_bytes;
_Atomic uint64_t uslub_peak_in_use;

/* Called when a slab or a block is made: one load of each counter, not a walk over every
 * cache, on a path every large allocation takes. */
void uslub_note_in_use(void)
{
	uint64_t slabs = atomic_load_explicit(&uslub_slab_bytes, memory_order_relaxed);
	uint64_t now = slabs + uslub_large_in_use() + atomic_load(&uslub_huge_bytes);
	uint64_t peak = atomic_load(&uslub_peak_in_use);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_in_use, &peak, now))
		;
}

/* Large blocks are counted by the thread that takes or frees them, in its own state, and
 * folded into uslub_large_bytes when its count passes a batch, as the kernel's
 * percpu_counter folds a CPU's: one counter that every large malloc and free wrote, with
 * the peak and the bound's wave read beside it at each, was a cache line two threads
 * replacing blocks of 128 KiB - 2 MiB took from each other at every call (27% of the
 * samples at 1 MiB; tools/bench/results/large-count.md). The batch is an eighth of the
 * large blocks in use, shared among the threads, and at least LARGE_BATCH_MIN (the
 * smallest large block: a thread among many with little in use folds at each, as before):
 * what the threads hold unfolded, which the bound's line, the keep's quarter and the peak
 * do not see, is at most an eighth of the total and 128 KiB a thread (a floor of 1 MiB let
 * 100 threads freeing each other's blocks keep more: mid-size peaks 361 MiB against 348,
 * 356 with this one); a thread's exit and the idle drain fold its count in. The total may
 * read below zero for a while (a block counted in by its maker's state, out by another
 * thread's fold): readers clamp (uslub_large_in_use). */
#define LARGE_BATCH_MIN (128L << 10)

static void fold(int64_t bytes)
{
	if (bytes < 0) {
		uslub_bound_leaving(&uslub_large_bytes, (uint64_t)-bytes);
	} else if (bytes > 0) {
		atomic_fetch_add(&uslub_large_bytes, (uint64_t)bytes);
		uslub_note_in_use();
	}
}

void uslub_large_count(int64_t bytes)
{
	struct uslub_thread *t = uslub_tls_thread;
	if (t->state != THREAD_LIVE) {
		fold(bytes);
		return;
	}
	/* An atomic add on the thread's own line: the idle drain may fold it meanwhile. */
	int64_t held =
	    atomic_fetch_add_explicit(&t->large_delta, bytes, memory_order_relaxed) + bytes;
	uint64_t size = (uint64_t)(held < 0 ? -held : held);
	if (size < LARGE_BATCH_MIN)
		return;
	unsigned threads = __atomic_load_n(&uslub_nr_thread_states, __ATOMIC_RELAXED);
	if (size * 8 * (threads ? threads : 1) >= uslub_large_in_use())
		uslub_large_fold(t);
}

void uslub_large_fold(struct uslub_thread *t)
{
	fold(atomic_exchange_explicit(&t->large_delta, 0, memory_order_relaxed));
}
