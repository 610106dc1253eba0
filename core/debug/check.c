/* The heap accounting walker (see check.h).
 *
 * 1. The page walk. Each node's regions are walked page by page over [FIRST_PAGE, grown):
 *    the head of a free block (PAGE_FREE), a slab or a thread structure covers 2^order
 *    pages, a large block or a run kept whole (PAGE_EXTENT) the pages it holds; every tail
 *    page must name that head and be of no kind of its own, which makes the extents
 *    disjoint. A page none covers is "loose": it can only sit in a thread's page cache.
 *
 * 2. The cross-checks. What the walk found is compared with what each structure claims:
 *    the buddy lists and their counters, each cache's slab and object counts and its node
 *    partial lists, each thread's current slab, partial list and page cache (the loose
 *    pages, block by block), the bytes counted as large and as taken from the OS.
 *
 * 3. Objects. Inside each slab the free lists (the slab's remote or unfrozen list, the
 *    owner's local list and, for the owner's current slab, the thread freelist) are walked
 *    with a bound and every link must be an object of that slab. The objects on none of
 *    them are the program's: their count per class is what a test that freed everything
 *    expects to be zero.
 *
 * Locks: all of them (lock.c, the list fork uses too). Taking them keeps out every path
 * that changes lists; the thread fast paths take no lock, hence the rule that nobody
 * else allocates during a walk. */
#include "debug/check.h"

#include "thread/thread.h"
#include "debug/debug.h"
#include "os/print.h"
#include "slab/slab.h"

#include <stdarg.h>
#include <string.h>

/* ---- the whole heap ------------------------------------------------------------- */

#define MAX_REPORTED 16

struct walk {
	struct uslub_check *out;
	struct uslub_out msg;
	int fd;
	/* found by the page walk, to compare with the lists and counters */
	uint64_t free_heads[NR_ZONES][USLUB_MAX_ORDER + 1];
	uint64_t free_pages[NR_ZONES], warm_pages[NR_ZONES];
	uint64_t slabs[USLUB_NR_CACHES], slabs_by_order[USLUB_NR_CACHES][USLUB_MAX_ORDER + 1];
	uint64_t objects[USLUB_NR_CACHES], loose, grown_pages, large_unfolded; /* threads' */
	uint64_t partial[USLUB_NR_CACHES][MAX_NODES];
};

__attribute__((format(printf, 2, 3))) static void bad(struct walk *w, const char *fmt, ...)
{
	w->out->errors++;
	if (w->fd < 0 || w->out->errors > MAX_REPORTED)
		return;
	va_list ap;
	va_start(ap, fmt);
	uslub_printf(&w->msg, "uslub check: ");
	uslub_vprintf(&w->msg, fmt, ap);
	uslub_printf(&w->msg, "\n");
	va_end(ap);
	if (w->out->errors == MAX_REPORTED)
		uslub_printf(&w->msg, "uslub check: (further inconsistencies are counted only)\n");
}

static uintptr_t page_idx(const struct page_desc *d)
{
	return ((uintptr_t)d & REGION_MASK) >> DESC_SHIFT;
}

/* Pages a head covers; 0 for a page that heads nothing. */
static size_t extent(const struct page_desc *d)
{
	if (d->head != d)
		return 0;
	switch (d->kind) {
	case PAGE_SLAB:
	case PAGE_META:
		return (size_t)1 << d->order;
	case PAGE_LARGE:
		return d->objects;
	default:
		return 0;
	}
}

/* Objects on a free list threaded through slab s, or -1 when a link is not one of its
 * objects or the list is longer than the slab (a cycle). */
static long list_length(struct page_desc *s, void *head)
{
	const struct uslub_cache *c = &uslub_caches[s->cls];
	char *base = page_address(s);
	long n = 0;
	for (void *p = head; p; p = uslub_slab_next_free(c, p)) {
		uintptr_t off = (uintptr_t)((char *)p - base);
		if ((char *)p < base || off >= (uintptr_t)s->objects * c->stride ||
		    off % c->stride != c->offset)
			return -1;
		if (++n > s->objects)
			return -1;
	}
	return n;
}

/* A thread state is what it says: the shared orphan, or the head of a PAGE_META block. */
static int is_thread(const struct uslub_thread *t)
{
	if (t == &uslub_orphan_thread)
		return 1;
	if (!t || !region_of(t) || ((uintptr_t)t & (USLUB_PAGE_SIZE - 1)))
		return 0;
	const struct page_desc *d = page_desc_of(t);
	return d->kind == PAGE_META && d->head == d && t->state == THREAD_LIVE;
}

static void check_slab(struct walk *w, struct page_desc *s, unsigned nid)
{
	if (s->cls >= USLUB_NR_CACHES) {
		bad(w, "slab %p: class %u", page_address(s), s->cls);
		return;
	}
	struct uslub_cache *c = &uslub_caches[s->cls];
	unsigned cls = s->cls;
	unsigned capacity = uslub_slab_capacity(c, s);
	if (!s->objects || s->objects > capacity || (c->debug && s->objects != capacity))
		bad(w, "slab %p (%s): %u of %u objects carved at order %u", page_address(s),
		    c->name, s->objects, capacity, s->order);
	w->slabs[cls]++;
	w->slabs_by_order[cls][s->order]++;
	w->objects[cls] += capacity;
	w->out->slabs++;
	uint64_t word = atomic_load_explicit(&s->word, memory_order_acquire);
	uint32_t inuse = w_inuse(word);
	long listed = list_length(s, decode(w_head(word), page_address(s)));
	struct uslub_thread *owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
	uint64_t live;
	if (listed < 0 || inuse > s->objects || (uint64_t)listed != s->objects - inuse) {
		bad(w, "slab %p (%s): slab list of %ld objects, inuse %u of %u", page_address(s),
		    c->name, listed, inuse, s->objects);
		return;
	}
	if (word & W_FROZEN) {
		w->out->frozen_slabs++;
		if (!is_thread(owner)) {
			bad(w, "slab %p (%s): frozen, owner %p is no thread", page_address(s),
			    c->name, (void *)owner);
			return;
		}
		struct cache_cpu *cc = &owner->cpu[cls];
		int held = cc->slab == s;
		unsigned k = 0;
		for (struct page_desc *p = cc->partial; p && !held && k <= cc->nr_partial;
		     p = p->next, k++)
			held = p == s;
		if (!held)
			bad(w, "slab %p (%s): frozen for thread %p, which holds it nowhere",
			    page_address(s), c->name, (void *)owner);
		long local = list_length(s, s->local_free);
		long thread = cc->slab == s ? list_length(s, cc->freelist) : 0;
		if (local < 0 || local != s->local_count || thread < 0 ||
		    (uint64_t)(local + thread) > inuse) {
			bad(w, "slab %p (%s): local list %ld (count %u), thread list %ld, inuse %u",
			    page_address(s), c->name, local, s->local_count, thread, inuse);
			return;
		}
		live = inuse - (uint64_t)local - (uint64_t)thread;
	} else {
		if (owner)
			bad(w, "slab %p (%s): not frozen but owned by %p", page_address(s), c->name,
			    (void *)owner);
		if (s->local_free)
			bad(w, "slab %p (%s): not frozen, local list not empty", page_address(s),
			    c->name);
		if (s->flags & PF_ON_PARTIAL) {
			w->out->partial_slabs++;
			w->partial[cls][nid]++;
			/* Also with untouched objects: an unfrozen slab keeps free ones on
			 * its list while it has any (slab.c, section 9). */
			if (inuse == s->objects)
				bad(w, "slab %p (%s): no object on its list, on the partial list",
				    page_address(s), c->name);
		} else {
			w->out->full_slabs++;
			if (inuse != s->objects || s->objects != capacity)
				bad(w, "slab %p (%s): %u of %u objects used, %u carved, on no list",
				    page_address(s), c->name, inuse, capacity, s->objects);
		}
		live = inuse;
	}
	w->out->live_by_class[cls] += live;
	w->out->live_objects += live;
	w->out->live_bytes += live * c->size;
}

/* free's fast path reads the test of the pointer's own page (slab.h): every page of a
 * slab must carry the slab's start, objects and class, and every other page test 0, or
 * a free into freed pages would pass as an object's. */
static void check_free_test(struct walk *w, struct page_desc *d, size_t len)
{
	bool slab = d->kind == PAGE_SLAB && d->cls < USLUB_NR_CACHES;
	const struct page_test *e = page_test_of(d);
	/* A medium block held, in a sheaf, or cached from one (marked free: slab.h,
	 * medium_tests_set) carries its sheaf's test on its first page; others none. */
	bool cached = d->flags & PF_CACHED, medium = d->kind == PAGE_LARGE && e->objects &&
						     len >= MEDIUM_MIN_PAGES &&
						     len <= MSHEAF_MAX_PAGES;
	void *start = !cached ? uslub_large_start(d)
			      : (char *)page_address(d) +
				    (medium_colorable((unsigned)len) ? medium_color_of(d) : 0);
	if (medium && cached && !is_marked_free(start))
		bad(w, "cached block %p: free's test kept but not marked free", start);
	for (size_t k = 0; k < len; k++) {
		bool ok = slab ? e[k].cpu_off == CPU_OFF(d->cls) &&
				     e[k].start == (uint32_t)(uintptr_t)page_address(d) &&
				     e[k].objects == d->objects
			  : medium && k == 0
			      ? e[k].cpu_off == MCPU_OFF(len) &&
				    e[k].start == (uint32_t)(uintptr_t)start && e[k].objects == 1
			      : e[k].cpu_off == 0 && e[k].objects == 0;
		if (!ok)
			bad(w,
			    "page %p (kind %u, page %zu of its block): free's test is %u, start "
			    "%#x",
			    page_address(d + k), d->kind, k, e[k].cpu_off, e[k].start);
	}
}

static void walk_region(struct walk *w, struct region *r, unsigned nid)
{
	struct uslub_check *out = w->out;
	out->regions++;
	out->desc_pages += FIRST_PAGE;
	if (r->grown < FIRST_PAGE || r->grown > REGION_PAGES) {
		bad(w, "region %p: grown %zu", (void *)r, r->grown);
		return;
	}
	if (region_of(r) != r || r->node != &uslub_nodes[nid])
		bad(w, "region %p: not in the region table under node %u", (void *)r, nid);
	out->ungrown_pages += REGION_PAGES - r->grown;
	w->grown_pages += r->grown - FIRST_PAGE;

	struct page_desc *first = (struct page_desc *)r;
	size_t i = FIRST_PAGE;
	while (i < r->grown) {
		struct page_desc *d = first + i;
		size_t len;
		if (d->kind == PAGE_FREE || d->kind == PAGE_EXTENT) {
			unsigned o = d->order, ext = d->kind == PAGE_EXTENT;
			len = ext ? d->objects : (size_t)1 << o;
			if ((!ext && (o > USLUB_MAX_ORDER || (i & (len - 1)))) || !len ||
			    i + len > r->grown) {
				bad(w, "free block %p: order %u at page %zu of %zu",
				    page_address(d), o, i, r->grown);
				i++;
				continue;
			}
			for (size_t k = 1; k < len; k++)
				if (d[k].kind != PAGE_UNUSED || d[k].head)
					bad(w, "free block %p: page %zu in it: kind %u, head %p",
					    page_address(d), k, d[k].kind, (void *)d[k].head);
			check_free_test(w, d, len);
			if (!ext)
				w->free_heads[nid][o]++;
			w->free_pages[nid] += len;
			if (d->flags & PF_RELEASED)
				out->released_pages += len;
			else if (d->flags & PF_COLD)
				out->free_cold_pages += len;
			else {
				out->free_warm_pages += len;
				w->warm_pages[nid] += len;
			}
			i += len;
			continue;
		}
		if (d->kind == PAGE_UNUSED) {
			check_free_test(w, d, 1);
			w->loose++;
			i++;
			continue;
		}
		len = extent(d);
		if (!len || i + len > r->grown) {
			bad(w, "page %p: kind %u, head %p, %zu pages at page %zu of %zu",
			    page_address(d), d->kind, (void *)d->head, len, i, r->grown);
			i++;
			continue;
		}
		for (size_t k = 1; k < len; k++)
			if (d[k].head != ((d->flags & PF_BARE) ? NULL : d) ||
			    d[k].kind != PAGE_UNUSED)
				bad(w, "block %p (kind %u): tail page %zu has head %p, kind %u",
				    page_address(d), d->kind, k, (void *)d[k].head, d[k].kind);
		check_free_test(w, d, len);
		if (d->kind == PAGE_SLAB) {
			out->slab_pages += len;
			check_slab(w, d, nid % MAX_NODES);
		} else if (d->kind == PAGE_LARGE &&
			   ((d->flags & PF_CACHED) || medium_in_sheaf(d, uslub_large_start(d)))) {
			/* Freed, waiting in a thread's medium sheaf or medium-block cache:
			 * free, not live. */
			out->cached_large_pages += len;
		} else if (d->kind == PAGE_LARGE) {
			out->large_pages += len;
			out->large_blocks++;
			out->live_bytes += len << USLUB_PAGE_SHIFT;
		} else {
			out->meta_pages += len;
		}
		i += len;
	}
}

/* Whether page d is loose: of no kind, and inside no free block and no extent. */
static int is_loose(struct page_desc *d)
{
	struct region *r = region_of(d);
	uintptr_t idx = page_idx(d);
	if (!r || idx < FIRST_PAGE || idx >= r->grown || d->kind != PAGE_UNUSED)
		return 0;
	for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++) {
		uintptr_t start = idx & ~(((uintptr_t)1 << o) - 1);
		if (start < FIRST_PAGE)
			break;
		struct page_desc *h = d - (idx - start);
		if (h->kind == PAGE_FREE && h->order >= o)
			return 0;
	}
	for (uintptr_t j = 1; j <= (1UL << USLUB_MAX_ORDER) && idx - j >= FIRST_PAGE; j++)
		if (extent(d - j) > j)
			return 0;
	return 1;
}

/* An object in a sheaf or a barn: the start of an object of its own cache's slabs,
 * marked free, and free to the program though its slab counts it in use. */
static void check_sheaf_object(struct walk *w, void *p, unsigned cls, const char *where)
{
	struct page_desc *s = block_of(p);
	if (!s || s->kind != PAGE_SLAB || s->cls != cls || uslub_slab_object_start(s, p) != p ||
	    !is_marked_free(p)) {
		bad(w, "%s of %s holds %p, not a free object of the cache", where,
		    uslub_caches[cls].name, p);
		return;
	}
	w->out->sheaf_objects++;
	w->out->live_objects--;
	w->out->live_by_class[cls]--;
	w->out->live_bytes -= uslub_caches[cls].size;
}

static void check_barns(struct walk *w)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = uslub_barns[slot];
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++) {
			if (b[i].count > b[i].limit) {
				bad(w, "node %u: %s barn holds %u objects, limit %u",
				    slot / BARN_SHARDS, uslub_caches[i].name, b[i].count,
				    b[i].limit);
				continue;
			}
			for (unsigned j = 0; j < b[i].count; j++)
				check_sheaf_object(w, b[i].objects[j], i, "a barn");
		}
	}
}

static void check_thread(struct walk *w, struct uslub_thread *t, uint64_t *held, uint64_t *pcp)
{
	w->out->threads++;
	w->large_unfolded += (uint64_t)atomic_load(&t->large_delta); /* page/usage.c */
	for (unsigned i = 0; i < USLUB_NR_CACHES; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		if (cc->slab) {
			struct page_desc *s = cc->slab;
			(*held)++;
			if (s->kind != PAGE_SLAB || s->owner != t || s->cls != i)
				bad(w, "thread %p: current %s slab %p is not its own", (void *)t,
				    uslub_caches[i].name, page_address(s));
		} else if (cc->freelist) {
			bad(w, "thread %p: %s freelist without a slab", (void *)t,
			    uslub_caches[i].name);
		}
		unsigned k = 0;
		for (struct page_desc *s = cc->partial; s; s = s->next) {
			if (++k > cc->nr_partial || s->kind != PAGE_SLAB || s->owner != t ||
			    s->cls != i) {
				bad(w, "thread %p: %s partial list broken at slab %p (%u listed)",
				    (void *)t, uslub_caches[i].name, page_address(s),
				    cc->nr_partial);
				break;
			}
		}
		if (k != cc->nr_partial)
			bad(w, "thread %p: %s partial list of %u, counted %u", (void *)t,
			    uslub_caches[i].name, k, cc->nr_partial);
		*held += k;
		/* A sheaf holds starts of objects of its own cache's slabs. */
		if (cc->sheaf_count > cc->sheaf_cap || cc->sheaf_count > SHEAF_MAX) {
			bad(w, "thread %p: %s sheaf of %u objects, capacity %u", (void *)t,
			    uslub_caches[i].name, cc->sheaf_count, cc->sheaf_cap);
			continue;
		}
		for (unsigned j = 0; j < cc->sheaf_count; j++)
			check_sheaf_object(w, cc->sheaf[j], i, "a thread's sheaf");
	}
	/* The page cache: each list well linked (which also keeps a block off two lists: the
	 * heads are distinct, and a shared block would break a back link), walked no
	 * further than the pages it claims, and every page of every block loose. */
	uint64_t pages = 0;
	for (unsigned o = 0; o < PCP_ORDERS; o++) {
		struct cds_list_head *h = &t->pcp[o], *e = h;
		uint64_t k = 0;
		for (;; k++) {
			struct cds_list_head *next = e->next;
			if (!next || next->prev != e || (k << o) > t->pcp_count) {
				bad(w, "thread %p: page cache list of order %u broken", (void *)t,
				    o);
				break;
			}
			if (next == h)
				break;
			struct page_desc *d = cds_list_entry(next, struct page_desc, list);
			pages += 1U << o;
			for (unsigned j = 0; j < (1U << o); j++)
				if (!is_loose(d + j) || (j == 0 && d->order != o))
					bad(w,
					    "thread %p: cached block %p (order %u) is also "
					    "elsewhere (page %u: kind %u, order %u)",
					    (void *)t, page_address(d), o, j, d[j].kind,
					    d[j].order);
			e = next;
		}
		if (k != t->pcp_blocks[o] || (o && t->pcp_blocks[o] > PCP_HIGH_ORDER_PAGES >> o))
			bad(w, "thread %p: %lu cached blocks of order %u, %u counted", (void *)t,
			    (unsigned long)k, o, t->pcp_blocks[o]);
	}
	if (pages != t->pcp_count)
		bad(w, "thread %p: %u cached pages counted, %lu on its lists", (void *)t,
		    t->pcp_count, (unsigned long)pages);
	if (t->pcp_count > t->pcp_high || t->pcp_high > PCP_HIGH)
		bad(w, "thread %p: %u cached pages, high %u (at most %u)", (void *)t, t->pcp_count,
		    t->pcp_high, PCP_HIGH);
	*pcp += pages;
}

static void check_buddy(struct walk *w, unsigned nid)
{
	struct uslub_node *n = &uslub_nodes[nid];
	for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++) {
		uint64_t k = 0, nwarm = 0;
		struct page_desc *d;
		cds_list_for_each_entry(d, &n->free_area[o], list)
		{
			if (++k > w->free_heads[nid][o] + 1)
				break; /* longer than what the walk found: a cycle, or strays */
			if (d->kind != PAGE_FREE || d->order != o || !region_of(d) ||
			    region_of(d)->node != n)
				bad(w, "node %u order %u: list entry %p is kind %u order %u", nid,
				    o, page_address(d), d->kind, d->order);
			if (!(d->flags & PF_COLD))
				nwarm++;
		}
		if (k != w->free_heads[nid][o] || k != n->nr_free[o])
			bad(w, "node %u order %u: %lu on the list, %lu counted, %lu found", nid, o,
			    (unsigned long)k, (unsigned long)n->nr_free[o],
			    (unsigned long)w->free_heads[nid][o]);
		if (nwarm != n->nr_warm[o])
			bad(w, "node %u order %u: %lu warm listed, %lu counted", nid, o,
			    (unsigned long)nwarm, (unsigned long)n->nr_warm[o]);
	}
	if (n->free_pages != w->free_pages[nid] || n->warm_free_pages != w->warm_pages[nid])
		bad(w, "node %u: %lu free pages (%lu warm) counted, %lu (%lu) found", nid,
		    (unsigned long)n->free_pages, (unsigned long)n->warm_free_pages,
		    (unsigned long)w->free_pages[nid], (unsigned long)w->warm_pages[nid]);
}

static void check_caches(struct walk *w, unsigned nr_nodes)
{
	for (unsigned i = 0; i < USLUB_NR_CACHES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		if (atomic_load(&c->nr_slabs) != w->slabs[i] ||
		    atomic_load(&c->total_objects) != w->objects[i])
			bad(w, "%s: %lu slabs and %lu objects counted, %lu and %lu found", c->name,
			    (unsigned long)atomic_load(&c->nr_slabs),
			    (unsigned long)atomic_load(&c->total_objects),
			    (unsigned long)w->slabs[i], (unsigned long)w->objects[i]);
		for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++)
			if (atomic_load(&c->nr_slabs_by_order[o]) != w->slabs_by_order[i][o])
				bad(w, "%s: order %u: %lu slabs counted, %lu found", c->name, o,
				    (unsigned long)atomic_load(&c->nr_slabs_by_order[o]),
				    (unsigned long)w->slabs_by_order[i][o]);
		for (unsigned nid = 0; nid < nr_nodes; nid++) {
			struct cache_node *n = &uslub_cache_nodes[nid][i];
			uint64_t k = 0;
			struct page_desc *s;
			cds_list_for_each_entry(s, &n->partial, list)
			{
				if (++k > w->partial[i][nid] + 1)
					break;
				if (s->kind != PAGE_SLAB || s->cls != i ||
				    !(s->flags & PF_ON_PARTIAL) ||
				    (atomic_load(&s->word) & W_FROZEN) ||
				    (unsigned)(region_of(s)->node - uslub_nodes) % MAX_NODES != nid)
					bad(w,
					    "%s node %u: partial list entry %p is not a partial "
					    "slab of this cache and node",
					    c->name, nid, page_address(s));
			}
			if (k != n->nr_partial || k != w->partial[i][nid])
				bad(w,
				    "%s node %u: %lu on the partial list, %lu counted, %lu found",
				    c->name, nid, (unsigned long)k, (unsigned long)n->nr_partial,
				    (unsigned long)w->partial[i][nid]);
		}
	}
}

uint64_t uslub_check_heap(struct uslub_check *out, int fd)
{
	static struct walk w; /* large; a walk is rare, and serialised by the locks */
	uslub_lock_all();
	unsigned nr_nodes = uslub_nr_nodes < MAX_NODES ? uslub_nr_nodes : MAX_NODES;
	memset(&w, 0, sizeof(w));
	memset(out, 0, sizeof(*out));
	w.out = out;
	w.fd = fd;
	uslub_out_init(&w.msg, fd);

	/* Every zone of every node: slabs, and large blocks (one zone an arena). */
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (z % MAX_NODES < nr_nodes && zone_in_use(z))
			for (struct region *r = uslub_nodes[z].regions; r; r = r->next)
				walk_region(&w, r, z);
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (z % MAX_NODES < nr_nodes && zone_in_use(z))
			check_buddy(&w, z);
	check_caches(&w, nr_nodes);

	uint64_t held = 0, pcp = 0;
	for (struct uslub_thread *t = uslub_registry; t; t = t->reg_next)
		check_thread(&w, t, &held, &pcp);
	if (held != out->frozen_slabs)
		bad(&w, "%lu slabs held by threads, %lu frozen slabs found", (unsigned long)held,
		    (unsigned long)out->frozen_slabs);
	out->pcp_pages = pcp;
	if (pcp != w.loose)
		bad(&w, "%lu pages in thread caches, %lu pages belong nowhere else",
		    (unsigned long)pcp, (unsigned long)w.loose);
	check_barns(&w);

	/* Cached blocks count as large until they go back to the buddy (slab/medium.c). */
	uint64_t large = atomic_load(&uslub_large_bytes) + w.large_unfolded;
	uint64_t found = (out->large_pages + out->cached_large_pages) << USLUB_PAGE_SHIFT;
	if (large != found)
		bad(&w, "%lu bytes counted as large, %lu found", (unsigned long)large,
		    (unsigned long)found);
	out->huge_bytes = atomic_load(&uslub_huge_bytes);
	out->live_bytes += out->huge_bytes;
	/* Memory taken from the OS: what the buddy grew, less what went back, plus huge
	 * blocks, live or cached. (Descriptor arrays and the huge table are not counted.) */
	uint64_t mapped = atomic_load(&uslub_mapped_bytes);
	uint64_t expect = ((w.grown_pages - out->released_pages) << USLUB_PAGE_SHIFT) +
			  out->huge_bytes + atomic_load(&uslub_huge_cached_bytes);
	if (mapped != expect)
		bad(&w, "%lu bytes counted as taken from the OS, %lu found", (unsigned long)mapped,
		    (unsigned long)expect);

	uslub_unlock_all();
	uslub_out_flush(&w.msg);
	return out->errors;
}

void uslub_check_print(const struct uslub_check *c, int fd)
{
	struct uslub_out o;
	uslub_out_init(&o, fd);
	uslub_printf(&o,
		     "heap: %lu regions; pages: slab %lu, large %lu, thread structs %lu, "
		     "thread caches %lu, free warm %lu, free cold %lu, returned to the OS %lu, "
		     "descriptors %lu, not grown %lu\n",
		     (unsigned long)c->regions, (unsigned long)c->slab_pages,
		     (unsigned long)c->large_pages, (unsigned long)c->meta_pages,
		     (unsigned long)c->pcp_pages, (unsigned long)c->free_warm_pages,
		     (unsigned long)c->free_cold_pages, (unsigned long)c->released_pages,
		     (unsigned long)c->desc_pages, (unsigned long)c->ungrown_pages);
	uslub_printf(&o,
		     "heap: slabs %lu (held by threads %lu, partial %lu, full %lu); live objects "
		     "%lu, in sheaves %lu, large blocks %lu, live bytes %lu; %lu threads; %lu "
		     "inconsistencies\n",
		     (unsigned long)c->slabs, (unsigned long)c->frozen_slabs,
		     (unsigned long)c->partial_slabs, (unsigned long)c->full_slabs,
		     (unsigned long)c->live_objects, (unsigned long)c->sheaf_objects,
		     (unsigned long)c->large_blocks, (unsigned long)c->live_bytes,
		     (unsigned long)c->threads, (unsigned long)c->errors);
	uslub_out_flush(&o);
}
