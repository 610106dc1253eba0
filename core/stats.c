/* Statistics: counters merged from the caches and the live threads, the totals, and the
 * dump (a /proc/slabinfo-style table, or versioned JSON). Everything here writes through
 * the allocator's own formatter and reads the registry under its lock: a dump never
 * allocates from the heap it describes. */
#include "internal.h"
#include "options.h"
#include "os.h"
#include "print.h"
#include "uslub.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

const char *const uslub_stat_names[USLUB_NR_STATS] = {
#define X(id, name) #name,
	USLUB_STAT_ITEMS(X)
#undef X
};

_Atomic uint64_t uslub_slab_bytes;

static uint64_t in_use_bytes(void)
{
	return atomic_load(&uslub_slab_bytes) + atomic_load(&uslub_large_bytes) +
	       atomic_load(&uslub_huge_bytes);
}

void uslub_note_in_use(void)
{
	uint64_t now = in_use_bytes();
	uint64_t peak = atomic_load(&uslub_peak_in_use);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_in_use, &peak, now))
		;
}

/* A cache's counters: folded ones plus those of every registered thread. */
static void cache_counters(unsigned cls, uint64_t out[USLUB_NR_STATS])
{
	for (unsigned k = 0; k < USLUB_NR_STATS; k++)
		out[k] = __atomic_load_n(&uslub_caches[cls].stat[k], __ATOMIC_RELAXED);
	for (struct uslub_thread *t = uslub_registry; t; t = t->reg_next)
		for (unsigned k = 0; k < USLUB_NR_STATS; k++)
			out[k] += __atomic_load_n(&t->cpu[cls].stat[k], __ATOMIC_RELAXED);
}

struct cache_figures {
	uint64_t stat[USLUB_NR_STATS];
	uint64_t active, total, slabs, partial, bytes;
};

static void cache_figures(unsigned cls, struct cache_figures *f)
{
	struct uslub_cache *c = &uslub_caches[cls];
	cache_counters(cls, f->stat);
	uint64_t allocs = f->stat[USLUB_STAT_ALLOC_FASTPATH] + f->stat[USLUB_STAT_ALLOC_SLOWPATH];
	uint64_t frees = f->stat[USLUB_STAT_FREE_FASTPATH] + f->stat[USLUB_STAT_FREE_SLOWPATH];
	f->active = allocs > frees ? allocs - frees : 0;
	f->total = atomic_load(&c->total_objects);
	f->slabs = atomic_load(&c->nr_slabs);
	f->partial = 0;
	for (unsigned n = 0; n < MAX_NODES; n++)
		f->partial += __atomic_load_n(&c->node[n].nr_partial, __ATOMIC_RELAXED);
	f->bytes = 0;
	for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++)
		f->bytes += atomic_load(&c->nr_slabs_by_order[o]) * (USLUB_PAGE_SIZE << o);
}

void uslub_get_totals(struct uslub_totals *out)
{
	uslub_init();
	memset(out, 0, sizeof(*out));
	out->mapped = atomic_load(&uslub_mapped_bytes);
	out->peak_mapped = atomic_load(&uslub_peak_mapped);
	out->huge = atomic_load(&uslub_huge_bytes);
	out->peak_in_use = atomic_load(&uslub_peak_in_use);
	pthread_mutex_lock(&uslub_registry_lock);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct cache_figures f;
		cache_figures(i, &f);
		out->in_use += f.active * uslub_caches[i].size;
	}
	pthread_mutex_unlock(&uslub_registry_lock);
	out->in_use += atomic_load(&uslub_large_bytes) + out->huge;
	for (unsigned n = 0; n < MAX_NODES; n++) {
		out->returned += __atomic_load_n(&uslub_nodes[n].released_bytes, __ATOMIC_RELAXED);
		out->free_pages += __atomic_load_n(&uslub_nodes[n].free_pages, __ATOMIC_RELAXED)
				   << USLUB_PAGE_SHIFT;
	}
}

int uslub_cache_info(const char *name, struct uslub_cache_info *out)
{
	uslub_init();
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		if (strcmp(c->name, name) != 0)
			continue;
		struct cache_figures f;
		pthread_mutex_lock(&uslub_registry_lock);
		cache_figures(i, &f);
		pthread_mutex_unlock(&uslub_registry_lock);
		memset(out, 0, sizeof(*out));
		memcpy(out->name, c->name, sizeof(c->name));
		out->object_size = c->size;
		out->order = c->order;
		out->min_order = c->min_order;
		out->objects_per_slab = c->objects;
		out->slabs = f.slabs;
		out->active_objects = f.active;
		out->total_objects = f.total;
		out->partial_slabs = f.partial;
		out->alloc_fastpath = f.stat[USLUB_STAT_ALLOC_FASTPATH];
		out->alloc_slowpath = f.stat[USLUB_STAT_ALLOC_SLOWPATH];
		out->free_fastpath = f.stat[USLUB_STAT_FREE_FASTPATH];
		out->free_slowpath = f.stat[USLUB_STAT_FREE_SLOWPATH];
		out->alloc_slab = f.stat[USLUB_STAT_ALLOC_SLAB];
		out->free_slab = f.stat[USLUB_STAT_FREE_SLAB];
		out->order_fallback = f.stat[USLUB_STAT_ORDER_FALLBACK];
		return 0;
	}
	return -1;
}

static void print_text(struct uslub_out *o)
{
	struct uslub_totals tot;
	uslub_get_totals(&tot);
	uslub_printf(o, "uslub: slabinfo (pid %d)\n", (int)getpid());
	uslub_printf(o, "%-14s %10s %10s %7s %6s %5s %5s %8s %7s %10s %10s %8s %8s %8s\n",
		     "# name", "active_obj", "num_obj", "objsize", "objper", "order", "min",
		     "slabs", "partial", "alloc", "free", "slow_al", "slow_fr", "fallback");
	pthread_mutex_lock(&uslub_registry_lock);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		struct cache_figures f;
		cache_figures(i, &f);
		uint64_t allocs =
			f.stat[USLUB_STAT_ALLOC_FASTPATH] + f.stat[USLUB_STAT_ALLOC_SLOWPATH];
		uint64_t frees = f.stat[USLUB_STAT_FREE_FASTPATH] + f.stat[USLUB_STAT_FREE_SLOWPATH];
		if (!allocs && !f.slabs)
			continue;
		uslub_printf(o,
			     "%-14s %10lu %10lu %7u %6u %5u %5u %8lu %7lu %10lu %10lu %8lu %8lu "
			     "%8lu\n",
			     c->name, f.active, f.total, c->size, c->objects, c->order,
			     c->min_order, f.slabs, f.partial, allocs, frees,
			     f.stat[USLUB_STAT_ALLOC_SLOWPATH], f.stat[USLUB_STAT_FREE_SLOWPATH],
			     f.stat[USLUB_STAT_ORDER_FALLBACK]);
	}
	pthread_mutex_unlock(&uslub_registry_lock);
	uslub_printf(o, "uslub: page allocator: free blocks by order:");
	for (unsigned n = 0; n < MAX_NODES; n++)
		for (unsigned k = 0; k <= USLUB_MAX_ORDER; k++)
			uslub_printf(o, " %lu", __atomic_load_n(&uslub_nodes[n].nr_free[k],
								__ATOMIC_RELAXED));
	uslub_printf(o, "; grows %lu, no-wait misses %lu\n", uslub_nodes[0].grows,
		     __atomic_load_n(&uslub_nodes[0].nowait_misses, __ATOMIC_RELAXED));
	uslub_printf(o,
		     "uslub: totals: mapped %lu KiB (peak %lu), in use %lu KiB (peak pages %lu "
		     "KiB), huge %lu KiB, free pages %lu KiB, returned to the OS %lu KiB, "
		     "resident %lu KiB\n",
		     tot.mapped >> 10, tot.peak_mapped >> 10, tot.in_use >> 10,
		     tot.peak_in_use >> 10, tot.huge >> 10, tot.free_pages >> 10,
		     tot.returned >> 10, uslub_os_rss() >> 10);
}

static void print_json(struct uslub_out *o)
{
	struct uslub_totals tot;
	uslub_get_totals(&tot);
	uslub_printf(o, "{\"version\": 1, \"pid\": %d,\n", (int)getpid());
	uslub_printf(o,
		     " \"config\": {\"min_order\": %u, \"max_order\": %u, \"min_objects\": %u, "
		     "\"high_order\": \"%s\", \"mem_limit\": %lu},\n",
		     uslub_config.min_order, uslub_config.max_order, uslub_config.min_objects,
		     uslub_config.high_order_wait ? "wait" : "nowait",
		     (uint64_t)uslub_config.mem_limit);
	uslub_printf(o,
		     " \"totals\": {\"mapped\": %lu, \"peak_mapped\": %lu, \"in_use\": %lu, "
		     "\"peak_in_use\": %lu, \"huge\": %lu, \"free_pages\": %lu, \"returned\": "
		     "%lu, \"resident\": %lu},\n",
		     tot.mapped, tot.peak_mapped, tot.in_use, tot.peak_in_use, tot.huge,
		     tot.free_pages, tot.returned, uslub_os_rss());
	uslub_printf(o, " \"caches\": [");
	pthread_mutex_lock(&uslub_registry_lock);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		struct cache_figures f;
		cache_figures(i, &f);
		uslub_printf(o,
			     "%s\n  {\"name\": \"%s\", \"object_size\": %u, \"order\": %u, "
			     "\"min_order\": %u, \"objects_per_slab\": %u, \"slabs\": %lu, "
			     "\"active_objects\": %lu, \"total_objects\": %lu, \"partial_slabs\": "
			     "%lu, \"counters\": {",
			     i ? "," : "", c->name, c->size, c->order, c->min_order, c->objects,
			     f.slabs, f.active, f.total, f.partial);
		for (unsigned k = 0; k < USLUB_NR_STATS; k++)
			uslub_printf(o, "%s\"%s\": %lu", k ? ", " : "", uslub_stat_names[k],
				     f.stat[k]);
		uslub_printf(o, "}}");
	}
	pthread_mutex_unlock(&uslub_registry_lock);
	uslub_printf(o, "],\n \"nodes\": [");
	for (unsigned n = 0; n < MAX_NODES; n++)
		uslub_printf(o, "%s{\"node\": %u}", n ? ", " : "", n);
	uslub_printf(o, "],\n \"page_allocator\": {\"free_blocks\": [");
	for (unsigned k = 0; k <= USLUB_MAX_ORDER; k++)
		uslub_printf(o, "%s%lu", k ? ", " : "",
			     __atomic_load_n(&uslub_nodes[0].nr_free[k], __ATOMIC_RELAXED));
	uslub_printf(o,
		     "], \"nowait_misses\": %lu, \"grows\": %lu, \"returned_bytes\": %lu}\n}\n",
		     __atomic_load_n(&uslub_nodes[0].nowait_misses, __ATOMIC_RELAXED),
		     uslub_nodes[0].grows, tot.returned);
}

void uslub_stats_print(int fd, int json)
{
	uslub_init();
	struct uslub_out o;
	uslub_out_init(&o, fd);
	if (json)
		print_json(&o);
	else
		print_text(&o);
	uslub_out_flush(&o);
}

/* USLUB_STATS_FILE with %p replaced by the pid. */
static int open_stats_file(void)
{
	const char *f = uslub_config.stats_file;
	if (!f[0])
		return 2;
	char path[300];
	size_t n = 0;
	for (; *f && n < sizeof(path) - 24; f++) {
		if (f[0] == '%' && f[1] == 'p') {
			struct uslub_out o;
			uslub_out_init(&o, -1);
			uslub_printf(&o, "%d", (int)getpid());
			memcpy(path + n, o.buf, o.len);
			n += o.len;
			f++;
		} else {
			path[n++] = *f;
		}
	}
	path[n] = '\0';
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		uslub_message("uslub: cannot open USLUB_STATS_FILE %s; writing to stderr\n", path);
		return 2;
	}
	return fd;
}

static _Atomic int dumped;

/* Once per process, from whichever thread runs the destructors; a forked child dumps its
 * own (the flag is reset in it by being a copy taken before the parent dumped). */
__attribute__((destructor)) void uslub_stats_dump_at_exit(void)
{
	if (!uslub_config.stats || atomic_exchange(&dumped, 1))
		return;
	int fd = open_stats_file();
	uslub_stats_print(fd, uslub_config.stats == USLUB_STATS_JSON);
	if (fd != 2)
		close(fd);
}
