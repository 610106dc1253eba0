/* Statistics: counters merged from the caches and the live threads, the totals, and the
 * dump (a /proc/slabinfo-style table sorted by memory, or versioned JSON).
 *
 * 1. Reading. A snapshot adds each cache's folded counters to those of every registered
 *    thread, walking the registry under RCU (see thread.c), so it takes no allocator lock
 *    and cannot deadlock with a thread stopped anywhere in malloc. A thread that exits
 *    folds its counters into the caches and zeroes its own under uslub_fold_seq, so a
 *    snapshot that raced with a fold is taken again.
 * 2. Figures. Active objects are allocations minus frees (exact while the counters are
 *    compiled in); a cache's memory is its slabs by order; bytes requested are estimated
 *    from the slow path's samples (stats.h). Resident and huge-page-backed bytes come from
 *    /proc/self/smaps, read only for a dump or the live page.
 * 3. Writing. Everything goes through the allocator's own formatter, into an fd or a
 *    memory buffer (the live page), never through stdio: a dump allocates nothing from the
 *    heap it describes.
 * 4. At exit. The dump runs once, from whichever thread runs the destructors, in a forked
 *    child too. Some programs close stderr in an atexit handler (coreutils' close_stdout),
 *    which runs before our destructor, so stderr is duplicated at start-up to a high,
 *    close-on-exec fd; the dump checks that fd still is the same file before using it. */
#include "internal.h"
#include "stats/live.h"
#include "page/node.h"
#include "os/options.h"
#include "os/os.h"
#include "os/print.h"
#include "uslub.h"

#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-bp.h>

const char *const uslub_stat_names[USLUB_NR_STATS] = {
#define X(id, name) #name,
    USLUB_STAT_ITEMS(X) USLUB_CACHE_STAT_ITEMS(X)
#undef X
};

_Atomic uint64_t uslub_slab_bytes;

#define NORDERS (USLUB_MAX_ORDER + 1)

/* Nodes in use (1 without NUMA); the arrays are sized for MAX_NODES. */
static unsigned nr_nodes(void)
{
	unsigned n = __atomic_load_n(&uslub_nr_nodes, __ATOMIC_RELAXED);
	return n < 1 ? 1 : n > MAX_NODES ? MAX_NODES : n;
}

/* Bytes in slabs, from the caches' per-order counts: called when a slab is made, so the
 * peak needs no counter of its own on the slab paths. */
/* The peak of memory in use is kept at slab granularity (pages in slabs, large and huge
 * blocks): objects are counted on the fast path only per thread, so a peak of them
 * cannot be taken without work there. */
void uslub_note_in_use(void)
{
	/* uslub_slab_bytes moves with each slab made or discarded (slab.c): one load here,
	 * not a walk over every cache, on a path every large allocation takes. */
	uint64_t slabs = atomic_load_explicit(&uslub_slab_bytes, memory_order_relaxed);
	uint64_t now = slabs + atomic_load(&uslub_large_bytes) + atomic_load(&uslub_huge_bytes);
	uint64_t peak = atomic_load(&uslub_peak_in_use);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_in_use, &peak, now))
		;
}

void uslub_stat_request(unsigned cls, size_t size)
{
#if USLUB_STATS_ENABLED
	struct uslub_thread *t = uslub_tls_thread;
	/* The empty and dead states are shared by many threads: their slow path builds or
	 * borrows a state, and a sample lost there does not matter. */
	if (t->state != THREAD_LIVE)
		return;
	uslub_stat(&t->cpu[cls], SAMPLE_REQUESTS);
	uslub_stat_add(&t->cpu[cls], SAMPLE_REQUESTED_BYTES, size);
#else
	(void)cls, (void)size;
#endif
}

/* ---- snapshot --------------------------------------------------------------------- */

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
	uint64_t regions, reclaims, runs;
	uint64_t any_partial_calls, any_partial_tried, any_partial_again, remote_slabs;
	uint64_t remote_objects, local_partial_hits;
	/* get_any_partial's visit order (node.h), nr_nodes() - 1 entries */
	uint64_t search_order[MAX_NODES];
};

struct snap {
	struct cache_snap c[USLUB_NR_CLASSES];
	struct node_snap n[MAX_NODES];
	struct uslub_totals tot;
	uint64_t threads;			      /* thread states in the registry */
	uint64_t pcp[USLUB_NR_PCP_STATS][PCP_ORDERS]; /* threads' page caches, by order */
	uint64_t pcp_pages;			      /* pages in them now */
	uint64_t slab_bytes, large_bytes, requested, sampled_in_use;
	int have_smaps;
	struct uslub_os_smaps smaps;
};

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Counters of the caches and of every thread in the registry, consistent with the folds
 * (see 1. above). A fold that never ends cannot happen (fork takes stat_lock, so a child
 * never inherits one half done); the retries are bounded anyway. */
static void read_counters(struct snap *s)
{
	for (unsigned tries = 0;; tries++) {
		unsigned long seq = atomic_load_explicit(&uslub_fold_seq, memory_order_acquire);
		if ((seq & 1) && tries < 1000) {
			uslub_os_yield();
			continue;
		}
		for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
			for (unsigned k = 0; k < USLUB_NR_STATS; k++)
				s->c[i].stat[k] = load(&uslub_caches[i].stat[k]);
		for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++)
			for (unsigned o = 0; o < PCP_ORDERS; o++)
				s->pcp[k][o] = load(&uslub_pcp_stat[k][o]);
		s->threads = 0;
		s->pcp_pages = 0;
		urcu_bp_read_lock();
		for (struct uslub_thread *t = __atomic_load_n(&uslub_registry, __ATOMIC_ACQUIRE); t;
		     t = __atomic_load_n(&t->reg_next, __ATOMIC_ACQUIRE)) {
			if (t != &uslub_orphan_thread)
				s->threads++;
			for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
				for (unsigned k = 0; k < USLUB_NR_THREAD_STATS; k++)
					s->c[i].stat[k] += uslub_cc_stat(&t->cpu[i], k);
			for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++)
				for (unsigned o = 0; o < PCP_ORDERS; o++)
					s->pcp[k][o] += load(&t->pcp_stat[k][o]);
			s->pcp_pages += __atomic_load_n(&t->pcp_count, __ATOMIC_RELAXED);
		}
		urcu_bp_read_unlock();
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&uslub_fold_seq, memory_order_relaxed) == seq ||
		    tries >= 1000)
			break;
	}
	/* In a cache with sheaves every fast-path operation is a sheaf operation: the two
	 * counters older dumps had are derived, not counted twice on the fast path. */
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		bool sheaves = uslub_caches[i].sheaf_capacity != 0;
		s->c[i].stat[USLUB_STAT_ALLOC_SHEAF] =
		    sheaves ? s->c[i].stat[USLUB_STAT_ALLOC_FASTPATH] : 0;
		s->c[i].stat[USLUB_STAT_FREE_SHEAF] =
		    sheaves ? s->c[i].stat[USLUB_STAT_FREE_FASTPATH] : 0;
	}
}

static int our_mapping(uintptr_t start, uintptr_t end)
{
	/* Regions lie below 2^ADDR_BITS; the [vsyscall] page near the top of the address
	 * space would otherwise make the walk wrap around. */
	const uintptr_t top = (uintptr_t)1 << ADDR_BITS;
	if (start >= top)
		return 0;
	if (end > top)
		end = top;
	for (uintptr_t a = start & ~REGION_MASK; a < end; a += REGION_SIZE) {
		/* Only the part a region has mapped: another mapping may lie in the rest of
		 * its slot. */
		struct region *r = region_of((void *)a);
		if (r &&
		    start < a + (__atomic_load_n(&r->grown, __ATOMIC_RELAXED) << USLUB_PAGE_SHIFT))
			return 1;
	}
	/* A huge block is a mapping of its own, so it starts one (unless the kernel merged
	 * it with a neighbour, which then counts as not ours). */
	return uslub_huge_usable((void *)start) != 0;
}

static void take_snap(struct snap *s, bool with_smaps)
{
	unsigned nn = nr_nodes();
	memset(s, 0, sizeof(*s));
	read_counters(s);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		struct cache_snap *f = &s->c[i];
		uint64_t allocs =
		    f->stat[USLUB_STAT_ALLOC_FASTPATH] + f->stat[USLUB_STAT_ALLOC_SLOWPATH];
		uint64_t frees =
		    f->stat[USLUB_STAT_FREE_FASTPATH] + f->stat[USLUB_STAT_FREE_SLOWPATH];
		f->active = allocs > frees ? allocs - frees : 0;
		f->total = atomic_load(&c->total_objects);
		f->slabs = atomic_load(&c->nr_slabs);
		for (unsigned o = 0; o < NORDERS; o++) {
			f->by_order[o] = atomic_load(&c->nr_slabs_by_order[o]);
			f->memory += f->by_order[o] << (USLUB_PAGE_SHIFT + o);
		}
		for (unsigned n = 0; n < nn; n++)
			f->partial[n] = load(&cache_node_of(c, n)->nr_partial);
		f->handed_out = f->active * c->size;
		uint64_t samples = f->stat[USLUB_STAT_SAMPLE_REQUESTS];
		if (samples) {
			unsigned __int128 r = (unsigned __int128)f->active *
					      f->stat[USLUB_STAT_SAMPLE_REQUESTED_BYTES] / samples;
			f->requested = r > f->handed_out ? f->handed_out : (uint64_t)r;
			s->requested += f->requested;
			s->sampled_in_use += f->handed_out;
		}
		s->slab_bytes += f->memory;
		s->tot.in_use += f->handed_out;
	}
	for (unsigned n = 0; n < nn; n++) {
		struct uslub_node *un = &uslub_nodes[n];
		/* The node's large-block zone adds to its page figures. */
		struct uslub_node *lz = &uslub_nodes[LARGE_ZONE(n)];
		struct node_snap *ns = &s->n[n];
		for (unsigned o = 0; o < NORDERS; o++)
			ns->free_blocks[o] = load(&un->nr_free[o]) + load(&lz->nr_free[o]);
		ns->free_pages = load(&un->free_pages) + load(&lz->free_pages);
		ns->warm_free_pages = load(&un->warm_free_pages) + load(&lz->warm_free_pages);
		ns->grows = load(&un->grows) + load(&lz->grows);
		ns->nowait_misses = load(&un->nowait_misses);
		ns->released = load(&un->released_bytes) + load(&lz->released_bytes);
		ns->release_calls = load(&un->release_calls) + load(&lz->release_calls);
		ns->regions = load(&un->region_count) + load(&lz->region_count);
		ns->reclaims = load(&un->reclaims) + load(&lz->reclaims);
		ns->runs = load(&lz->runs);
		ns->any_partial_calls = load(&un->any_partial_calls);
		ns->any_partial_tried = load(&un->any_partial_tried);
		ns->any_partial_again = load(&un->any_partial_again);
		ns->remote_slabs = load(&un->remote_slabs);
		ns->remote_objects = load(&un->remote_objects);
		ns->local_partial_hits = load(&un->local_partial_hits);
		for (unsigned k = 0; k + 1 < nn; k++)
			ns->search_order[k] = uslub_topo.order[n][k];
		s->tot.returned += ns->released;
		s->tot.free_pages += ns->free_pages << USLUB_PAGE_SHIFT;
	}
	s->large_bytes = atomic_load(&uslub_large_bytes);
	s->tot.mapped = atomic_load(&uslub_mapped_bytes);
	s->tot.peak_mapped = atomic_load(&uslub_peak_mapped);
	s->tot.huge = atomic_load(&uslub_huge_bytes);
	s->tot.peak_in_use = atomic_load(&uslub_peak_in_use);
	s->tot.in_use += s->large_bytes + s->tot.huge;
	s->tot.slabs = s->slab_bytes;
	s->tot.large = s->large_bytes;
	for (unsigned n = 0; n < nn; n++)
		s->tot.warm_free += s->n[n].warm_free_pages << USLUB_PAGE_SHIFT;
	if (with_smaps)
		s->have_smaps = uslub_os_smaps(our_mapping, &s->smaps) == 0;
}

void uslub_get_totals(struct uslub_totals *out)
{
	uslub_init();
	struct snap s;
	take_snap(&s, false);
	*out = s.tot;
}

int uslub_cache_info(const char *name, struct uslub_cache_info *out)
{
	unsigned nn = nr_nodes();
	uslub_init();
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		if (strcmp(c->name, name) != 0)
			continue;
		struct snap s;
		take_snap(&s, false);
		struct cache_snap *f = &s.c[i];
		memset(out, 0, sizeof(*out));
		memcpy(out->name, c->name, sizeof(c->name));
		out->object_size = c->size;
		out->order = c->order;
		out->min_order = c->min_order;
		out->objects_per_slab = c->objects;
		out->slabs = f->slabs;
		out->active_objects = f->active;
		out->total_objects = f->total;
		for (unsigned n = 0; n < nn; n++)
			out->partial_slabs += f->partial[n];
		out->alloc_fastpath = f->stat[USLUB_STAT_ALLOC_FASTPATH];
		out->alloc_slowpath = f->stat[USLUB_STAT_ALLOC_SLOWPATH];
		out->free_fastpath = f->stat[USLUB_STAT_FREE_FASTPATH];
		out->free_slowpath = f->stat[USLUB_STAT_FREE_SLOWPATH];
		out->alloc_slab = f->stat[USLUB_STAT_ALLOC_SLAB];
		out->free_slab = f->stat[USLUB_STAT_FREE_SLAB];
		out->order_fallback = f->stat[USLUB_STAT_ORDER_FALLBACK];
		out->requested_bytes = f->requested;
		out->request_samples = f->stat[USLUB_STAT_SAMPLE_REQUESTS];
		for (unsigned o = 0; o < NORDERS && o < 8; o++)
			out->slabs_by_order[o] = f->by_order[o];
		return 0;
	}
	return -1;
}

/* ---- output ----------------------------------------------------------------------- */

/* Where a dump goes: an fd (written as the formatter's buffer fills), or memory (the live
 * page). Every emit() produces well under the formatter's 2 KiB, so in memory mode each
 * one is copied out whole. */
struct sink {
	struct uslub_out o;
	char *mem;
	size_t cap, len;
	bool overflow;
};

static void sink_fd(struct sink *s, int fd)
{
	uslub_out_init(&s->o, fd);
	s->mem = NULL;
}

static void sink_mem(struct sink *s, char *buf, size_t cap)
{
	uslub_out_init(&s->o, -1);
	s->mem = buf;
	s->cap = cap;
	s->len = 0;
	s->overflow = false;
}

__attribute__((format(printf, 2, 3))) static void emit(struct sink *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	uslub_vprintf(&s->o, fmt, ap);
	va_end(ap);
	if (!s->mem)
		return;
	if (s->len + s->o.len <= s->cap)
		memcpy(s->mem + s->len, s->o.buf, s->o.len);
	else
		s->overflow = true;
	s->len += s->o.len;
	s->o.len = 0;
}

static void sink_end(struct sink *s)
{
	if (!s->mem)
		uslub_out_flush(&s->o);
}

#define KIB(x) ((x) >> 10)

/* Caches by memory, largest first (insertion sort: 32 entries, and no allocation). */
static void sort_by_memory(const struct snap *s, unsigned idx[USLUB_NR_CLASSES])
{
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		unsigned j = i;
		for (; j > 0 && s->c[idx[j - 1]].memory < s->c[i].memory; j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
}

/* The table; tools/stats/uslub_stats.py prints the same one from a JSON dump, so a
 * change here is made there too. */
static void print_text(struct sink *o, const struct snap *s)
{
	unsigned nn = nr_nodes();
	unsigned idx[USLUB_NR_CLASSES];
	sort_by_memory(s, idx);
	emit(o, "uslub: slabinfo for pid %d, caches by memory\n", (int)getpid());
	emit(o, "%-14s %9s %9s %4s %7s %6s %5s %7s %7s %9s %9s %10s %10s %9s %9s %8s\n", "# name",
	     "active", "total", "use", "objsize", "objper", "order", "slabs", "partial", "mem_KiB",
	     "waste_KiB", "allocs", "frees", "slow_al", "slow_fr", "fallback");
	for (unsigned j = 0; j < USLUB_NR_CLASSES; j++) {
		unsigned i = idx[j];
		const struct uslub_cache *c = &uslub_caches[i];
		const struct cache_snap *f = &s->c[i];
		uint64_t allocs =
		    f->stat[USLUB_STAT_ALLOC_FASTPATH] + f->stat[USLUB_STAT_ALLOC_SLOWPATH];
		uint64_t frees =
		    f->stat[USLUB_STAT_FREE_FASTPATH] + f->stat[USLUB_STAT_FREE_SLOWPATH];
		if (!allocs && !f->slabs)
			continue;
		uint64_t partial = 0;
		for (unsigned n = 0; n < nn; n++)
			partial += f->partial[n];
		char order[16], waste[24];
		struct uslub_out t;
		uslub_out_init(&t, -1);
		uslub_printf(&t, "%u/%u", c->order, c->min_order);
		memcpy(order, t.buf, t.len);
		order[t.len] = '\0';
		t.len = 0;
		if (f->stat[USLUB_STAT_SAMPLE_REQUESTS])
			uslub_printf(&t, "%lu", KIB(f->handed_out - f->requested));
		else
			uslub_printf(&t, "-");
		memcpy(waste, t.buf, t.len);
		waste[t.len] = '\0';
		emit(o,
		     "%-14s %9lu %9lu %3lu%% %7u %6u %5s %7lu %7lu %9lu %9s %10lu %10lu %9lu %9lu "
		     "%8lu\n",
		     c->name, f->active, f->total, f->total ? f->active * 100 / f->total : 0,
		     c->size, c->objects, order, f->slabs, partial, KIB(f->memory), waste, allocs,
		     frees, f->stat[USLUB_STAT_ALLOC_SLOWPATH], f->stat[USLUB_STAT_FREE_SLOWPATH],
		     f->stat[USLUB_STAT_ORDER_FALLBACK]);
	}
	uint64_t by_order[NORDERS] = {0};
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		for (unsigned k = 0; k < NORDERS; k++)
			by_order[k] += s->c[i].by_order[k];
	emit(o, "uslub: slabs by order:");
	for (unsigned k = 0; k < NORDERS; k++)
		emit(o, " %lu", by_order[k]);
	emit(o, "\n");
	for (unsigned n = 0; n < nn; n++) {
		const struct node_snap *ns = &s->n[n];
		emit(o, "uslub: page allocator node %u: free blocks by order:", n);
		for (unsigned k = 0; k < NORDERS; k++)
			emit(o, " %lu", ns->free_blocks[k]);
		emit(o,
		     "; free %lu KiB (warm %lu KiB); grows %lu, no-wait misses %lu, large runs "
		     "%lu, returned %lu KiB\n",
		     KIB(ns->free_pages << USLUB_PAGE_SHIFT),
		     KIB(ns->warm_free_pages << USLUB_PAGE_SHIFT), ns->grows, ns->nowait_misses,
		     ns->runs, KIB(ns->released));
		if (nn > 1) {
			emit(o,
			     "uslub: node %u: local partial hits %lu, get_any_partial calls %lu, "
			     "nodes tried %lu (again %lu), remote slabs %lu; search order",
			     n, ns->local_partial_hits, ns->any_partial_calls,
			     ns->any_partial_tried, ns->any_partial_again, ns->remote_slabs);
			for (unsigned k = 0; k + 1 < nn; k++)
				emit(o, " %lu", ns->search_order[k]);
			emit(o, "\n");
		}
	}
	emit(o, "uslub: thread page caches: %lu KiB;", KIB(s->pcp_pages << USLUB_PAGE_SHIFT));
	for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++) {
		emit(o, "%s %s by order", k ? "," : "", uslub_pcp_stat_names[k]);
		for (unsigned q = 0; q < PCP_ORDERS; q++)
			emit(o, " %lu", s->pcp[k][q]);
	}
	emit(o, "\n");
	emit(o,
	     "uslub: totals: mapped %lu KiB (peak %lu), in use %lu KiB (peak %lu), slabs %lu "
	     "KiB, large %lu KiB, huge %lu KiB, free pages %lu KiB, returned %lu KiB\n",
	     KIB(s->tot.mapped), KIB(s->tot.peak_mapped), KIB(s->tot.in_use),
	     KIB(s->tot.peak_in_use), KIB(s->slab_bytes), KIB(s->large_bytes), KIB(s->tot.huge),
	     KIB(s->tot.free_pages), KIB(s->tot.returned));
	emit(o,
	     "uslub: requested ~%lu KiB of %lu KiB handed out from sampled caches; threads %lu\n",
	     KIB(s->requested), KIB(s->sampled_in_use), s->threads);
	if (s->have_smaps)
		emit(o,
		     "uslub: resident: process %lu KiB, ours %lu KiB; huge-page backed: ours %lu "
		     "KiB, process %lu KiB\n",
		     KIB(s->smaps.rss), KIB(s->smaps.our_rss), KIB(s->smaps.our_anon_huge),
		     KIB(s->smaps.anon_huge));
}

static void emit_array(struct sink *o, const char *key, const uint64_t *v, unsigned n)
{
	emit(o, "\"%s\": [", key);
	for (unsigned k = 0; k < n; k++)
		emit(o, "%s%lu", k ? ", " : "", v[k]);
	emit(o, "]");
}

static void print_json(struct sink *o, const struct snap *s)
{
	unsigned nn = nr_nodes();
	const struct uslub_config *cf = &uslub_config;
	struct timespec ts;
	uslub_os_clock(CLOCK_REALTIME, &ts);
	emit(o, "{\"version\": 1, \"pid\": %d, \"time\": %lu.%03lu,\n", (int)getpid(),
	     (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec / 1000000);
	emit(o,
	     " \"config\": {\"min_order\": %u, \"max_order\": %u, \"min_objects\": %u, "
	     "\"high_order\": \"%s\", \"mem_limit\": %lu, \"stats_enabled\": %s, "
	     "\"page_size\": %lu, \"max_page_order\": %u, \"nodes\": %u, \"background\": %u, "
	     "\"numa\": \"%s\", \"stats\": %u, \"stats_file\": \"%s\"},\n",
	     cf->min_order, cf->max_order, cf->min_objects, cf->high_order_wait ? "wait" : "nowait",
	     (uint64_t)cf->mem_limit, USLUB_STATS_ENABLED ? "true" : "false",
	     (uint64_t)USLUB_PAGE_SIZE, (unsigned)USLUB_MAX_ORDER, nn, cf->background,
	     cf->numa[0] ? cf->numa : "auto", cf->stats, cf->stats_file);
	emit(o,
	     " \"totals\": {\"mapped\": %lu, \"peak_mapped\": %lu, \"in_use\": %lu, "
	     "\"peak_in_use\": %lu, \"slab_bytes\": %lu, \"large_bytes\": %lu, \"huge\": %lu, "
	     "\"free_pages\": %lu, \"returned\": %lu, \"requested_estimate\": %lu, "
	     "\"sampled_in_use\": %lu, \"threads\": %lu, \"threads_reaped\": %lu",
	     s->tot.mapped, s->tot.peak_mapped, s->tot.in_use, s->tot.peak_in_use, s->slab_bytes,
	     s->large_bytes, s->tot.huge, s->tot.free_pages, s->tot.returned, s->requested,
	     s->sampled_in_use, s->threads,
	     atomic_load_explicit(&uslub_threads_reaped, memory_order_relaxed));
	if (s->have_smaps)
		emit(o,
		     ", \"resident\": %lu, \"resident_ours\": %lu, \"anon_huge\": %lu, "
		     "\"anon_huge_ours\": %lu",
		     s->smaps.rss, s->smaps.our_rss, s->smaps.anon_huge, s->smaps.our_anon_huge);
	emit(o, "},\n \"caches\": [");
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		const struct uslub_cache *c = &uslub_caches[i];
		const struct cache_snap *f = &s->c[i];
		uint64_t partial = 0;
		for (unsigned n = 0; n < nn; n++)
			partial += f->partial[n];
		emit(o,
		     "%s\n  {\"name\": \"%s\", \"object_size\": %u, \"order\": %u, "
		     "\"min_order\": %u, \"objects_per_slab\": %u, \"min_objects_per_slab\": %u, "
		     "\"slabs\": %lu, ",
		     i ? "," : "", c->name, c->size, c->order, c->min_order, c->objects,
		     c->min_objects, f->slabs);
		emit_array(o, "slabs_by_order", f->by_order, NORDERS);
		emit(o,
		     ", \"active_objects\": %lu, \"total_objects\": %lu, \"partial_slabs\": %lu, ",
		     f->active, f->total, partial);
		emit_array(o, "partial_slabs_by_node", f->partial, nn);
		emit(o,
		     ", \"memory_bytes\": %lu, \"handed_out_bytes\": %lu, \"requested_bytes\": "
		     "%lu,\n   \"counters\": {",
		     f->memory, f->handed_out, f->requested);
		for (unsigned k = 0; k < USLUB_NR_STATS; k++)
			emit(o, "%s\"%s\": %lu", k ? ", " : "", uslub_stat_names[k], f->stat[k]);
		emit(o, "}}");
	}
	emit(o, "],\n \"nodes\": [");
	for (unsigned n = 0; n < nn; n++) {
		const struct node_snap *ns = &s->n[n];
		uint64_t partial = 0;
		for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
			partial += s->c[i].partial[n];
		emit(o,
		     "%s{\"node\": %u, \"partial_slabs\": %lu, \"free_pages\": %lu, "
		     "\"warm_free_pages\": %lu, \"regions\": %lu, \"grows\": %lu, "
		     "\"nowait_misses\": %lu, \"reclaims\": %lu, \"large_runs\": %lu, "
		     "\"returned_bytes\": %lu,\n   "
		     "\"local_partial_hits\": %lu, \"get_any_partial_calls\": %lu, "
		     "\"nodes_tried\": %lu, \"nodes_tried_again\": %lu, \"remote_slabs\": %lu, "
		     "\"remote_objects\": %lu, ",
		     n ? ",\n  " : "\n  ", n, partial, ns->free_pages, ns->warm_free_pages,
		     ns->regions, ns->grows, ns->nowait_misses, ns->reclaims, ns->runs,
		     ns->released, ns->local_partial_hits, ns->any_partial_calls,
		     ns->any_partial_tried, ns->any_partial_again, ns->remote_slabs,
		     ns->remote_objects);
		emit_array(o, "search_order", ns->search_order, nn - 1);
		emit(o, ", ");
		emit_array(o, "free_blocks", ns->free_blocks, NORDERS);
		emit(o, "}");
	}
	uint64_t free_blocks[NORDERS] = {0}, nowait = 0, grows = 0, calls = 0, reclaims = 0;
	for (unsigned n = 0; n < nn; n++) {
		for (unsigned k = 0; k < NORDERS; k++)
			free_blocks[k] += s->n[n].free_blocks[k];
		nowait += s->n[n].nowait_misses;
		grows += s->n[n].grows;
		calls += s->n[n].release_calls;
		reclaims += s->n[n].reclaims;
	}
	emit(o, "],\n \"page_allocator\": {");
	emit_array(o, "free_blocks", free_blocks, NORDERS);
	emit(o,
	     ", \"nowait_misses\": %lu, \"grows\": %lu, \"reclaims\": %lu, "
	     "\"returned_bytes\": %lu, \"release_calls\": %lu, \"pcp_bytes\": %lu",
	     nowait, grows, reclaims, s->tot.returned, calls, s->pcp_pages << USLUB_PAGE_SHIFT);
	/* The threads' page caches, one array by order (0..3) per counter. */
	for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++) {
		emit(o, ", ");
		emit_array(o, uslub_pcp_stat_names[k], s->pcp[k], PCP_ORDERS);
	}
	emit(o, "}\n}\n");
}

void uslub_stats_print(int fd, int json)
{
	uslub_init();
	struct snap s;
	take_snap(&s, true);
	struct sink o;
	sink_fd(&o, fd);
	if (json)
		print_json(&o, &s);
	else
		print_text(&o, &s);
	sink_end(&o);
}

size_t uslub_stats_format_json(char *buf, size_t cap, bool with_smaps)
{
	/* The live page reads smaps only now and then (live.c); in between it shows the
	 * last figures. Only the live thread comes here. */
	static struct uslub_os_smaps last;
	static int have_last;
	struct snap s;
	take_snap(&s, with_smaps);
	if (with_smaps) {
		last = s.smaps;
		have_last = s.have_smaps;
	} else {
		s.smaps = last;
		s.have_smaps = have_last;
	}
	struct sink o;
	sink_mem(&o, buf, cap);
	print_json(&o, &s);
	return o.overflow ? 0 : o.len;
}

/* ---- the dump at exit ------------------------------------------------------------- */

/* USLUB_STATS_FILE with %p replaced by the pid. */
static int open_stats_file(void)
{
	const char *f = uslub_config.stats_file;
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
	if (fd < 0)
		uslub_message("uslub: cannot open USLUB_STATS_FILE %s; writing to stderr\n", path);
	return fd;
}

static int saved_stderr = -1;
static dev_t saved_dev;
static ino_t saved_ino;

/* A copy of stderr above the fds programs use, taken before main (see 4. above). */
static void save_stderr(void)
{
	struct rlimit rl;
	int low = 200;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 64)
		low = (int)(rl.rlim_cur > 1024 ? 1024 : rl.rlim_cur) - 32;
	struct stat st;
	int fd = fcntl(2, F_DUPFD_CLOEXEC, low);
	if (fd < 0)
		fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
	if (fd < 0 || fstat(fd, &st) != 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	saved_dev = st.st_dev;
	saved_ino = st.st_ino;
	saved_stderr = fd;
}

/* The saved copy if it still is the stderr of start-up (a program may have closed it
 * and reused the number), else fd 2. */
static int stderr_fd(void)
{
	struct stat st;
	if (saved_stderr >= 0 && fstat(saved_stderr, &st) == 0 && st.st_dev == saved_dev &&
	    st.st_ino == saved_ino)
		return saved_stderr;
	return 2;
}

__attribute__((constructor)) static void stats_constructor(void)
{
	uslub_init();
	if (uslub_config.stats == USLUB_STATS_LIVE)
		uslub_live_start();
	else if (uslub_config.stats && !uslub_config.stats_file[0])
		save_stderr();
}

static _Atomic int dumped;

/* Once per process, from whichever thread runs the destructors; a forked child dumps its
 * own (its flag is a copy taken before the parent could have dumped). */
__attribute__((destructor)) void uslub_stats_dump_at_exit(void)
{
	if (!uslub_config.stats || atomic_exchange(&dumped, 1))
		return;
	if (uslub_config.stats == USLUB_STATS_LIVE) {
		uslub_live_stop();
		return;
	}
	int fd = uslub_config.stats_file[0] ? open_stats_file() : -1;
	if (fd < 0)
		fd = stderr_fd();
	uslub_stats_print(fd, uslub_config.stats == USLUB_STATS_JSON);
	if (fd != 2 && fd != saved_stderr)
		close(fd);
}
