/* Threads: the per-thread state (kmem_cache_cpu for every cache, and the order-0 page
 * cache that stands in for the kernel's per-CPU pagesets), its registry, its teardown,
 * start-up of the whole allocator, and fork. */
#include "internal.h"
#include "options.h"
#include "node.h"
#include "os.h"
#include "replenish.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <urcu/urcu-bp.h>

struct uslub_thread uslub_empty_thread = {.state = THREAD_EMPTY};
static struct uslub_thread dead_thread = {.state = THREAD_DEAD};
struct uslub_thread uslub_orphan_thread = {.state = THREAD_ORPHAN};
pthread_mutex_t uslub_orphan_lock = PTHREAD_MUTEX_INITIALIZER;

__thread struct uslub_thread *uslub_tls_thread __attribute__((tls_model("initial-exec"))) =
    &uslub_empty_thread;

pthread_mutex_t uslub_registry_lock = PTHREAD_MUTEX_INITIALIZER;
struct uslub_thread *uslub_registry;
pthread_mutex_t uslub_stat_lock = PTHREAD_MUTEX_INITIALIZER;

_Atomic int uslub_ready;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t thread_key;

/* ---- order-0 page cache ---------------------------------------------------------- */

struct page_desc *uslub_pcp_alloc(struct uslub_thread *t, unsigned node)
{
	if (!t->pcp_count) {
		/* Refill in one batch: one trip to the node lock for PCP_BATCH pages. Taken
		 * as one block when there is one, so the pages are neighbours. */
		struct page_desc *b = uslub_pages_alloc(node, 4, GFP_TRYLOCK | GFP_NOGROW);
		if (b) {
			for (unsigned i = 0; i < PCP_BATCH; i++)
				t->pcp[t->pcp_count++] = b + (PCP_BATCH - 1 - i);
		} else {
			struct page_desc *d = uslub_pages_alloc(node, 0, 0);
			if (!d)
				return NULL;
			t->pcp[t->pcp_count++] = d;
		}
	}
	struct page_desc *d = t->pcp[--t->pcp_count];
	d->order = 0;
	return d;
}

void uslub_pcp_free(struct uslub_thread *t, struct page_desc *d)
{
	if (t->pcp_count == PCP_HIGH)
		uslub_pcp_drain(t, PCP_HIGH - PCP_BATCH);
	t->pcp[t->pcp_count++] = d;
}

void uslub_pcp_drain(struct uslub_thread *t, unsigned keep)
{
	/* The oldest pages go back; the newest, warmest in the CPU cache, stay. */
	unsigned n = t->pcp_count > keep ? t->pcp_count - keep : 0;
	for (unsigned i = 0; i < n; i++)
		uslub_pages_free(t->pcp[i], 0);
	memmove(t->pcp, t->pcp + n, (t->pcp_count - n) * sizeof(t->pcp[0]));
	t->pcp_count -= n;
}

/* ---- thread state ---------------------------------------------------------------- */

static unsigned thread_order(void)
{
	return uslub_get_order(sizeof(struct uslub_thread));
}

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
 * key in its constructor, before the program's). Neither is ever called from inside malloc:
 * readers are the dump, the live-view thread and uslub_stats_print, and the writer that
 * waits is the thread-exit destructor, outside any allocator lock. */
static void registry_add(struct uslub_thread *t)
{
	pthread_mutex_lock(&uslub_registry_lock);
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
	pthread_mutex_lock(&uslub_registry_lock);
	if (t->reg_prev)
		__atomic_store_n(&t->reg_prev->reg_next, t->reg_next, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&uslub_registry, t->reg_next, __ATOMIC_RELEASE);
	if (t->reg_next)
		t->reg_next->reg_prev = t->reg_prev;
	pthread_mutex_unlock(&uslub_registry_lock);
	/* A reader may still stand on t: wait until every read-side section that could have
	 * seen it has ended before the caller frees it. */
	urcu_bp_synchronize_rcu();
}

struct uslub_thread *uslub_thread_create(void)
{
	unsigned order = thread_order();
	struct page_desc *d = uslub_pages_alloc(0, order, 0);
	if (!d)
		return NULL;
	bool cold = d->flags & PF_COLD;
	for (size_t i = 1; i < (1UL << order); i++)
		d[i].head = d;
	__atomic_store_n(&d->kind, PAGE_META, __ATOMIC_RELAXED);
	d->order = (uint8_t)order;
	d->head = d;
	struct uslub_thread *t = page_address(d);
	if (!cold)
		memset(t, 0, sizeof(*t));
	t->state = THREAD_LIVE;
	t->node = uslub_node_current();
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		t->cpu[i].sheaf_cap = (uint16_t)uslub_caches[i].sheaf_capacity;
	registry_add(t);
	uslub_tls_thread = t;
	/* May allocate (for keys past the first 32) and so come back here: by now the
	 * thread's state is in place, so the nested call takes the ordinary path. */
	pthread_setspecific(thread_key, t);
	return t;
}

_Atomic unsigned long uslub_fold_seq;

/* Folding counters into the caches is done under stat_lock so two exiting threads do
 * not lose each other's counts. The thread's own counters are zeroed as they are added,
 * and the fold runs before the thread leaves the registry, so a reader counts each event
 * once; uslub_fold_seq, odd during the fold, tells a reader that raced with it to retry. */
void uslub_stats_fold(struct uslub_thread *t)
{
	pthread_mutex_lock(&uslub_stat_lock);
	atomic_fetch_add_explicit(&uslub_fold_seq, 1, memory_order_acq_rel);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		for (unsigned k = 0; k < USLUB_NR_STATS; k++) {
			__atomic_fetch_add(&uslub_caches[i].stat[k], t->cpu[i].stat[k],
					   __ATOMIC_RELAXED);
			__atomic_store_n(&t->cpu[i].stat[k], 0, __ATOMIC_RELAXED);
		}
	}
	atomic_fetch_add_explicit(&uslub_fold_seq, 1, memory_order_release);
	pthread_mutex_unlock(&uslub_stat_lock);
}

/* Runs when the thread exits (a pthread key destructor). glibc frees thread memory
 * (its DTV, other keys' data) after this, so the thread's later frees go the remote way
 * and its later allocations through the shared orphan state. */
static void thread_exit(void *arg)
{
	struct uslub_thread *t = arg;
	if (!t || t->state != THREAD_LIVE)
		return;
	uslub_thread_flush(t);
	uslub_large_cache_drain(t);
	uslub_tls_thread = &dead_thread;
	t->state = THREAD_DEAD;
	uslub_stats_fold(t);
	registry_del(t);
	struct page_desc *d = page_desc_of(t);
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	uslub_pages_free(d, d->order);
}

/* ---- start-up -------------------------------------------------------------------- */

extern char **environ;
void uslub_pages_init(void);

/* When the first call comes before libc has set `environ` (from the dynamic loader),
 * the settings are read from /proc/self/environ into this buffer instead. */
static char env_buf[8192];
static char *env_ptrs[128];

static char **read_proc_environ(void)
{
	int saved = errno;
	size_t len = 0, n = 0;
	int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r;
		while (len < sizeof(env_buf) - 1 &&
		       (r = read(fd, env_buf + len, sizeof(env_buf) - 1 - len)) > 0)
			len += (size_t)r;
		close(fd);
	}
	env_buf[len] = '\0';
	for (size_t i = 0; i < len && n < sizeof(env_ptrs) / sizeof(env_ptrs[0]) - 1;) {
		env_ptrs[n++] = env_buf + i;
		while (i < len && env_buf[i])
			i++;
		i++;
	}
	env_ptrs[n] = NULL;
	errno = saved;
	return env_ptrs;
}

void uslub_init_slow(void)
{
	pthread_mutex_lock(&init_lock);
	if (atomic_load_explicit(&uslub_ready, memory_order_relaxed)) {
		pthread_mutex_unlock(&init_lock);
		return;
	}
	uslub_options_init(environ ? environ : read_proc_environ());
	uslub_os_fault_init(uslub_config.fault);
	uslub_node_init(uslub_config.numa);
	uslub_pages_init();
	uslub_caches_init();
	uslub_replenish_init();
	registry_add(&uslub_orphan_thread);
	pthread_key_create(&thread_key, thread_exit);
	atomic_store_explicit(&uslub_ready, 1, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	if (uslub_config.verbose)
		uslub_options_print(2);
}

/* ---- fork ------------------------------------------------------------------------ */

/* Every lock is taken before fork, in the documented order, so the child inherits none
 * held by a thread that no longer exists. */
static void fork_prepare(void)
{
	urcu_bp_before_fork();
	pthread_mutex_lock(&uslub_orphan_lock);
	pthread_mutex_lock(&uslub_registry_lock);
	pthread_mutex_lock(&uslub_stat_lock);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		for (unsigned n = 0; n < MAX_NODES; n++)
			pthread_mutex_lock(&uslub_caches[i].node[n].list_lock);
	uslub_pages_lock_all();
	uslub_huge_lock();
}

static void fork_parent(void)
{
	uslub_huge_unlock();
	uslub_pages_unlock_all();
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		for (unsigned n = 0; n < MAX_NODES; n++)
			pthread_mutex_unlock(&uslub_caches[i].node[n].list_lock);
	pthread_mutex_unlock(&uslub_stat_lock);
	pthread_mutex_unlock(&uslub_registry_lock);
	pthread_mutex_unlock(&uslub_orphan_lock);
	urcu_bp_after_fork_parent();
}

/* In the child the other threads are gone. Their slabs stay frozen under their names and
 * are not reclaimed: a thread may have been anywhere in its own lock-free steps when the
 * fork came, and leaking its few slabs is safe where taking them back is not. */
static void fork_child(void)
{
	uslub_huge_reinit_lock();
	uslub_pages_reinit_locks();
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		for (unsigned n = 0; n < MAX_NODES; n++)
			pthread_mutex_init(&uslub_caches[i].node[n].list_lock, NULL);
	pthread_mutex_init(&uslub_stat_lock, NULL);
	pthread_mutex_init(&uslub_registry_lock, NULL);
	pthread_mutex_init(&uslub_orphan_lock, NULL);
	uslub_replenish_after_fork_child();
	/* Unlocks what urcu_bp_before_fork took, and drops the other threads' readers. */
	urcu_bp_after_fork_child();
}

/* pthread_atfork allocates, so it is registered from a constructor, once the allocator
 * is ready, never from inside malloc. */
__attribute__((constructor)) static void uslub_constructor(void)
{
	uslub_init();
	uslub_node_discover();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
