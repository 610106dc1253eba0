/* The snapshot the dump, the live page and the API read: counters merged from the caches
 * and the live threads, the slabs, the page allocator's nodes and the totals.
 *
 * A snapshot adds each cache's folded counters to those of every registered thread,
 * walking the registry under RCU (see thread.c), so it takes no allocator lock and cannot
 * deadlock with a thread stopped anywhere in malloc. A thread that exits folds its
 * counters into the caches and zeroes its own under uslub_fold_seq, so a snapshot that
 * raced with a fold is taken again. Active objects are allocations minus frees (exact
 * while the counters are compiled in); a cache's memory is its slabs by order; bytes
 * requested are estimated from the slow path's samples (stats.h). Resident and
 * huge-page-backed bytes come from /proc/self/smaps, read only for a dump or the live
 * page. */
#include "stats/snapshot.h"

#include "page/node.h"
#include "slab/slab.h"
#include "stats/stats.h"

#include <string.h>
#include <urcu/urcu-bp.h>

unsigned uslub_stats_nr_nodes(void)
{
	unsigned n = __atomic_load_n(&uslub_nr_nodes, __ATOMIC_RELAXED);
	return n < 1 ? 1 : n > MAX_NODES ? MAX_NODES : n;
}

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Counters of the caches and of every thread in the registry, consistent with the folds
 * (see above). A fold that never ends cannot happen (fork takes stat_lock, so a child
 * never inherits one half done); the retries are bounded anyway. */
static void read_counters(struct snap *s)
{
	for (unsigned tries = 0;; tries++) {
		unsigned long seq = atomic_load_explicit(&uslub_fold_seq, memory_order_acquire);
		if ((seq & 1) && tries < 1000) {
			uslub_os_yield();
			continue;
		}
		for (unsigned i = 0; i < s->nr_caches; i++)
			for (unsigned k = 0; k < USLUB_NR_STATS; k++)
				s->c[i].stat[k] = load(&uslub_caches[i].stat[k]);
		for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++)
			for (unsigned o = 0; o < PCP_ORDERS; o++)
				s->pcp[k][o] = load(&uslub_pcp_stat[k][o]);
		for (unsigned k = 0; k < USLUB_NR_MEDIUM_STATS; k++)
			s->medium[k] = load(&uslub_medium_stat[k]);
		/* The barns count their own gets and puts (thread/sheaf.c). */
		for (unsigned slot = 0; slot < NR_BARNS; slot++) {
			struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
			for (unsigned i = 0; b && i < s->nr_caches; i++) {
				s->c[i].stat[USLUB_STAT_BARN_GET] += load(&b[i].gets);
				s->c[i].stat[USLUB_STAT_BARN_PUT] += load(&b[i].puts);
			}
		}
		s->threads = 0;
		s->pcp_pages = 0;
		s->medium_pages = 0;
		s->large_unfolded = 0;
		USLUB_OUT_VOID(urcu_bp_read_lock());
		for (struct uslub_thread *t = __atomic_load_n(&uslub_registry, __ATOMIC_ACQUIRE); t;
		     t = __atomic_load_n(&t->reg_next, __ATOMIC_ACQUIRE)) {
			if (t != &uslub_orphan_thread)
				s->threads++;
			for (unsigned i = 0; i < s->nr_caches; i++)
				for (unsigned k = 0; k < USLUB_NR_THREAD_STATS; k++)
					s->c[i].stat[k] += uslub_cc_stat(&t->cpu[i], k);
			for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++)
				for (unsigned o = 0; o < PCP_ORDERS; o++)
					s->pcp[k][o] += load(&t->pcp_stat[k][o]);
			s->pcp_pages += __atomic_load_n(&t->pcp_count, __ATOMIC_RELAXED);
			s->large_unfolded += atomic_load(&t->large_delta);
			for (unsigned k = 0; k < USLUB_NR_MEDIUM_STATS; k++)
				s->medium[k] += load(&t->medium_stat[k]);
			s->medium_pages += __atomic_load_n(&t->medium.pages, __ATOMIC_RELAXED);
			/* The medium sheaves' pops are hits and their pushes frees of the
			 * cache's, and what they hold is in it. */
			for (unsigned k = 0; k < NR_MSHEAVES; k++) {
				const struct cache_cpu *cc = &t->mcpu[k];
				s->medium[USLUB_MEDIUM_HIT] +=
				    uslub_cc_stat(cc, USLUB_STAT_ALLOC_FASTPATH);
				s->medium[USLUB_MEDIUM_FREE] +=
				    uslub_cc_stat(cc, USLUB_STAT_FREE_FASTPATH);
				s->medium_pages +=
				    (uint64_t)__atomic_load_n(&cc->sheaf_count, __ATOMIC_RELAXED) *
				    (k + MEDIUM_MIN_PAGES);
			}
		}
		urcu_bp_read_unlock();
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&uslub_fold_seq, memory_order_relaxed) == seq ||
		    tries >= 1000)
			break;
	}
	/* In a cache with sheaves every fast-path operation is a sheaf operation: the two
	 * counters older dumps had are derived, not counted twice on the fast path. */
	for (unsigned i = 0; i < s->nr_caches; i++) {
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
	return uslub_huge_maps((void *)start);
}

void uslub_stats_snap(struct snap *s, bool with_smaps)
{
	unsigned nn = uslub_stats_nr_nodes();
	memset(s, 0, sizeof(*s));
	s->nr_caches = uslub_caches_in_use();
	read_counters(s);
	s->rcu_pending_slabs = atomic_load(&uslub_rcu_stats.pending_slabs);
	s->rcu_pending_objects = atomic_load(&uslub_rcu_stats.pending_objects);
	s->rcu_batches = atomic_load(&uslub_rcu_stats.batches);
	s->rcu_freed_objects = atomic_load(&uslub_rcu_stats.freed_objects);
	for (unsigned k = 0; k < USLUB_NR_LOCKS; k++) {
		s->lock_waits[k] =
		    atomic_load_explicit(&uslub_lock_stats[k].waits, memory_order_relaxed);
		s->lock_trylock_failures[k] = atomic_load_explicit(
		    &uslub_lock_stats[k].trylock_failures, memory_order_relaxed);
	}
	for (unsigned i = 0; i < s->nr_caches; i++) {
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
		struct node_snap *ns = &s->n[n];
		for (unsigned o = 0; o < NORDERS; o++)
			ns->free_blocks[o] = load(&un->nr_free[o]);
		ns->free_pages = load(&un->free_pages);
		ns->warm_free_pages = load(&un->warm_free_pages);
		ns->grows = load(&un->grows);
		ns->nowait_misses = load(&un->nowait_misses);
		ns->released = load(&un->released_bytes);
		ns->release_calls = load(&un->release_calls);
		ns->regions = load(&un->region_count);
		ns->reclaims = load(&un->reclaims);
		ns->runs = ns->moved = ns->extent_hits = ns->extent_flushes = 0;
		/* The node's large-block and medium zones (one of each an arena) add to its
		 * page figures. */
		for (unsigned a = 0; a < 2 * uslub_nr_arenas; a++) {
			struct uslub_node *lz =
			    &uslub_nodes[a < uslub_nr_arenas
					     ? LARGE_ARENA_ZONE(n, a)
					     : MEDIUM_ARENA_ZONE(n, a - uslub_nr_arenas)];
			for (unsigned o = 0; o < NORDERS; o++)
				ns->free_blocks[o] += load(&lz->nr_free[o]);
			ns->free_pages += load(&lz->free_pages);
			ns->warm_free_pages += load(&lz->warm_free_pages);
			ns->grows += load(&lz->grows);
			ns->released += load(&lz->released_bytes);
			ns->release_calls += load(&lz->release_calls);
			ns->regions += load(&lz->region_count);
			ns->reclaims += load(&lz->reclaims);
			ns->runs += load(&lz->runs);
			ns->extent_hits += load(&lz->ext_hits);
			ns->extent_flushes += load(&lz->ext_flushes);
			ns->moved += load(&lz->moved_pages) << USLUB_PAGE_SHIFT;
		}
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
	/* Out of the buddy as large blocks, less those waiting in the threads' caches. */
	s->depot_pages = uslub_medium_depot_pages();
	uint64_t cached = (s->medium_pages + s->depot_pages) << USLUB_PAGE_SHIFT;
	int64_t large = (int64_t)atomic_load(&uslub_large_bytes) + s->large_unfolded;
	s->large_bytes = large > (int64_t)cached ? (uint64_t)large - cached : 0;
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

void uslub_stats_totals(struct uslub_totals *out)
{
	struct snap s;
	uslub_stats_snap(&s, false);
	*out = s.tot;
}

int uslub_stats_cache_info(const char *name, struct uslub_cache_info *out)
{
	unsigned nn = uslub_stats_nr_nodes();
	for (unsigned i = 0, nr = uslub_caches_in_use(); i < nr; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		if (strcmp(c->name, name) != 0 || !uslub_cache_shown(i))
			continue;
		struct snap s;
		uslub_stats_snap(&s, false);
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

uint64_t uslub_stats_active_objects(unsigned cls)
{
	static const unsigned in[] = {USLUB_STAT_ALLOC_FASTPATH, USLUB_STAT_ALLOC_SLOWPATH};
	static const unsigned out[] = {USLUB_STAT_FREE_FASTPATH, USLUB_STAT_FREE_SLOWPATH};
	for (unsigned tries = 0;; tries++) {
		unsigned long seq = atomic_load_explicit(&uslub_fold_seq, memory_order_acquire);
		uint64_t allocs = 0, frees = 0;
		for (unsigned k = 0; k < 2; k++) {
			allocs += load(&uslub_caches[cls].stat[in[k]]);
			frees += load(&uslub_caches[cls].stat[out[k]]);
		}
		USLUB_OUT_VOID(urcu_bp_read_lock());
		for (struct uslub_thread *t = __atomic_load_n(&uslub_registry, __ATOMIC_ACQUIRE); t;
		     t = __atomic_load_n(&t->reg_next, __ATOMIC_ACQUIRE))
			for (unsigned k = 0; k < 2; k++) {
				allocs += uslub_cc_stat(&t->cpu[cls], in[k]);
				frees += uslub_cc_stat(&t->cpu[cls], out[k]);
			}
		urcu_bp_read_unlock();
		atomic_thread_fence(memory_order_acquire);
		if ((!(seq & 1) &&
		     atomic_load_explicit(&uslub_fold_seq, memory_order_relaxed) == seq) ||
		    tries >= 1000)
			return allocs > frees ? allocs - frees : 0;
	}
}
