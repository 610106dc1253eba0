/* The statistics observer: the snapshot (snapshot.c), one emitter for the table and the
 * JSON (emit.c), the dump at exit (stats.c) and the live view (live.c). The counters
 * themselves are the shared stat items (stat_items.h), bumped by the layers where they
 * count; nothing below reaches this folder. */
#ifndef USLUB_STATS_H
#define USLUB_STATS_H

#include "types.h"
#include "uslub.h"

#pragma GCC visibility push(hidden)

/* The start-up part of USLUB_STATS (the live view, or a saved stderr for the dump), once
 * the process is set up: the library's constructor calls it. */
void uslub_stats_start(void);

/* What uslub.h's uslub_stats_print, uslub_get_totals and uslub_cache_info return, for
 * the api layer (api/inspect.c), which sets the allocator up first. */
void uslub_stats_emit(int fd, int json);
void uslub_stats_totals(struct uslub_totals *out);
int uslub_stats_cache_info(const char *name, struct uslub_cache_info *out);
/* Objects of cache cls allocated and not freed (uslub_cache_destroy's count): its
 * allocations minus its frees, over the cache and every thread. */
uint64_t uslub_stats_active_objects(unsigned cls);

#pragma GCC visibility pop

#endif
