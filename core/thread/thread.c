/* Threads: the per-thread state (kmem_cache_cpu for every cache, and the page cache of
 * orders 0-3, page/pcp.c), its registry, its teardown, and the reaping of states whose
 * thread is gone. Start-up and fork: startup.c. */
#include "thread/thread.h"
#include "hooks.h"
#include "os/options.h"
#include "page/node.h"
#include "page/page.h"
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
/* For urcu-bp's per-thread reader record (in_urcu_read_section); the calls made here are
 * the library's either way. */
#define _LGPL_SOURCE
#include <urcu/urcu-bp.h>
#if USLUB_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* In .bss, their states set at start-up: as initialised data, 38 KiB of the library's
 * file (two states of 19 KiB) were mapped into every program that loads it. */
static struct uslub_thread dead_thread;
struct uslub_thread uslub_orphan_thread;
pthread_mutex_t uslub_orphan_lock = PTHREAD_MUTEX_INITIALIZER;

pthread_mutex_t uslub_registry_lock = PTHREAD_MUTEX_INITIALIZER;
struct uslub_thread *uslub_registry;
pthread_mutex_t uslub_stat_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_key_t thread_key;

/* ---- thread state ---------------------------------------------------------------- */

/* Reaping (below): states a creation or an exit looks at while a pass is on, and the
 * least growth of the registry since the last pass that starts one (else half its size). */
#define SWEEP_BUDGET 4
#define SWEEP_SLACK  8

/* The reaping pass (see below), under uslub_registry_lock; the sizes are read without it
 * to decide that there is nothing to do. */
static _Atomic unsigned next_barn_shard;  /* round robin over the node's barns */
static struct uslub_thread *sweep_cursor; /* next state the pass looks at */
static bool sweep_active;
static unsigned long reg_count;	 /* states in the registry */
static unsigned long sweep_mark; /* reg_count after the last pass, or its lowest since */

/* The registry of thread states. Writers (a thread's first allocation, a thread's exit)
 * serialise on uslub_registry_lock; readers - the statistics dump, the live view - walk it
 * under RCU (urcu-bp, which needs no reader registration: any thread may take a dump) and
 * take no lock, so a dump never waits for, or holds up, a thread being created inside
 * malloc. A state leaves the list like cds_list_del_rcu: its own reg_next stays intact for a
 * reader standing on it, and its pages go back only after a grace period.
 *
 * liburcu and malloc: the writer side (synchronize_rcu) only takes liburcu's own mutexes and
 * blocks signals; a thread's first read lock registers it through mmap and
 * pthread_setspecific, which allocates only for a key past the first 32 (liburcu creates its
 * key in its constructor, before the program's). No read lock is ever taken inside malloc:
 * readers are the dump, the live-view thread and uslub_stats_print. The writer that waits
 * is a teardown - in the thread-exit destructor, or in a sweep (reaping, below), which may
 * run inside malloc at a thread's first allocation - and holds no allocator lock then. */
static void registry_add(struct uslub_thread *t)
{
	uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
	__atomic_store_n(&reg_count, reg_count + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&uslub_nr_thread_states, reg_count, __ATOMIC_RELAXED);
	struct uslub_thread *head = uslub_registry;
	t->reg_prev = NULL;
	t->reg_next = head;
	if (head)
		head->reg_prev = t;
	/* Publish after the state is initialised (zeroed counters): rcu_assign_pointer. */
	__atomic_store_n(&uslub_registry, t, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&uslub_registry_lock);
}

static void registry_del(struct uslub_thread *t)
{
	uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
	__atomic_store_n(&reg_count, reg_count - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&uslub_nr_thread_states, reg_count, __ATOMIC_RELAXED);
	if (reg_count < sweep_mark)
		__atomic_store_n(&sweep_mark, reg_count, __ATOMIC_RELAXED);
	if (sweep_cursor == t)
		sweep_cursor = t->reg_next;
	if (t->reg_prev)
		__atomic_store_n(&t->reg_prev->reg_next, t->reg_next, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&uslub_registry, t->reg_next, __ATOMIC_RELEASE);
	if (t->reg_next)
		t->reg_next->reg_prev = t->reg_prev;
	pthread_mutex_unlock(&uslub_registry_lock);
	/* A reader may still stand on t: wait until every read-side section that could have
	 * seen it has ended before the caller frees it. */
	USLUB_OUT_VOID(urcu_bp_synchronize_rcu());
}

/* The calling thread's own state once made, published in uslub_tls_thread or not yet
 * (alloc.c, early objects). */
__thread struct uslub_thread *uslub_tls_state __attribute__((tls_model("initial-exec")));

static struct uslub_thread *thread_make(void)
{
	/* Before this state is made, so a reaped state's pages can be the new one's. */
	uslub_threads_reap(SWEEP_BUDGET);
	unsigned order = uslub_get_order(sizeof(struct uslub_thread));
	struct page_desc *d = uslub_pages_alloc(0, order, 0);
	if (!d)
		return NULL;
	bool cold = d->flags & PF_COLD;
	for (size_t i = 1; i < (1UL << order); i++)
		d[i].head = d;
	__atomic_store_n(&d->kind, PAGE_META, __ATOMIC_RELAXED);
	d->cls = CLS_NONE;
	d->order = (uint8_t)order;
	d->head = d;
	struct uslub_thread *t = page_address(d);
	/* Warm pages held anything before (slabs, blocks, an earlier state): all cleared,
	 * as a slot past the caches in use now becomes live when a cache is made; the pages
	 * still zero are not written (page/zero.c). */
	if (!cold)
		uslub_pages_zero(t, sizeof(*t));
	t->state = THREAD_LIVE;
	t->tgid = getpid();
	t->tid = gettid();
	t->tls_slot = &uslub_tls_thread;
	t->made_ticks = uslub_os_boot_ticks();
	t->node = uslub_node_current();
	uslub_pcp_init(t);
	t->pcp_node = t->node;
	uslub_medium_init(t);
	t->barn_shard =
	    (uint8_t)(atomic_fetch_add_explicit(&next_barn_shard, 1, memory_order_relaxed) %
		      BARN_SHARDS);
	/* The sheaves open at each class's first slow path (uslub_sheaf_open), not here:
	 * writing 36 capacities would touch every page of the state, and a thread that
	 * uses a few classes would pay for all of them in resident memory. */
	registry_add(t);
	uslub_tls_state = t;
	uslub_hooks.background_note(0); /* to be looked at: uslub_thread_state says why */
	/* May allocate (for keys past the first 32) and so come back here: by now the
	 * thread's state is in place, so the nested call takes the ordinary path. */
	pthread_setspecific(thread_key, t);
	return t;
}

struct uslub_thread *uslub_thread_state(void)
{
	struct uslub_thread *t = uslub_tls_state;
	if (!t)
		return thread_make();
	/* Unpublished by the idle drain, which may still be emptying the sheaves: it holds
	 * slow_lock until it is done (see "a parked thread's sheaves"). */
	if (unlikely(__atomic_load_n(&t->parked, __ATOMIC_ACQUIRE))) {
		bool in = uslub_slow_enter(t);
		__atomic_store_n(&t->parked, false, __ATOMIC_RELAXED);
		uslub_slow_exit(t, in);
		/* A background thread asleep until a page free looks at it again: its frees
		 * may all stop in its caches (so test_parked's were never taken again). */
		uslub_hooks.background_note(0);
	}
	return t;
}

struct uslub_thread *uslub_thread_create(void)
{
	struct uslub_thread *t = uslub_thread_state();
	if (t)
		uslub_tls_thread = t;
	return t;
}

_Atomic unsigned long uslub_fold_seq;

/* Folding counters into the caches is done under stat_lock so two exiting threads do
 * not lose each other's counts. The thread's own counters are zeroed as they are added,
 * and the fold runs before the thread leaves the registry, so a reader counts each event
 * once; uslub_fold_seq, odd during the fold, tells a reader that raced with it to retry. */
void uslub_stats_fold(struct uslub_thread *t)
{
	USLUB_OUT(pthread_mutex_lock(&uslub_stat_lock));
	atomic_fetch_add_explicit(&uslub_fold_seq, 1, memory_order_acq_rel);
	for (unsigned i = 0, n = uslub_caches_in_use(); i < n; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		uint64_t free_fast = uslub_cc_stat(cc, USLUB_STAT_FREE_FASTPATH);
		/* Most are 0 in a brief thread: a locked add of each was 4% of thread_churn. */
		for (unsigned k = 0; k < USLUB_NR_THREAD_STATS; k++) {
			uint64_t v = k == USLUB_STAT_FREE_FASTPATH ? free_fast : cc->stat[k];
			if (v)
				__atomic_fetch_add(&uslub_caches[i].stat[k], v, __ATOMIC_RELAXED);
			uslub_stat_clear(&cc->stat[k], 0);
		}
		/* What the sheaf holds now is not a fast free to count again. */
		uslub_stat_clear(&cc->stat[USLUB_STAT_FREE_FASTPATH], -(uint64_t)cc->sheaf_count);
	}
	for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++)
		for (unsigned o = 0; o < PCP_ORDERS; o++) {
			__atomic_fetch_add(&uslub_pcp_stat[k][o], t->pcp_stat[k][o],
					   __ATOMIC_RELAXED);
			__atomic_store_n(&t->pcp_stat[k][o], 0, __ATOMIC_RELAXED);
		}
	for (unsigned k = 0; k < NR_MSHEAVES; k++) {
		struct cache_cpu *cc = &t->mcpu[k];
		t->medium_stat[USLUB_MEDIUM_HIT] += uslub_cc_stat(cc, USLUB_STAT_ALLOC_FASTPATH);
		t->medium_stat[USLUB_MEDIUM_FREE] += uslub_cc_stat(cc, USLUB_STAT_FREE_FASTPATH);
		uslub_stat_clear(&cc->stat[USLUB_STAT_ALLOC_FASTPATH], 0);
		uslub_stat_clear(&cc->stat[USLUB_STAT_FREE_FASTPATH], -(uint64_t)cc->sheaf_count);
	}
	for (unsigned k = 0; k < USLUB_NR_MEDIUM_STATS; k++) {
		__atomic_fetch_add(&uslub_medium_stat[k], t->medium_stat[k], __ATOMIC_RELAXED);
		__atomic_store_n(&t->medium_stat[k], 0, __ATOMIC_RELAXED);
	}
	atomic_fetch_add_explicit(&uslub_fold_seq, 1, memory_order_release);
	pthread_mutex_unlock(&uslub_stat_lock);
}

/* What a thread's exit does to its state, done by the thread itself (thread_exit) or,
 * once it is gone, by a sweeping thread acting for it: every function on this path takes
 * the state it works for as an argument and never reads uslub_tls_thread. */
static void thread_teardown(struct uslub_thread *t)
{
	/* A drain of the idle state may be under way: it finishes first. */
	bool in = uslub_slow_enter(t);
	uslub_thread_flush(t);
	uslub_large_cache_drain(t);
	uslub_large_fold(t);
	/* Atomic: the idle drain peeks at it under the registry lock, not this one. */
	__atomic_store_n(&t->state, THREAD_DEAD, __ATOMIC_RELAXED);
	uslub_slow_exit(t, in);
	uslub_stats_fold(t);
	registry_del(t);
	struct page_desc *d = page_desc_of(t);
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	uslub_pages_free(d, d->order);
}

/* Runs when the thread exits (a pthread key destructor). glibc frees thread memory
 * (its DTV, other keys' data) after this, so the thread's later frees go the remote way
 * and its later allocations through the shared orphan state. */
static void thread_exit(void *arg)
{
	struct uslub_thread *t = arg;
	if (!t || t->state != THREAD_LIVE)
		return;
	uslub_tls_thread = &dead_thread;
	uslub_tls_state = NULL;
	thread_teardown(t);
	/* Outside malloc and any lock: a good time to go on with a pass. */
	uslub_threads_reap(SWEEP_BUDGET);
}

/* ---- reaping the states of threads that are gone --------------------------------- */

/* A state made when its thread can no longer run our key destructor is torn down by
 * someone else, after the thread is gone.
 *
 * How it happens: glibc calls key destructors in at most PTHREAD_DESTRUCTOR_ITERATIONS (4)
 * rounds. A thread whose first allocation comes from another key's destructor gets its state
 * there, and uslub_thread_create sets our key - which, in rounds 1 to 3, earns our destructor a
 * call in the next round. In the last round, or after the rounds (glibc's own thread freeres,
 * C++ thread_local destructors run late, a TLS destructor of a library unloaded meanwhile),
 * nothing will call it: 10,000 such threads left 2.5 GiB mapped behind them
 * (tests/test_thread_exit.c). Setting the key again from thread_exit-time paths is the same
 * re-arming and fails the same way - no round is left to honour it - and no later hook in a
 * thread's exit is ours to take (the state must outlive glibc's last free, which may be the
 * thread's own). So the state is reclaimed after the thread is gone.
 *
 * Gone, precisely: tgkill(tgid, tid, 0) fails with ESRCH, so the kernel has no such task
 * in our process any more and nothing of the thread runs: the state, its slabs' local
 * lists and its caches are quiescent and may be torn down from any thread, as thread_exit
 * would. The tid is the one gettid gave the thread when the state was made. A tid reused
 * by a newer thread only makes the old state wait for that one's exit too; it never lets
 * a live thread's state go. The thread's exit orders its last stores before the kernel
 * unhashes the task, which the failed tgkill observed (an acquire fence says so to the
 * compiler).
 *
 * When: looking costs a system call per state (about 1-2 us here), so a program whose threads
 * all exit normally should not pay it, and does not: its registry does not grow. A pass over
 * the registry starts once it has grown by half the states it held after the last pass (or the
 * fewest since), SWEEP_SLACK at least; each thread-state creation, each normal exit and each
 * replenisher wakeup then looks at SWEEP_BUDGET more states, until the pass reaches the end.
 * malloc_trim makes a whole pass at once. States left by gone threads are what makes the
 * registry grow past the trigger, so they never number much more than half the live threads'
 * plus SWEEP_SLACK, and each costs about three looks (geometric growth, amortised); a registry
 * that grows with live threads pays the same once. A just-joined thread may still exist for a
 * moment (the kernel wakes pthread_join before it unhashes the task); a later pass gets it.
 *
 * Serialised: one sweeper at a time (sweep_lock, taken with trylock - a busy sweeper is
 * as good as our own, and a sweep nested inside a sweep, say a malloc from liburcu, skips
 * rather than deadlocks); the state it takes is claimed by clearing its tid under the
 * registry lock, and a thread in thread_exit is alive, so never a sweeper's. Lock order:
 * sweep_lock, then liburcu's (synchronize_rcu in registry_del), then slab.c's order; fork
 * takes it first. A sweep holds no other lock of ours, so it may run from inside malloc,
 * where the caller holds none (the creation of a thread's state). */
static pthread_mutex_t sweep_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic unsigned long uslub_threads_reaped;
_Atomic unsigned long uslub_threads_drained;
unsigned uslub_threads_not_idle;

static bool thread_gone(const struct uslub_thread *t)
{
	return t->tid && tgkill(t->tgid, t->tid, 0) != 0 && errno == ESRCH;
}

/* Is the calling thread inside an urcu-bp read-side section? Read from urcu-bp's own
 * per-thread record (urcu/static/urcu-bp.h) rather than urcu_bp_read_ongoing(), which
 * registers a thread that never read: every new thread would then be registered from
 * inside malloc. Not registered means no section. */
static bool in_urcu_read_section(void)
{
	struct urcu_bp_reader *r = URCU_TLS(urcu_bp_reader);
	return r && (CMM_LOAD_SHARED(r->ctr) & URCU_BP_GP_CTR_NEST_MASK);
}

void uslub_threads_reap(unsigned budget)
{
	/* Tearing a state down waits for a grace period of urcu-bp (registry_del), the
	 * flavour a program may use too: inside its own read-side section the caller would
	 * wait for itself. It reaps next time instead. */
	if (in_urcu_read_section())
		return;
	unsigned long mark = __atomic_load_n(&sweep_mark, __ATOMIC_RELAXED);
	if (budget && !__atomic_load_n(&sweep_active, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&reg_count, __ATOMIC_RELAXED) <=
		mark + (mark / 2 > SWEEP_SLACK ? mark / 2 : SWEEP_SLACK))
		return;
	if (pthread_mutex_trylock(&sweep_lock) != 0)
		return;
	int saved = errno;
	uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
	if (!sweep_active || !budget) {
		__atomic_store_n(&sweep_active, true, __ATOMIC_RELAXED);
		sweep_cursor = uslub_registry;
	}
	pthread_mutex_unlock(&uslub_registry_lock);
	for (unsigned looked = 0; !budget || looked < budget; looked++) {
		uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
		struct uslub_thread *t = sweep_cursor;
		if (!t) {
			__atomic_store_n(&sweep_active, false, __ATOMIC_RELAXED);
			__atomic_store_n(&sweep_mark, reg_count, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&uslub_registry_lock);
			break;
		}
		sweep_cursor = t->reg_next;
		bool gone = thread_gone(t);
		if (gone)
			t->tid = 0;
		pthread_mutex_unlock(&uslub_registry_lock);
		if (gone) {
			atomic_thread_fence(memory_order_acquire);
			thread_teardown(t);
			atomic_fetch_add_explicit(&uslub_threads_reaped, 1, memory_order_relaxed);
		}
	}
	errno = saved;
	pthread_mutex_unlock(&sweep_lock);
}

/* ---- start-up and fork ---------------------------------------------------------- */

void uslub_threads_init(void)
{
	dead_thread.state = THREAD_DEAD;
	uslub_orphan_thread.state = THREAD_ORPHAN;
	uslub_pcp_init(&uslub_orphan_thread);
	registry_add(&uslub_orphan_thread);
	pthread_key_create(&thread_key, thread_exit);
}

/* The sweep is kept out while the process forks (startup.c takes every other lock). */
void uslub_threads_before_fork(void)
{
	USLUB_OUT(pthread_mutex_lock(&sweep_lock));
}

void uslub_threads_after_fork_parent(void)
{
	pthread_mutex_unlock(&sweep_lock);
}

/* In the child the other threads are gone. Their slabs stay frozen under their names and
 * are not reclaimed: a thread may have been anywhere in its own lock-free steps when the
 * fork came, and leaking its few slabs is safe where taking them back is not. So their
 * states are kept from the sweep (tid 0), and ours takes the child's ids, or the sweep
 * would find its parent's thread gone one day and tear down the state in use. */
void uslub_threads_after_fork_child(void)
{
	struct uslub_thread *me = uslub_tls_state ? uslub_tls_state : uslub_tls_thread;
	for (struct uslub_thread *t = uslub_registry; t; t = t->reg_next) {
		t->tgid = t == me ? getpid() : 0;
		t->tid = t == me ? gettid() : 0;
	}
	pthread_mutex_init(&sweep_lock, NULL);
	/* The background thread is gone too, maybe in the middle of a drain of ours. */
	atomic_store_explicit(&me->slow_lock, 0, memory_order_relaxed);
}

/* ---- giving back what idle threads hold ------------------------------------------ */

/* Below its sheaves a thread holds, per cache, a slab and a few partial slabs, and a page
 * cache and a medium-block cache: a parked thread would keep them forever (the kernel
 * drains idle CPUs' page lists from its vmstat work; jemalloc's tcache GC flushes an idle
 * thread's bins). The owner touches them only on slow paths, under its slow_lock, so the
 * background thread can take the lock - trylock: a busy thread is not idle - and give
 * them back: the slabs to their nodes (empty ones to the page allocator), the pages to
 * the buddy. The thread's next refill starts over with shared slabs. The sheaves need more
 * (below). */
static void drain_state(struct uslub_thread *t)
{
	uslub_thread_flush_slabs(t);
	/* Written only where set: a parked thread's state has most of cpu[] untouched. */
	for (unsigned i = 0, n = uslub_caches_in_use(); i < n; i++)
		if (t->cpu[i].shared_refills)
			t->cpu[i].shared_refills = 0;
	uslub_medium_drain_idle(t);
	uslub_large_fold(t);
}

/* A parked thread's sheaves. The owner's fast paths use them with plain loads and stores
 * and no lock (up to 28 objects a cache, and up to 46 MiB of medium blocks a thread), so
 * the drain may only take them from a thread that is provably outside the allocator and
 * will stay out of them. The evidence is the kernel's, read from outside, as RCU takes a
 * CPU that is idle or in user mode for quiescent without asking it; the fast paths pay
 * nothing for it:
 *
 *  1. Unpublish: the drain, holding slow_lock, sets `parked` and swaps the owner's
 *     uslub_tls_thread from the state to the shared empty state (a compare-and-swap on
 *     the owner's TLS word, found through tls_slot). Every fast path from now on finds
 *     empty sheaves and a closed free path, and goes to a slow path, which meets
 *     `parked` (uslub_thread_state) and waits for slow_lock.
 *  2. Look: /proc/self/task/TID/syscall says the thread is blocked in a system call, its
 *     program counter is not in our code, its uslub_tls_out is 0 (the call is not one the
 *     allocator made: every call of ours that may sleep or run code not ours is counted
 *     there, calls_out.h), and its stack holds no frame of a signal that interrupted our
 *     code (a handler that waits, as garbage collectors stop threads, with a fast path
 *     half done under it). A fast path makes no system call, so every fast path that read
 *     the state before the swap has finished, and the thread runs none until the call
 *     returns, after the swap, whose value it then reads.
 *  3. Take: the sheaves' objects to their slabs, the medium blocks through the thread's
 *     medium-block cache to their zones. The owner's next slow path publishes the state
 *     again with its sheaves empty and open.
 *
 * The look is also made before the swap, so a running thread is not disturbed; a second
 * look that fails leaves the thread unpublished (its next slow path publishes it again,
 * one slow path's cost), and the drain tries again a few periods later. A thread blocked
 * in vfork or clone is not taken: a vfork child runs on its memory and TLS meanwhile,
 * unseen. Before the swap, the thread must be the state's own: it exists, is blocked (its
 * memory cannot go while it is), and started before the state was made, so a newer thread
 * with the tid of one gone without our key destructor (thread.c, reaping) is not taken for
 * it. A thread running its key destructor has already swapped its word to the dead state,
 * so the swap fails, and its teardown waits for slow_lock. What is left: a state made in
 * the last round of key destructors, whose thread, seen blocked, wakes, exits and has its
 * stack unmapped between the look and the swap - a few instructions - would fault the swap.
 *
 * Not under valgrind, which runs the program's code on stacks of its own choosing, nor
 * ThreadSanitizer, which cannot see the kernel's word as an order; where /proc is not
 * mounted or a stack cannot be read, the sheaves stay as before. */
/* How far up a stack signal frames are looked for. */
#define STACK_LOOK (64 << 10)
/* Periods an idle thread's sheaves are tried for before the drain gives up until it is
 * active again. */
#define PARK_TRIES 4
_Atomic unsigned long uslub_threads_parked;

static bool parked_takes_possible(void)
{
#if defined(USLUB_TSAN)
	return false;
#else
	static int possible = -1;
	if (possible < 0) {
		struct uslub_os_task task;
		possible = !RUNNING_ON_VALGRIND && uslub_os_task_look(gettid(), &task) == 0;
	}
	return possible;
#endif
}

static bool sheaves_hold(const struct uslub_thread *t)
{
	for (unsigned i = 0, n = uslub_caches_in_use(); i < n; i++)
		if (__atomic_load_n(&t->cpu[i].sheaf_count, __ATOMIC_RELAXED))
			return true;
	for (unsigned k = 0; k < NR_MSHEAVES; k++)
		if (__atomic_load_n(&t->mcpu[k].sheaf_count, __ATOMIC_RELAXED))
			return true;
	return false;
}

/* A thread blocked in vfork (or a clone that may be one) lends its stack, memory and TLS
 * to a child that runs meanwhile, unseen by the thread's own /proc files. */
static bool lends_itself(long nr)
{
#ifdef SYS_clone3
	if (nr == SYS_clone3)
		return true;
#endif
#ifdef SYS_vfork
	if (nr == SYS_vfork)
		return true;
#endif
	return nr == SYS_clone;
}

/* Blocked in a system call of its own, not one of ours (uslub_tls_out, found beside its
 * uslub_tls_thread: both lie in our module's TLS block, at the same distance in every
 * thread), nor in a signal handler that interrupted our code; and the state's own thread. */
static bool thread_outside(const struct uslub_thread *t)
{
	struct uslub_os_task task;
	uintptr_t lo, hi;
	if (uslub_os_task_look(t->tid, &task) != 0 || task.start_ticks > t->made_ticks ||
	    task.syscall < 0 || lends_itself(task.syscall))
		return false;
	/* Each address made whole before the difference: a difference of two TLS offsets
	 * taken from the GOT is an instruction the linker cannot relax in a static program. */
	uintptr_t out_at = (uintptr_t)&uslub_tls_out, state_at = (uintptr_t)&uslub_tls_thread;
	__asm__("" : "+r"(out_at), "+r"(state_at));
	const unsigned *out = (const unsigned *)((uintptr_t)t->tls_slot + (out_at - state_at));
	if (__atomic_load_n(out, __ATOMIC_RELAXED))
		return false;
	uslub_os_own_text(&lo, &hi);
	return (task.pc < lo || task.pc >= hi) &&
	       !uslub_os_stack_interrupted(task.sp, lo, hi, STACK_LOOK);
}

/* Under slow_lock. True when done with: taken, or nothing to take. */
static bool take_sheaves(struct uslub_thread *t)
{
	if (__atomic_load_n(&t->parked, __ATOMIC_RELAXED) || !sheaves_hold(t))
		return true;
	if (!thread_outside(t))
		return false;
	__atomic_store_n(&t->parked, true, __ATOMIC_RELAXED);
	struct uslub_thread *expected = t;
	if (!__atomic_compare_exchange_n(t->tls_slot, &expected, &uslub_empty_thread, false,
					 __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
		/* Not published (its early objects), or exiting (the dead state). */
		__atomic_store_n(&t->parked, false, __ATOMIC_RELAXED);
		return true;
	}
	if (!thread_outside(t))
		return false;
	uslub_sheaves_flush(t, false);
	uslub_medium_drain_idle(t);
	/* The flush went in as the owner would (uslub_medium_enter marks it active). */
	atomic_store_explicit(&t->active, false, memory_order_relaxed);
	atomic_fetch_add_explicit(&uslub_threads_parked, 1, memory_order_relaxed);
	return true;
}

unsigned uslub_threads_drain_idle(void)
{
	struct uslub_thread *me = uslub_tls_state;
	unsigned drained = 0, busy = 0;
	bool takes = parked_takes_possible();
	uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
	for (struct uslub_thread *t = uslub_registry; t; t = t->reg_next) {
		/* tid 0: a state being torn down, or a forked child's copy of a parent's
		 * thread, whose slabs stay as they are (see above). */
		if (t == me || __atomic_load_n(&t->state, __ATOMIC_RELAXED) != THREAD_LIVE ||
		    !t->tid)
			continue;
		if (atomic_exchange_explicit(&t->slow_lock, 1, memory_order_acquire)) {
			busy++;
			continue;
		}
		/* Under the lock again: a teardown may have finished since the peek. */
		if (t->state != THREAD_LIVE) {
			atomic_store_explicit(&t->slow_lock, 0, memory_order_release);
			continue;
		}
		/* idle_ticks: 0-1 looks without a slow path; 2 idle, what lies below the
		 * sheaves given back; up to 2 + PARK_TRIES the sheaves tried; then done. */
		if (atomic_exchange_explicit(&t->active, false, memory_order_relaxed)) {
			t->idle_ticks = 0;
		} else if (t->idle_ticks < 2 + PARK_TRIES) {
			if (++t->idle_ticks == 2) {
				drain_state(t);
				drained++;
			}
			if (t->idle_ticks >= 2 && (!takes || take_sheaves(t)))
				t->idle_ticks = 2 + PARK_TRIES;
		}
		busy += t->idle_ticks < 2 + PARK_TRIES;
		atomic_store_explicit(&t->slow_lock, 0, memory_order_release);
	}
	uslub_threads_not_idle = busy;
	pthread_mutex_unlock(&uslub_registry_lock);
	atomic_fetch_add_explicit(&uslub_threads_drained, drained, memory_order_relaxed);
	return drained;
}
