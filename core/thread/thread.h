/* The thread layer: each thread's state (thread.c) and its teardown (flush.c), the
 * sheaves (sheaf.c) and the barns behind them (barn.c), the allocation and free slow
 * paths below the classification (alloc.c, free.c), and every lock at once (lock.c). */
#ifndef USLUB_THREAD_H
#define USLUB_THREAD_H

#include "hooks.h"
#include "page/page.h"
#include "slab/slab.h"
#include "types.h"

#pragma GCC visibility push(hidden)

/* ---- thread states (thread.c, flush.c) --------------------------------------------- */

extern pthread_mutex_t uslub_registry_lock;
extern struct uslub_thread *uslub_registry;
extern pthread_mutex_t uslub_stat_lock;

void *uslub_slab_alloc_slow(size_t size);
/* free of p, a live object of slab s (classified, api/lookup.c): into the thread's sheaf,
 * opened if need be; `caller` is the program's call site. */
void uslub_object_free(void *p, struct page_desc *s, void *caller);
/* The same below the sheaf: the slab's local list for its owner, else its remote list. */
void uslub_slab_object_free(struct uslub_cache *c, struct page_desc *s, void *p,
			    struct uslub_thread *t);
/* An object of class cls for a request of `size` bytes (what debug caches keep). */
void *uslub_slab_alloc_class(unsigned cls, size_t size);
/* ... with the program's call site given (the object caches' entry points). */
void *uslub_slab_alloc_class_at(unsigned cls, size_t size, void *caller);
/* A thread's exit: its sheaves (closed), slabs and page cache back. */
void uslub_thread_flush(struct uslub_thread *t);
/* The same without the sheaves (an idle thread's, thread.c). */
void uslub_thread_flush_slabs(struct uslub_thread *t);
/* ... the slab and partial slabs of cache i alone (an object cache's shrink). */
void uslub_thread_flush_cache_slabs(struct uslub_thread *t, unsigned i);
/* The calling thread's state, made at its first allocation. uslub_tls_thread points to
 * the shared empty state until the thread needs one of its sheaves: its first objects of
 * each cache are early objects (sheaf.c), and until then the fast paths read the empty
 * state's cpu[] - every sheaf empty, every magic 0 - rather than the thread's own, whose
 * pages then cost nothing: on some kernels a first read of an anonymous page takes a page
 * of memory as a write does. uslub_thread_state: made if need be (NULL when no memory is
 * left), not published; uslub_thread_create: published too. */
extern __thread struct uslub_thread *uslub_tls_state;
struct uslub_thread *uslub_thread_state(void);
struct uslub_thread *uslub_thread_create(void);
/* uslub_large_alloc and _free, with the thread's state made first for a medium block. */
void *uslub_thread_large_alloc(size_t size, size_t align, bool zero);
void uslub_thread_large_free(struct page_desc *d, void *p);
/* Tear down the states of threads that are gone without their key destructor having run:
 * up to `budget` states looked at, or 0 for one pass over the whole registry. Takes no
 * lock of the caller's; skipped while another thread sweeps. */
void uslub_threads_reap(unsigned budget);
extern _Atomic unsigned long uslub_threads_reaped; /* states torn down that way */
/* Frees from threads whose state is gone go through here, serialised. */
extern pthread_mutex_t uslub_orphan_lock;
extern struct uslub_thread uslub_orphan_thread;

/* Every lock, in the essay's order (lock.c): fork and the heap walker. */
void uslub_lock_all(void);
void uslub_unlock_all(void);
/* thread.c's part of start-up and fork. */
void uslub_threads_init(void);
void uslub_threads_before_fork(void);
void uslub_threads_after_fork_parent(void);
void uslub_threads_after_fork_child(void);
/* Give back what idle threads hold: their slabs (to the node lists, or the page
 * allocator when empty), page caches and medium-block caches, and the sheaves of those
 * parked in a system call. Called by the background thread once a period: a thread that
 * ran no slow path for two calls in a row is idle. Returns the states drained. */
unsigned uslub_threads_drain_idle(void);
extern _Atomic unsigned long uslub_threads_drained; /* states drained that way */
extern unsigned uslub_threads_not_idle; /* live states the last drain left: not idle yet */
/* States whose sheaves it took while their thread was parked (thread.c). */
extern _Atomic unsigned long uslub_threads_parked;
void uslub_stats_fold(struct uslub_thread *t);
/* A counter of the fold set to v, written only where it is not v already: an exiting
 * thread's fold then leaves the cache_cpus it never used unwritten, and their pages of its
 * state untouched (page/zero.c). */
static inline void uslub_stat_clear(uint64_t *counter, uint64_t v)
{
	if (__atomic_load_n(counter, __ATOMIC_RELAXED) != v)
		__atomic_store_n(counter, v, __ATOMIC_RELAXED);
}

/* ---- the sheaves and the barns (sheaf.c, barn.c) ----------------------------------- */

/* The barn (Linux 6.18): per node and cache, full sheaves that threads left there when
 * their own overflowed, for any thread of the node whose sheaf ran empty - one thread's
 * surplus feeds another's demand with one lock round trip per sheaf, and no slab is
 * touched. Sheaves are copied in and out whole (slab.c, section 6). It holds up to
 * BARN_BYTES of objects, at least BARN_MIN_SHEAVES sheaves and at most BARN_MAX objects.
 * `count` is read without the lock to fail fast. BARN_BYTES bounds only caches of
 * objects over 4 MiB / BARN_MAX (4 KiB); at 1 MiB a program allocating 1000 blocks of
 * 4 KiB and freeing them sent 3/4 of them back to their slabs, and its slabs to the page
 * allocator, to be made again: 420 instructions a malloc/free pair against 74 now
 * (tcmalloc 84, whose transfer cache holds 64 batches of a class). */
#define BARN_BYTES	 (4UL << 20)
#define BARN_MIN_SHEAVES 8
#define BARN_MAX	 (36 * SHEAF_MAX)
struct barn {
	/* A spinning lock, as the kernel's barn has: it is held for a copy of at most a
	 * sheaf, and a mutex's lock and unlock were 106 instructions of the 470 a sheaf's
	 * round trip through the barn cost (batches of 1000 at 64 B). */
	_Atomic uint32_t lock;
	uint32_t count; /* objects held */
	uint32_t limit; /* a whole number of the cache's sheaves */
	uint32_t low;	/* fewest objects held since the last decay: those sat unused */
	void **objects; /* `limit` slots, in the same block of pages */
	/* barn_get and barn_put, counted under the lock in the line it already writes:
	 * an atomic add to the cache's counters cost as much as the lock itself. */
	uint64_t gets, puts;
};
/* Barns a node has: a thread puts into its own (given round robin, t->barn_shard) and
 * gets from it, from the others only once its own slabs have no free object left
 * (sheaf.c, own_stock). One barn a node was where two threads met:
 * replacing blocks of up to 8 KiB (sheaves of 4-8 KiB objects hold a few, so a thread
 * reaches the barn every few operations), two threads ran at 0.57x one
 * (tools/bench/results/sheaves-barns.md). A producer still finds what its consumer put
 * in another. */
#define BARN_SHARDS 2
#define NR_BARNS    (MAX_NODES * BARN_SHARDS)
/* Every cache's barn of slot `slot` (node slot / BARN_SHARDS), or NULL before its first
 * barn_put. */
extern struct barn *uslub_barns[NR_BARNS];
/* Does any barn hold objects? (A racy look, for the background thread's sleep.) */
bool uslub_barns_held(void);

/* The sheaf's slow paths (sheaf.c): a free of p into a full sheaf (or a closed one),
 * cc being the calling thread's cache_cpu of p's class; malloc's refill is
 * uslub_slab_alloc_slow. */
void uslub_sheaf_overflow(void *p, struct cache_cpu *cc);

/* An object popped from a thread freelist lies outside the slab: its free pointer was
 * overwritten (slab.c, section 7). */
__attribute__((noreturn)) void uslub_freelist_corrupt(struct cache_cpu *cc, void *object);
/* free of an object already free (its mark says so): reported, the program stops. */
__attribute__((noreturn)) void uslub_double_free(void *p, struct page_desc *s);

/* Sends the objects in t's sheaves back to their slabs (and the medium sheaves' blocks to
 * the medium-block cache); `final` also closes the sheaves (thread exit). */
void uslub_sheaves_flush(struct uslub_thread *t, bool final);

/* ---- the medium sheaves (medium_sheaf.c) --------------------------------------------- */

/* malloc of 8 KiB < size <= USLUB_MAX_FAST when the size's medium sheaf is empty: the
 * sheaf refilled from the thread's medium-block cache and a block of it, or a block the
 * general way (slab/large.c) and then the refill. NULL where the thread has no sheaf for
 * the size (no state yet, or no room for it: medium_sheaf.c), and where the general
 * way found no memory: the caller takes the medium-block cache's own path. */
void *uslub_msheaf_alloc(size_t size);
/* free of medium block p (d its descriptor: a live, unguarded large block, p its start)
 * that the fast path did not take: onto the thread's sheaf, opened if need be. False if
 * the block or the thread has no sheaf for it. */
bool uslub_msheaf_free(void *p, struct page_desc *d);
/* free's fast path found medium sheaf cc full. */
void uslub_msheaf_overflow(void *p, struct cache_cpu *cc);
void uslub_msheaves_flush(struct uslub_thread *t, bool final);
/* The shrink hook (hooks.h): the calling thread's medium sheaves, then its medium-block
 * cache and the depots, back to the zones. */
bool uslub_msheaves_shrink(void);

void uslub_slab_free_remote(struct uslub_cache *c, struct page_desc *s, void *p,
			    struct uslub_thread *t);
/* The same for `count` free objects of s linked from head to tail (their links set, their
 * marks on): one compare-and-swap for all of them (kmem_cache_free_bulk's detached
 * freelist). */
void uslub_slab_free_chain(struct uslub_cache *c, struct page_desc *s, void *head, void *tail,
			   unsigned count, struct uslub_thread *t);
/* An object for a thread whose sheaf of cls is empty: the barn's (NULL when it has
 * none, with the share of the sheaf to refill in *half), else the slab layer's (alloc.c,
 * under the slow-path lock), with the sheaf refilled on the way. */
void *uslub_sheaf_refill_barn(struct uslub_thread *t, unsigned cls, unsigned *half);
/* What a sheaf of c holds when it opens. A sheaf of objects above SHEAF_SMALL bytes opens
 * at SHEAF_START and grows by SHEAF_GROW, up to the cache's sheaf_capacity, each time its
 * slow paths turn from one end to the other (sheaf.c, sheaf_turn): a working set replaced
 * at random walks its sheaf up and down and needs the whole capacity to keep off the
 * barn; a producer only ever refills and a consumer only ever spills, and every object a
 * sheaf of theirs holds is one more the program's queues do not, in each cache
 * (tools/bench/results/sheaf-start.md). */
#define SHEAF_SMALL 256
#define SHEAF_START 8
#define SHEAF_GROW  4
static inline unsigned uslub_sheaf_start(const struct uslub_cache *c)
{
	unsigned cap = c->sheaf_capacity;
	return c->size > SHEAF_SMALL && cap > SHEAF_START ? SHEAF_START : cap;
}
/* A live thread's sheaf of a class opens at the class's first slow path: its capacity
 * is 0 until then, which sends the fast paths here. Closed ones (thread exit) stay so:
 * the exiting thread's state is no longer live. */
static inline void uslub_sheaf_open(struct uslub_thread *t, struct cache_cpu *cc, unsigned cls)
{
	if (unlikely(!cc->sheaf_cap) && t->state == THREAD_LIVE) {
		cc->sheaf_cap = (uint16_t)uslub_sheaf_start(&uslub_caches[cls]);
		/* free's fast path opens with the sheaf (debug caches have none). */
		if (cc->sheaf_cap)
			cc->magic = uslub_lookup.magic[cls];
	}
}
void *uslub_sheaf_refill(struct uslub_thread *t, unsigned cls, unsigned half);
/* A live thread's first EARLY_OBJECTS objects of a cache with sheaves come one at a time
 * from the node's partial slabs while its sheaf of the cache is closed, so that nothing
 * of the cache's cache_cpu is written (sheaf.c). A state not published yet has every
 * sheaf closed, and its cpu[cls] is not even read (see uslub_tls_state). */
#define EARLY_OBJECTS 3
static inline bool uslub_early_due(const struct uslub_thread *t, unsigned cls)
{
	return t->state == THREAD_LIVE && t->early[cls] < EARLY_OBJECTS &&
	       uslub_caches[cls].sheaf_capacity &&
	       (t != uslub_tls_thread || !t->cpu[cls].sheaf_cap);
}
/* One early object, or NULL when the node has no partial slab of cls (the sheaf then
 * opens, and its first refill makes one). */
void *uslub_alloc_early(struct uslub_thread *t, unsigned cls);
/* The thread's slab layer (alloc.c's ___slab_alloc): one object, the rest of a freelist
 * left in cc->freelist. */
void *uslub_alloc_refill(struct uslub_thread *t, unsigned cls);
/* Every barn's objects back to their slabs (malloc_trim, thread exit of the last user). */
void uslub_barns_flush(void);
/* Barn decay: objects a barn held for a whole period (BARN_DECAY_MS) without a thread
 * taking them go back to their slabs, so their slabs can empty. At most once a period;
 * called from the sheaves' slow paths and the background thread. */
#define BARN_DECAY_MS 1000
void uslub_barns_decay(void);
void uslub_barns_lock_all(void);
void uslub_barns_unlock_all(void);

/* Slot's barns, made at its first barn_put (sheaf.c); NULL when no memory is left. */
struct barn *uslub_barns_make(unsigned slot);
/* Cache c's barn b of slot `slot` (an object cache's) given its slots, at its first
 * barn_put; false when no memory is left. */
bool uslub_barn_grow(struct uslub_cache *c, unsigned slot, struct barn *b);
/* Cache c's barns emptied into its slabs (an object cache's shrink). */
void uslub_barns_flush_cache(struct uslub_cache *c);
/* A waiter spins while the holder copies; past a few dozen tries the holder was likely
 * preempted (more threads than cores), and the waiter gives up its time slice. */
static inline void uslub_barn_lock(struct barn *b)
{
	if (likely(!atomic_exchange_explicit(&b->lock, 1, memory_order_acquire)))
		return;
	uslub_lock_waited(USLUB_LOCK_BARN);
	while (atomic_exchange_explicit(&b->lock, 1, memory_order_acquire)) {
		for (unsigned spins = 0; atomic_load_explicit(&b->lock, memory_order_relaxed);)
			if (++spins < 64) {
				cpu_relax();
			} else {
				uslub_os_yield();
				spins = 0;
			}
	}
}
static inline void uslub_barn_unlock(struct barn *b)
{
	atomic_store_explicit(&b->lock, 0, memory_order_release);
}

/* n free objects of c (marked free, counted in their slabs' inuse) back to their slabs,
 * the array consumed: kmem_cache_free_bulk, for a sheaf or a barn's decay. */
void uslub_flush_objects(struct uslub_cache *c, struct uslub_thread *t, void **objects, unsigned n);

#pragma GCC visibility pop

#endif
