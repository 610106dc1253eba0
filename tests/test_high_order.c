/* High-order slabs without blocking: with the page allocator fragmented (through the
 * internal API) a cache whose preferred order is 3 falls back to order 0 at once, keeps
 * serving without growing, and counts order_fallback; USLUB_HIGH_ORDER=wait blocks and
 * counts high_order_stall instead; under USLUB_MEM_LIMIT the heap never passes the cap,
 * order-0 fallback serves from fragmented holes, malloc ends in ENOMEM and recovers after
 * frees; the background replenisher starts, prepares warm blocks when woken, is restarted
 * in a forked child and stops cleanly. */
#include "hooks.h"
#include "thread/thread.h"
#include "os/options.h"
#include "replenish/replenish.h"
#include "test_util.h"
#include "uslub.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIZE 2048 /* kmalloc-2k: preferred order 3, minimum order 0 */

static unsigned cls;

static uint64_t stat_of(enum uslub_stat_item item)
{
	return uslub_tls_thread->cpu[cls].stat[item];
}

static unsigned order_of(void *p)
{
	return page_desc_of(p)->head->order;
}

/* Takes every free page, then gives back only those at even page indexes: their buddies
 * stay taken, so no free block above order 0 is left. Returns the pages kept. */
static struct page_desc **fragment(size_t *kept)
{
	size_t cap = 1 << 16, n = 0, k = 0;
	struct page_desc **all = malloc(cap * sizeof(*all));
	struct page_desc *d;
	uslub_pcp_drain(uslub_tls_thread, 0);
	/* A zone's first region grows by small steps at first: grown to a whole 4 MiB block,
	 * the zone leaves enough scattered pages for what follows. */
	d = uslub_pages_alloc(0, USLUB_MAX_ORDER, 0);
	if (d)
		uslub_pages_free(d, USLUB_MAX_ORDER);
	while ((d = uslub_pages_alloc(0, 0, GFP_TRYLOCK | GFP_NOGROW))) {
		if (n == cap)
			all = realloc(all, (cap *= 2) * sizeof(*all));
		all[n++] = d;
	}
	for (size_t i = 0; i < n; i++) {
		uintptr_t idx = ((uintptr_t)all[i] & REGION_MASK) >> DESC_SHIFT;
		if (idx & 1)
			all[k++] = all[i];
		else
			uslub_pages_free(all[i], 0);
	}
	*kept = k;
	return all;
}

static void unfragment(struct page_desc **kept, size_t n)
{
	for (size_t i = 0; i < n; i++)
		uslub_pages_free(kept[i], 0);
	free(kept);
}

static void fallback_when_fragmented(void)
{
	size_t nkept;
	struct page_desc **kept = fragment(&nkept);
	CHECKF(uslub_pages_check(0) == 0, "fragmented allocator consistent");
	for (unsigned o = 1; o <= USLUB_MAX_ORDER; o++)
		CHECKF(uslub_nodes[0].nr_free[o] == 0, "a free block of order %u is left", o);
	uint64_t grows = uslub_nodes[0].grows, fallbacks = stat_of(USLUB_STAT_ORDER_FALLBACK);
	uint64_t slabs = stat_of(USLUB_STAT_ALLOC_SLAB);
	enum { N = 64 };
	void *objs[N];
	unsigned low = 0;
	for (int i = 0; i < N; i++) {
		objs[i] = uslub_malloc(SIZE);
		CHECKF(objs[i] != NULL, "object %d served", i);
		memset(objs[i], i, SIZE);
		low += order_of(objs[i]) == uslub_caches[cls].min_order;
	}
	CHECKF(stat_of(USLUB_STAT_ALLOC_SLAB) > slabs, "new slabs were made");
	CHECKF(stat_of(USLUB_STAT_ORDER_FALLBACK) - fallbacks ==
		   stat_of(USLUB_STAT_ALLOC_SLAB) - slabs,
	       "every new slab fell back: %lu of %lu",
	       (unsigned long)(stat_of(USLUB_STAT_ORDER_FALLBACK) - fallbacks),
	       (unsigned long)(stat_of(USLUB_STAT_ALLOC_SLAB) - slabs));
	CHECKF(low > 0, "objects come from minimum-order slabs");
	CHECKF(uslub_nodes[0].grows == grows, "served from the fragmented pages, no growth");
	CHECKF(stat_of(USLUB_STAT_HIGH_ORDER_STALL) == 0, "nowait never stalls");
	for (int i = 0; i < N; i++)
		for (int b = 0; b < SIZE; b += 512)
			CHECKF(((unsigned char *)objs[i])[b] == (unsigned char)i,
			       "object %d intact", i);

	/* The old behaviour, for comparison: block for the preferred order. */
	uslub_config.high_order_wait = 1;
	uint64_t stalls = stat_of(USLUB_STAT_HIGH_ORDER_STALL);
	slabs = stat_of(USLUB_STAT_ALLOC_SLAB);
	void *more[N];
	unsigned high = 0;
	for (int i = 0; i < N; i++) {
		more[i] = uslub_malloc(SIZE);
		high += order_of(more[i]) == uslub_caches[cls].order;
	}
	uslub_config.high_order_wait = 0;
	CHECKF(stat_of(USLUB_STAT_HIGH_ORDER_STALL) > stalls, "wait mode counts stalls");
	CHECKF(high > 0, "wait mode gets preferred-order slabs");
	CHECKF(uslub_nodes[0].grows > grows, "... by growing on the caller's time");
	/* Slabs of both orders live side by side: frees find their own slab. */
	for (int i = 0; i < N; i++) {
		uslub_free(objs[i]);
		uslub_free(more[i]);
	}
	unfragment(kept, nkept);
	CHECKF(uslub_pages_check(0) == 0, "consistent after");
}

static void memory_cap(void)
{
	uint64_t limit = atomic_load(&uslub_mapped_bytes) + (8UL << 20);
	uslub_config.mem_limit = limit;
	enum { MAX = 8192 };
	static void *blocks[MAX];
	int n = 0;
	errno = 0;
	while (n < MAX && (blocks[n] = uslub_malloc(3 * USLUB_PAGE_SIZE)))
		n++;
	CHECKF(n < MAX && errno == ENOMEM, "large allocation ends in ENOMEM (%d blocks)", n);
	CHECKF(atomic_load(&uslub_mapped_bytes) <= limit, "mapped %lu <= cap %lu",
	       (unsigned long)atomic_load(&uslub_mapped_bytes), (unsigned long)limit);
	/* Holes of three pages: too small for the cache's preferred order 3. */
	for (int i = 0; i < n; i += 2)
		uslub_free(blocks[i]);
	uint64_t fallbacks = stat_of(USLUB_STAT_ORDER_FALLBACK);
	static void *objs[MAX * 4];
	int m = 0;
	errno = 0;
	while (m < MAX * 4 && (objs[m] = uslub_malloc(SIZE)))
		m++;
	CHECKF(m > 16, "the cache kept serving from holes: %d objects", m);
	CHECKF(stat_of(USLUB_STAT_ORDER_FALLBACK) > fallbacks, "... by falling back");
	CHECKF(m < MAX * 4 && errno == ENOMEM, "then ENOMEM");
	CHECKF(atomic_load(&uslub_mapped_bytes) <= limit, "still within the cap");
	/* Freeing lets allocation resume. */
	for (int i = 0; i < m; i++)
		uslub_free(objs[i]);
	for (int i = 1; i < n; i += 2)
		uslub_free(blocks[i]);
	void *again = uslub_malloc(1 << 20);
	CHECKF(again != NULL, "allocation resumes after frees");
	uslub_free(again);
	void *small = uslub_malloc(SIZE);
	CHECKF(small != NULL, "small allocation resumes");
	uslub_free(small);
	uslub_config.mem_limit = 0;
	CHECKF(uslub_pages_check(0) == 0, "consistent after the cap");
}

static int wait_for(uint64_t *counter, uint64_t above)
{
	for (int i = 0; i < 400; i++) {
		if (__atomic_load_n(counter, __ATOMIC_RELAXED) > above)
			return 1;
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void background(void)
{
	uslub_config.background = 1;
	atomic_store(&uslub_hooks_pending, 1);
	uslub_replenish_start();
	CHECKF(uslub_replenish_running(), "started");
	/* Hand every warm page back, so the reserve is empty, then wake it: it rebuilds
	 * the reserve (it may have started on it already, from its first round). The trim
	 * first: blocks the medium caches hold would go back warm later and fill it. */
	uslub_malloc_trim(0);
	uslub_pages_release(0, 0);
	uslub_replenish_kick();
	int ready = 0;
	for (int i = 0; i < 400 && !ready; i++) {
		uint64_t warm = 0;
		for (unsigned o = 3; o <= USLUB_MAX_ORDER; o++)
			warm += uslub_nodes[0].nr_warm[o] << o;
		ready = warm * USLUB_PAGE_SIZE >= (4UL << 20) && uslub_replenish_stats.blocks > 0;
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	CHECKF(ready, "woken, it prepared warm blocks (wakeups %lu, blocks %lu, warm pages %lu)",
	       (unsigned long)uslub_replenish_stats.wakeups,
	       (unsigned long)uslub_replenish_stats.blocks,
	       (unsigned long)uslub_nodes[0].warm_free_pages);
	struct page_desc *d = uslub_pages_alloc(0, 3, GFP_NOWAIT);
	CHECKF(d != NULL, "a no-wait try of order 3 now succeeds");
	if (d)
		uslub_pages_free(d, 3);

	pid_t pid = fork();
	if (pid == 0) {
		/* The parent's thread is not here: the child starts its own. */
		int ok = !uslub_replenish_running() && atomic_load(&uslub_hooks_pending);
		uslub_replenish_start();
		ok = ok && uslub_replenish_running();
		uint64_t wakeups = uslub_replenish_stats.wakeups;
		uslub_replenish_kick();
		ok = ok && wait_for(&uslub_replenish_stats.wakeups, wakeups);
		uslub_replenish_stop();
		_exit(ok && !uslub_replenish_running() ? 0 : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "restarted in the child: %d", status);
	/* Near the memory cap the replenisher leaves the rest to the callers: it does not
	 * grow the heap for its reserve. */
	uslub_pages_release(0, 0);
	uslub_config.mem_limit = atomic_load(&uslub_mapped_bytes) + (6UL << 20);
	uint64_t prepared = uslub_replenish_stats.blocks, wakeups = uslub_replenish_stats.wakeups;
	uslub_replenish_kick();
	CHECKF(wait_for(&uslub_replenish_stats.wakeups, wakeups), "woken near the cap");
	/* Give it time to act: until its block count has stood still for 50 ms. */
	for (int i = 0; i < 40; i++) {
		uint64_t blocks = __atomic_load_n(&uslub_replenish_stats.blocks, __ATOMIC_RELAXED);
		struct timespec pause = {0, 50000000};
		nanosleep(&pause, NULL);
		if (i >= 2 &&
		    __atomic_load_n(&uslub_replenish_stats.blocks, __ATOMIC_RELAXED) == blocks)
			break;
	}
	uslub_replenish_stop();
	CHECKF(!uslub_replenish_running(), "stopped");
	CHECKF(uslub_replenish_stats.blocks == prepared,
	       "within 8 MiB of the cap it prepared nothing (%lu blocks)",
	       (unsigned long)(uslub_replenish_stats.blocks - prepared));
	CHECKF(atomic_load(&uslub_mapped_bytes) <= uslub_config.mem_limit, "within the cap");
	void *big = uslub_malloc(4UL << 20);
	CHECKF(big != NULL, "the room under the cap is the caller's");
	uslub_free(big);
	uslub_config.mem_limit = 0;
	uslub_config.background = 0;
}

int main(void)
{
	uslub_free(uslub_malloc(1)); /* start-up and this thread's state */
	cls = uslub_size_to_class(SIZE);
	CHECKF(uslub_caches[cls].order == 3 && uslub_caches[cls].min_order == 0,
	       "kmalloc-2k prefers order 3 (got %u) with minimum 0 (got %u)",
	       uslub_caches[cls].order, uslub_caches[cls].min_order);
	fallback_when_fragmented();
	memory_cap();
	background();
	CHECKF(uslub_pages_check(0) == 0, "page allocator consistent at the end");
	return tu_summary("test_high_order");
}
