/* The background thread (USLUB_BACKGROUND): it hands free memory back to the OS by the
 * decay when the program is quiet (auto, the default, starts it once there is some), and
 * with USLUB_BACKGROUND=1 it is also the replenisher, the user-space kswapd/kcompactd: a
 * failed high-order try wakes it, and it prepares warm free blocks of the caches'
 * preferred orders off the callers' time, so the next try finds one at hand. */
#ifndef USLUB_REPLENISH_H
#define USLUB_REPLENISH_H

#include <stdatomic.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct uslub_replenish_stats {
	uint64_t wakeups;      /* rounds of work */
	uint64_t blocks;       /* blocks faulted in and left warm */
	uint64_t bytes;	       /* ... their size */
	uint64_t huge_chunks;  /* 2 MiB chunks prepared with huge-page advice */
	uint64_t starts;       /* threads started (again after fork) */
	uint64_t decay_passes; /* decay rounds the thread made */
	uint64_t decay_bytes;  /* ... and what they handed back */
};

extern struct uslub_replenish_stats uslub_replenish_stats;

void uslub_replenish_init(void);
/* Start the thread if one is due; called where a nested malloc is harmless. */
void uslub_replenish_start(void);
/* A high-order try failed: wake the thread if it sleeps. */
void uslub_replenish_kick(void);
/* Pages went free and `warm_bytes` of warm free memory are in their zone: wake an idle
 * thread, or (auto) ask for the thread once there is enough to hand back. */
void uslub_background_note(uint64_t warm_bytes);
/* Stop and join the thread (tests). */
void uslub_replenish_stop(void);
void uslub_replenish_after_fork_child(void);
int uslub_replenish_running(void);

#pragma GCC visibility pop

#endif
