/* lock_stat, as the kernel's CONFIG_LOCK_STAT counts it, reduced to what a user needs to
 * see where threads meet: for each kind of lock, how often a thread found it held and
 * waited for it (waits), and how often a try found it held and gave up (trylock
 * failures). Only contention is counted: an uncontended take is a trylock that succeeds,
 * the same one compare-and-swap as a lock. The dump and the JSON show them ("locks"). */
#ifndef USLUB_LOCK_STAT_H
#define USLUB_LOCK_STAT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* clang-format off: a table, aligned by hand */
#define USLUB_LOCK_ITEMS(X)                                                                        \
	X(ZONE, zone)	      /* a zone's page allocator (page/) */                                \
	X(LIST, list_lock)    /* a cache's partial list on a node (slab/) */                       \
	X(BARN, barn)	      /* a cache's barn on a node (thread/) */                             \
	X(DEPOT, depot)	      /* a node's medium-block depot (slab/medium.c) */                    \
	X(HUGE, huge)	      /* the huge blocks' table and cache (page/huge.c) */                 \
	X(REGISTRY, registry) /* the thread registry (thread/thread.c) */                          \
	X(ORPHAN, orphan)     /* frees of threads whose state is gone (thread/) */                 \
	X(SLOW, slow_lock)    /* a thread's slow paths against the idle drain (thread/) */
/* clang-format on */

enum uslub_lock_kind {
#define X(id, name) USLUB_LOCK_##id,
	USLUB_LOCK_ITEMS(X)
#undef X
	    USLUB_NR_LOCKS
};

struct uslub_lock_stat {
	_Atomic uint64_t waits;
	_Atomic uint64_t trylock_failures;
};

extern struct uslub_lock_stat uslub_lock_stats[USLUB_NR_LOCKS];
extern const char *const uslub_lock_names[USLUB_NR_LOCKS];

static inline void uslub_lock_waited(enum uslub_lock_kind k)
{
	atomic_fetch_add_explicit(&uslub_lock_stats[k].waits, 1, memory_order_relaxed);
}

/* Reads of the lock word before a try: a held lock is watched in the cache, not bounced
 * between the waiters' caches by compare-and-swaps (glibc's adaptive mutexes spin so). */
#define USLUB_LOCK_SPINS 64

void uslub_lock_contended(pthread_mutex_t *m, enum uslub_lock_kind k);

/* pthread_mutex_lock, with a wait counted when the lock was held. A held lock is spun on
 * for a while first: every critical section here is a few hundred instructions, and the
 * futex sleep and wake that pthread_mutex_lock makes of a wait cost two system calls
 * (tools/bench/results/medium-blocks.md). */
static inline void uslub_lock(pthread_mutex_t *m, enum uslub_lock_kind k)
{
	if (__builtin_expect(pthread_mutex_trylock(m) != 0, 0))
		uslub_lock_contended(m, k);
}

/* pthread_mutex_trylock, with a failure counted. */
static inline bool uslub_trylock(pthread_mutex_t *m, enum uslub_lock_kind k)
{
	if (__builtin_expect(pthread_mutex_trylock(m) != 0, 0)) {
		atomic_fetch_add_explicit(&uslub_lock_stats[k].trylock_failures, 1,
					  memory_order_relaxed);
		return false;
	}
	return true;
}

#pragma GCC visibility pop

#endif
