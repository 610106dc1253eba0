/* SLUB's stat items, one list. The X-macro generates the enum that indexes the per-thread
 * counter arrays, the names in the text table and the JSON keys, and the merge, so a new
 * counter is one line here. Counters live in the thread's struct and are bumped without
 * atomics; a thread's counters are folded into its cache when it exits, and a dump adds
 * up the cache's folded counters and those of the threads still running. */
#ifndef USLUB_STAT_ITEMS_H
#define USLUB_STAT_ITEMS_H

#include "uslub_config.h"

#include <stdatomic.h>
#include <stddef.h>

/* clang-format off: a table, aligned by hand */
#define USLUB_STAT_ITEMS(X)                                                                        \
	X(ALLOC_FASTPATH, alloc_fastpath)	    /* served from the thread's sheaf */           \
	X(ALLOC_SLOWPATH, alloc_slowpath)	    /* freelist empty: took the slow path */       \
	X(FREE_FASTPATH, free_fastpath)		    /* freed into the thread's sheaf */            \
	X(FREE_SLOWPATH, free_slowpath)		    /* sheaf full (or off): the slow path */       \
	X(FREE_FROZEN, free_frozen)		    /* ... into a slab another thread holds */     \
	X(FREE_ADD_PARTIAL, free_add_partial)	    /* a full slab went to the node list */        \
	X(FREE_REMOVE_PARTIAL, free_remove_partial) /* an empty slab left the node list */         \
	X(ALLOC_FROM_PARTIAL, alloc_from_partial)   /* slab taken from the node list */            \
	X(ALLOC_SLAB, alloc_slab)		    /* new slab from the page allocator */         \
	X(ALLOC_REFILL, alloc_refill)		    /* freelist refilled from the same slab */     \
	X(ALLOC_NODE_MISMATCH, alloc_node_mismatch)                                                \
	X(FREE_SLAB, free_slab)			  /* slab's pages given back */                    \
	X(CPUSLAB_FLUSH, cpuslab_flush)		  /* thread slabs flushed (exit, trim) */          \
	X(DEACTIVATE_FULL, deactivate_full)	  /* thread slab was full when dropped */          \
	X(DEACTIVATE_EMPTY, deactivate_empty)	  /* ... was empty */                              \
	X(DEACTIVATE_TO_HEAD, deactivate_to_head) /* ... went to the node partial list */          \
	X(DEACTIVATE_TO_TAIL, deactivate_to_tail)                                                  \
	X(DEACTIVATE_REMOTE_FREES, deactivate_remote_frees) /* ... had remote frees */             \
	X(DEACTIVATE_BYPASS, deactivate_bypass)                                                    \
	X(ORDER_FALLBACK, order_fallback)	    /* preferred order not at hand */              \
	X(HIGH_ORDER_STALL, high_order_stall)	    /* blocked or grew for a high order */         \
	X(CMPXCHG_DOUBLE_FAIL, cmpxchg_double_fail) /* a free's CAS lost a race */                 \
	X(CPU_PARTIAL_ALLOC, cpu_partial_alloc)	    /* slab taken from the thread partial list */  \
	X(CPU_PARTIAL_FREE, cpu_partial_free)	    /* a free put a full slab on it */             \
	X(CPU_PARTIAL_NODE, cpu_partial_node)	    /* slabs moved node -> thread partial */       \
	X(CPU_PARTIAL_DRAIN, cpu_partial_drain)	    /* thread partial list drained to node */      \
	X(SHEAF_FLUSH, sheaf_flush)		    /* sheaf objects sent back to their slabs */   \
	X(SHEAF_REFILL, sheaf_refill)		    /* sheaf filled from the thread's slab */      \
	X(BARN_GET_FAIL, barn_get_fail)		    /* sheaf empty, and the barn too */            \
	X(SAMPLE_REQUESTS, sample_requests)	    /* slow-path allocations whose size ... */     \
	X(SAMPLE_REQUESTED_BYTES, sample_requested_bytes) /* ... was recorded: their sum */
/* Counted per cache only, never per thread (cache_cpu has no room for them): the barn's,
 * gets and puts counted in the barn under its lock, the rest with an atomic add, and two
 * kept for the dump's readers. */
#define USLUB_CACHE_STAT_ITEMS(X)                                                                  \
	X(ALLOC_SHEAF, alloc_sheaf)	/* = alloc_fastpath: the sheaf is the fast path */         \
	X(FREE_SHEAF, free_sheaf)	/* = free_fastpath */                                      \
	X(BARN_GET, barn_get)		/* a full sheaf taken from the node's barn */              \
	X(BARN_PUT, barn_put)		/* a full sheaf left in the barn */                        \
	X(BARN_PUT_FAIL, barn_put_fail) /* ... the barn was full: flushed to the slabs */          \
	X(BARN_FLUSH, barn_flush)	/* barn objects sent back to their slabs (trim) */
/* clang-format on */

enum uslub_stat_item {
#define X(id, name) USLUB_STAT_##id,
	USLUB_STAT_ITEMS(X)
	/* cache_cpu's counters end here */
	USLUB_NR_THREAD_STATS,
	USLUB_STAT_CACHE_FIRST = USLUB_NR_THREAD_STATS - 1,
	USLUB_CACHE_STAT_ITEMS(X)
#undef X
	    USLUB_NR_STATS
};

extern const char *const uslub_stat_names[USLUB_NR_STATS];

/* Counters folded from exiting threads change under this sequence count (odd while a fold
 * runs), so a reader that walks the registry under RCU can tell it raced with one. */
extern _Atomic unsigned long uslub_fold_seq;

/* A ThreadSanitizer build (types.h's objects_of says why it is told apart). */
#if defined(__SANITIZE_THREAD__)
#define USLUB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define USLUB_TSAN 1
#endif
#endif

/* A thread's own counter, which a statistics reader loads (relaxed) while the thread runs.
 * Under ThreadSanitizer the store is a relaxed atomic one too, the same instruction on
 * x86, so the race the dump accepts by design is not reported; elsewhere a plain one,
 * which the compiler folds into the fast paths. */
#ifdef USLUB_TSAN
#define uslub_own_store(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)
#else
#define uslub_own_store(field, v) ((field) = (v))
#endif

#if USLUB_STATS_ENABLED
#define uslub_stat(cc, item)                                                                       \
	uslub_own_store((cc)->stat[USLUB_STAT_##item], (cc)->stat[USLUB_STAT_##item] + 1)
#define uslub_stat_add(cc, item, n)                                                                \
	uslub_own_store((cc)->stat[USLUB_STAT_##item], (cc)->stat[USLUB_STAT_##item] + (n))
#else
#define uslub_stat(cc, item)	    ((void)(cc))
#define uslub_stat_add(cc, item, n) ((void)(cc), (void)(n))
#endif

#endif
