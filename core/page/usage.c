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
	uint64_t now = slabs + atomic_load(&uslub_large_bytes) + atomic_load(&uslub_huge_bytes);
	uint64_t peak = atomic_load(&uslub_peak_in_use);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_in_use, &peak, now))
		;
}
