/* A snapshot of the statistics (snapshot.c), which the dump and the live page write out
 * (emit.c). Inside core/stats/ only. */
#ifndef USLUB_STATS_SNAPSHOT_H
#define USLUB_STATS_SNAPSHOT_H

#include "thread/thread.h"
#include "os/os.h"
#include "uslub.h"

#include "os/print.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define NORDERS (USLUB_MAX_ORDER + 1)

struct cache_snap {
	uint64_t stat[USLUB_NR_STATS];
	uint64_t slabs, by_order[NORDERS], total, active, partial[MAX_NODES];
	uint64_t memory;     /* bytes in its slabs */
	uint64_t handed_out; /* active objects times the object size */
	uint64_t requested;  /* estimated from the samples; 0 without any */
};

struct node_snap {
	uint64_t free_blocks[NORDERS];
	uint64_t free_pages, warm_free_pages, grows, nowait_misses, released, release_calls;
	uint64_t regions, reclaims, runs, moved, extent_hits, extent_flushes;
	uint64_t any_partial_calls, any_partial_tried, any_partial_again, remote_slabs;
	uint64_t remote_objects, local_partial_hits;
	/* get_any_partial's visit order (node.h), nr_nodes() - 1 entries */
	uint64_t search_order[MAX_NODES];
};

struct snap {
	struct cache_snap c[USLUB_NR_CACHES];
	unsigned nr_caches; /* slots in use: c[0 .. nr_caches) */
	uint64_t rcu_pending_slabs, rcu_pending_objects, rcu_batches, rcu_freed_objects;
	struct node_snap n[MAX_NODES];
	struct uslub_totals tot;
	uint64_t threads;			      /* thread states in the registry */
	uint64_t pcp[USLUB_NR_PCP_STATS][PCP_ORDERS]; /* threads' page caches, by order */
	uint64_t pcp_pages;			      /* pages in them now */
	uint64_t medium[USLUB_NR_MEDIUM_STATS];	      /* threads' medium-block caches */
	uint64_t medium_pages;			      /* pages in them now */
	int64_t large_unfolded; /* large blocks' bytes counted in the threads (page/usage.c) */
	uint64_t depot_pages;	/* ... and in the nodes' depots */
	uint64_t slab_bytes, large_bytes, requested, sampled_in_use;
	uint64_t lock_waits[USLUB_NR_LOCKS], lock_trylock_failures[USLUB_NR_LOCKS];
	int have_smaps;
	struct uslub_os_smaps smaps;
};

/* Where a dump goes (sink.c): an fd, or memory (the live page), whose overflow is noted. */
struct sink {
	struct uslub_out o;
	char *mem;
	size_t cap, len;
	bool overflow;
};
void uslub_sink_fd(struct sink *s, int fd);
void uslub_sink_mem(struct sink *s, char *buf, size_t cap);
void uslub_sink_end(struct sink *s);
void uslub_sink_write(struct sink *s, const char *fmt, va_list ap);

/* Counters, slabs, nodes and totals now, taking no allocator lock; with_smaps also reads
 * /proc/self/smaps for the resident and huge-page-backed bytes. */
void uslub_stats_snap(struct snap *s, bool with_smaps);
/* Nodes in use (1 without NUMA); the arrays are sized for MAX_NODES. */
unsigned uslub_stats_nr_nodes(void);

#pragma GCC visibility pop

#endif
