/* The background replenisher (USLUB_BACKGROUND=1): the user-space kswapd/kcompactd.
 * A failed high-order try wakes it; it prepares warm free blocks of the caches' preferred
 * orders off the callers' time, so the next try finds one at hand. */
#ifndef USLUB_REPLENISH_H
#define USLUB_REPLENISH_H

#include <stdatomic.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct uslub_replenish_stats {
	uint64_t wakeups;     /* rounds of work */
	uint64_t blocks;      /* blocks faulted in and left warm */
	uint64_t bytes;	      /* ... their size */
	uint64_t huge_chunks; /* 2 MiB chunks prepared with huge-page advice */
	uint64_t starts;      /* threads started (again after fork) */
};

extern struct uslub_replenish_stats uslub_replenish_stats;
/* Nonzero when a thread should be started at the next safe point (no allocator state
 * held): set at start-up and in a forked child. */
extern _Atomic int uslub_replenish_pending;

void uslub_replenish_init(void);
/* Start the thread if one is due; called where a nested malloc is harmless. */
void uslub_replenish_start(void);
/* A high-order try failed: wake the thread if it sleeps. */
void uslub_replenish_kick(void);
/* Stop and join the thread (tests). */
void uslub_replenish_stop(void);
void uslub_replenish_after_fork_child(void);
int uslub_replenish_running(void);

#pragma GCC visibility pop

#endif
