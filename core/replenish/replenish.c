/* The background thread: decay when the program is quiet, and the replenisher.
 *
 * 1. Decay. Free memory goes back to the OS by age and recent reuse (page/decay.c,
 *    section 6), checked on the allocator's slow paths. A program whose traffic is all
 *    fast paths (a malloc/free pair a millisecond after a spike) never reaches one, so
 *    this thread makes the pass each decay step while any zone holds warm free memory,
 *    and sleeps without a timeout when none does; the next page free wakes it.
 *
 *    On by default (USLUB_BACKGROUND=auto), but started lazily: only once a zone holds
 *    more warm free memory than M_TRIM_THRESHOLD, at the next allocation slow path (a safe
 *    point: pthread_create allocates). A program that never frees much never has it -
 *    nor does a forked child until it frees that much itself, so a fork-heavy program
 *    (fork, then exec) pays no thread per child. Where threads cannot be made (a seccomp
 *    sandbox refusing clone), the start fails once, quietly, and the slow-path checks
 *    remain. The lessons behind the default: jemalloc ships background_thread off and its
 *    decay then waits for the next allocator call, the gap this thread closes; Go's
 *    scavenger and the kernel's kswapd run in the background always, paced. Here a pass is
 *    a lock and a walk of the warm free blocks once every 1.25 s while there are any.
 *
 * 2. Replenish (USLUB_BACKGROUND=1 only).
 *
 * The kernel's lesson: a slab allocation must not wait for a high-order page; if one is
 * not at hand it takes the minimum order, and kswapd/kcompactd make the next try likely to
 * succeed. Here a failed try (uslub_replenish_kick) wakes this thread. It keeps, per node,
 * a reserve of warm free memory in blocks of at least the caches' largest preferred order:
 * it takes cold blocks (never touched, or handed back to the OS) or grows the node, faults
 * them in with MADV_POPULATE_WRITE and frees them back warm. Where the system's
 * transparent-huge-page policy would make a faulting thread compact memory, the huge-page
 * advice is given only here, for the prefault, and withdrawn after it, so no caller ever
 * stalls for a huge page.
 *
 * It holds the page allocator's node lock only as any allocation does, never a lock of the
 * fast path (which has none), and sleeps on a futex when there is nothing to do. It is
 * started lazily at a safe point of the slow path, never from inside the page allocator,
 * and again in a forked child, where the parent's thread does not exist. */
#include "replenish/replenish.h"

#include "thread/thread.h"
#include "debug/debug.h"
#include "hooks.h"
#include "os/options.h"
#include "os/os.h"
#include "slab/slab.h"

#include <pthread.h>
#include <signal.h>

#define CHUNK_ORDER 9 /* 2 MiB: one transparent huge page */
/* The warm reserve it keeps: up to 16 MiB, and well under what the page allocator keeps
 * before handing free memory back, or the two would undo each other's work forever. */
#define RESERVE_MAX (16UL << 20)
/* Thread states looked at per wakeup for one of a gone thread: off the callers' time,
 * yet bounded, as wakeups come with every burst of failed tries. */
#define REAP_BUDGET 16
/* The debug sweep (debug/sweep.c): a step of this many pages of slabs every
 * SWEEP_PERIOD_MS, so a heap of 64 MiB is swept about every 8 s, and a step holds a
 * zone's lock for no more than reading 2 MiB takes. */
#define SWEEP_PAGES	512
#define SWEEP_PERIOD_MS 1000

struct uslub_replenish_stats uslub_replenish_stats;

static _Atomic uint32_t kick_seq;
static _Atomic int sleeping, stop_requested, running;
/* A failed high-order try asked for the reserve (set by kick, taken by the thread). */
static _Atomic int replenish_due;
/* The thread sleeps with no decay pass ahead: a page free wakes it (background_note). */
static _Atomic int idle;
/* auto: the start was asked for once (a failed start is not tried again). */
static _Atomic int armed;
static pthread_t thread;
static unsigned target_order;
static int thp_policy;

void uslub_replenish_init(void)
{
	target_order = 0;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		if (uslub_caches[i].order > target_order)
			target_order = uslub_caches[i].order;
	thp_policy = uslub_os_thp_policy();
	/* The debug sweep needs the thread from the start (unless there is to be none). */
	if (uslub_config.background == USLUB_BG_ON ||
	    (uslub_debug_sweep_wanted && uslub_config.background != USLUB_BG_OFF))
		atomic_store(&uslub_hooks_pending, 1);
}

static uint64_t reserve_target(void)
{
	uint64_t quarter = uslub_release_threshold() / 4;
	return quarter < RESERVE_MAX ? quarter : RESERVE_MAX;
}

static uint64_t warm_reserve(struct uslub_node *n)
{
	uint64_t bytes = 0;
	for (unsigned o = target_order; o <= USLUB_MAX_ORDER; o++)
		bytes += __atomic_load_n(&n->nr_warm[o], __ATOMIC_RELAXED) * (USLUB_PAGE_SIZE << o);
	return bytes;
}

/* Under USLUB_MEM_LIMIT the last stretch below the cap is the callers': the replenisher
 * takes memory (growing the heap, or taking back a block handed to the OS) only while an
 * eighth of the cap, at least 8 MiB, would stay free of it. Otherwise it could map the
 * last memory under the cap for its reserve just as a caller that had handed memory back
 * at the cap grows, and that caller would get ENOMEM (seen: high_order_frag under a
 * 768 MiB cap). */
static bool near_cap(void)
{
	uint64_t limit = uslub_config.mem_limit;
	if (!limit)
		return false;
	uint64_t headroom = limit / 8 > (8UL << 20) ? limit / 8 : (8UL << 20);
	uint64_t mapped = atomic_load_explicit(&uslub_mapped_bytes, memory_order_relaxed);
	return mapped + headroom + (USLUB_PAGE_SIZE << USLUB_MAX_ORDER) > limit;
}

static void prepare_node(unsigned node)
{
	struct uslub_node *n = &uslub_nodes[node];
	while (warm_reserve(n) < reserve_target() && !atomic_load(&stop_requested) && !near_cap()) {
		struct page_desc *d = uslub_pages_alloc(node, CHUNK_ORDER, GFP_COLD);
		if (!d)
			return; /* at the cap, or the OS said no: callers fall back meanwhile */
		void *p = page_address(d);
		size_t len = USLUB_PAGE_SIZE << CHUNK_ORDER;
		bool advised = thp_policy >= 0 && uslub_os_hugepage(p, len) == 0;
		uslub_os_populate(p, len);
		if (advised) {
			uslub_replenish_stats.huge_chunks++;
			/* Withdraw the advice where a later fault (after the range went back to
			 * the OS) would compact on a caller's time. */
			if (thp_policy == 1)
				uslub_os_nohugepage(p, len);
		}
		uslub_pages_free(d, CHUNK_ORDER);
		uslub_replenish_stats.blocks++;
		uslub_replenish_stats.bytes += len;
	}
}

/* Live threads the last idle drain did not find idle yet (thread.c). */
static unsigned held_above_pages;

static void *replenish_main(void *arg)
{
	(void)arg;
	/* Replenish only after a failed try: a program whose tries all succeed never pays
	 * for that beyond the thread's stack. */
	uint32_t seq = 0;
	while (!atomic_load(&stop_requested)) {
		atomic_store(&sleeping, 1);
		long wait = uslub_pages_decay_wait_ms();
		/* Objects waiting in barns, threads not yet found idle and cached huge
		 * mappings hold memory that is not free yet: look again in a step. */
		if (wait < 0 && (held_above_pages || uslub_barns_held() ||
				 uslub_huge_cached_bytes || uslub_medium_depot_pages()))
			wait = (long)(uslub_config.decay_ms / 8);
		if (uslub_debug_sweep_wanted && (wait < 0 || wait > SWEEP_PERIOD_MS))
			wait = SWEEP_PERIOD_MS;
		if (wait < 0) {
			/* Nothing to decay: sleep until a free wakes us. Looked at again after
			 * `idle` is set, so a free in between is not missed. */
			atomic_store(&idle, 1);
			wait = uslub_pages_decay_wait_ms();
			if (wait >= 0)
				atomic_store(&idle, 0);
		}
		if (atomic_load(&kick_seq) == seq && !atomic_load(&stop_requested))
			uslub_os_futex_wait(&kick_seq, seq, wait);
		atomic_store(&sleeping, 0);
		atomic_store(&idle, 0);
		seq = atomic_load(&kick_seq);
		if (atomic_load(&stop_requested))
			break;
		uslub_debug_sweep("the background sweep", SWEEP_PAGES);
		uslub_replenish_stats.decay_passes++;
		/* What sits above the page allocator first, so what it frees decays too: barn
		 * objects unused for a period, idle threads' slabs and caches, expired huge
		 * mappings, unused medium blocks (sheaf.c, thread.c, huge.c, medium.c). */
		uslub_barns_decay();
		uslub_threads_drain_idle();
		uslub_medium_depots_decay();
		held_above_pages = uslub_threads_not_idle;
		uslub_huge_cache_release(false);
		uslub_replenish_stats.decay_bytes += uslub_pages_decay_all();
		if (!atomic_exchange(&replenish_due, 0))
			continue;
		uslub_replenish_stats.wakeups++;
		/* Memory is short at hand: states of gone threads hold some (thread.c). */
		uslub_threads_reap(REAP_BUDGET);
		for (unsigned node = 0; node < uslub_nr_nodes; node++)
			prepare_node(node);
	}
	return NULL;
}

void uslub_replenish_start(void)
{
	if (!atomic_exchange(&uslub_hooks_pending, 0) || atomic_load(&running))
		return;
	atomic_store(&stop_requested, 0);
	/* Started from inside whichever malloc came first, it would inherit that thread's
	 * signal mask and could take a process-directed signal the program means for its
	 * sigwait thread (and die of it by default action): it starts with all of them
	 * blocked, and the caller's mask is put back. pthread_create allocates (the new
	 * thread's TLS); that nested malloc is served normally, since the pending flag is
	 * already clear. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = USLUB_OUT(pthread_create(&thread, NULL, replenish_main, NULL));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) {
		USLUB_OUT(pthread_setname_np(thread, "uslub-replenish"));
		atomic_store(&running, 1);
		uslub_replenish_stats.starts++;
	}
}

void uslub_replenish_kick(void)
{
	if (uslub_config.background != USLUB_BG_ON)
		return;
	atomic_store(&replenish_due, 1);
	atomic_fetch_add(&kick_seq, 1);
	if (atomic_load(&sleeping))
		uslub_os_futex_wake(&kick_seq);
}

void uslub_replenish_stop(void)
{
	if (!atomic_load(&running))
		return;
	atomic_store(&stop_requested, 1);
	atomic_fetch_add(&kick_seq, 1);
	uslub_os_futex_wake(&kick_seq);
	USLUB_OUT(pthread_join(thread, NULL));
	atomic_store(&running, 0);
}

void uslub_background_note(uint64_t warm_bytes)
{
	/* The caller dropped the zone lock after its free; the thread sets `idle` before it
	 * looks at the zones under their locks, so one of the two sees the other. */
	if (atomic_load_explicit(&idle, memory_order_relaxed)) {
		if (atomic_exchange(&idle, 0)) {
			atomic_fetch_add(&kick_seq, 1);
			uslub_os_futex_wake(&kick_seq);
		}
		return;
	}
	if (uslub_config.background == USLUB_BG_AUTO &&
	    !atomic_load_explicit(&armed, memory_order_relaxed) &&
	    warm_bytes > uslub_release_threshold() && !atomic_exchange(&armed, 1))
		atomic_store(&uslub_hooks_pending, 1);
}

void uslub_replenish_after_fork_child(void)
{
	atomic_store(&running, 0);
	atomic_store(&sleeping, 0);
	atomic_store(&idle, 0);
	atomic_store(&replenish_due, 0);
	/* auto: lazily again, once the child itself has memory to hand back. */
	atomic_store(&armed, 0);
	atomic_store(&uslub_hooks_pending,
		     uslub_config.background == USLUB_BG_ON ||
			 (uslub_debug_sweep_wanted && uslub_config.background != USLUB_BG_OFF));
}

int uslub_replenish_running(void)
{
	return atomic_load(&running);
}
