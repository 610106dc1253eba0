/* The slab layer: the kmalloc caches and their slabs (cache.c, slab.c), the partial
 * lists (partial.c) and large blocks (large.c); and the inline helpers on a slab's free
 * lists that the thread layer's slow paths share with it. */
#ifndef USLUB_SLAB_H
#define USLUB_SLAB_H

#include "hooks.h"
#include "os/report.h"
#include "page/page.h"
#include "types.h"
#include "uslub.h" /* the object caches' flags */

#pragma GCC visibility push(hidden)

/* ---- the caches (cache.c) -------------------------------------------------------- */

extern struct uslub_cache uslub_caches[USLUB_NR_CACHES];
/* Slots in use: the kmalloc caches and the object caches made so far (objcache.c), which
 * take the next slot and publish it here (release) once it is set up. Walkers of every
 * cache read it with uslub_caches_in_use(). */
extern _Atomic unsigned uslub_nr_caches;
static inline unsigned uslub_caches_in_use(void)
{
	return atomic_load_explicit(&uslub_nr_caches, memory_order_acquire);
}

/* The caches' per-node parts, a row per node, set up for the nodes in use only: a
 * process on one node touches one row (3 KiB), not a row's worth in every cache
 * (MAX_NODES rows of 64-byte entries spread over 54 KiB, all written at start-up when
 * they sat inside struct uslub_cache). */
extern struct cache_node uslub_cache_nodes[MAX_NODES][USLUB_NR_CACHES];
static inline struct cache_node *cache_node_of(const struct uslub_cache *c, unsigned nid)
{
	return &uslub_cache_nodes[nid][c->cls];
}
/* Rows [from, to): at start-up for the nodes known then, and by NUMA discovery for the
 * rest before it publishes their count. */
void uslub_cache_nodes_init(unsigned from, unsigned to);

void uslub_caches_init(void);
/* Where an object of `c` begins if `p` is one, else NULL. */
void *uslub_slab_object_start(struct page_desc *s, const void *p);

/* ---- large blocks (large.c) -------------------------------------------------------- */

void *uslub_large_alloc(size_t size, size_t align, bool zero);
/* Free large block p, whose head descriptor is d: classified (api/lookup.c), its start
 * and not freed already. */
void uslub_large_free(struct page_desc *d, void *p);
/* A large block the quarantine held (PF_HELD) back to the medium-block cache or the page
 * allocator, as its free would have sent it. */
void uslub_large_release(struct page_desc *d);
/* ---- medium blocks' colours ----------------------------------------------------------
 *
 * A medium block of the sheaves' page counts but the largest starts the program's bytes
 * at one of MEDIUM_COLORS cache lines of its first page, chosen by the page's address
 * (jemalloc's cache-oblivious large blocks; the kernel's SLAB coloured its slabs for the
 * same reason). Page-aligned blocks put every block's first line, which malloc's caller
 * and free touch, in 1 of 64 sets of the L1 and L2 caches: 1024 blocks of 8-32 KiB
 * replaced at random missed there at nearly every free. The colour needs room: a size is
 * given the pages that hold it and MEDIUM_COLOR_ROOM bytes more (medium_pages), so that
 * any block a sheaf holds, whatever its colour, fits any size the sheaf serves. The
 * largest count's sheaf (128 KiB, which programs ask for exactly) holds page-aligned
 * blocks, and so do blocks aligned beyond a cache line and the checkers' runs. Figures:
 * README.md, "Threads and medium blocks". */
#define MEDIUM_COLOR_BITS 3
#define MEDIUM_COLORS	  (1 << MEDIUM_COLOR_BITS)
#define MEDIUM_COLOR_ROOM ((MEDIUM_COLORS - 1) * 64)

/* A hash of the page number, not its low bits: blocks cut from the buddy allocator start
 * at multiples of their power of two, so the low bits of most are 0. */
static inline size_t medium_color_of(const struct page_desc *d)
{
	uint32_t page = (uint32_t)((uintptr_t)page_address(d) >> USLUB_PAGE_SHIFT);
	return (size_t)((page * 0x9e3779b1u) >> (32 - MEDIUM_COLOR_BITS)) * 64;
}
/* Red zone before a block laid out for the checkers (PF_GUARD, large.c): its first page;
 * or the colour of a coloured one. */
static inline size_t uslub_large_lead(const struct page_desc *d)
{
	if (d->flags & PF_GUARD)
		return USLUB_PAGE_SIZE;
	return (d->flags & PF_COLOR) ? medium_color_of(d) : 0;
}
/* Large-block flag: a block of more than MEDIUM_MAX_PAGES pages whose tail pages'
 * descriptors name no block - not marked when it is made nor cleared when it goes, as
 * every page of a medium block is. Marking is a cache line a page each way: 3,800 for a
 * 15 MiB buffer, 2-3% of big_buffers' and malloc_large's time when only spans went bare
 * (tools/bench/results/big-buffers.md), and a quarter of realloc_mix's instructions in the
 * allocator for blocks of 128 KiB - 4 MiB (tools/bench/results/bare-blocks.md). A pointer
 * inside one finds no block, and its report looks the block up
 * (uslub_large_bare_around). Blocks the medium-block cache may hold stay marked; the
 * checkers and letters for every cache look pointers up inside large blocks, and mark
 * every page. */
#define PF_BARE 0x80
/* The live bare block that p lies in past its first page, or NULL: for reports. */
struct page_desc *uslub_large_bare_around(const void *p);
/* Where the program's bytes of large block d begin: the pointer malloc returned. */
static inline void *uslub_large_start(struct page_desc *d)
{
	return (char *)page_address(d) + uslub_large_lead(d);
}
/* The bytes from that start to the end of the block's pages, and the request among them. */
static inline size_t uslub_large_span(const struct page_desc *d)
{
	return ((size_t)d->objects << USLUB_PAGE_SHIFT) - uslub_large_lead(d);
}
size_t uslub_large_request(const struct page_desc *d);
/* The threads among whom the medium sheaves' and medium-block caches' bounds are shared
 * (types.h): those using medium sheaves, or every state while none does or where address
 * space is bounded - there a thread's share of memory others do not use would be out of
 * their reach (6 threads at 128 KiB under `ulimit -v 600000` failed a malloc in 3 runs of
 * 4, none with every state counted; tools/bench/results/medium-users.md). */
static inline unsigned uslub_medium_sharers(void)
{
	unsigned users = __atomic_load_n(&uslub_medium_users, __ATOMIC_RELAXED);
	if (!users || __atomic_load_n(&uslub_space_limited, __ATOMIC_RELAXED))
		users = __atomic_load_n(&uslub_nr_thread_states, __ATOMIC_RELAXED);
	return users ? users : 1;
}
/* Give a thread's cached large blocks back to the page allocator (exit, malloc_trim). */
void uslub_large_cache_drain(struct uslub_thread *t);
size_t uslub_large_usable(struct page_desc *d);

/* ---- free's test of a medium block (types.h, MSHEAF_*) ---------------------------------- */

/* Blocks of n pages whose pages carry free's test, so that malloc's and free's fast paths
 * serve them from the medium sheaves: unguarded, outside the checkers' runs (their
 * operations take the slow paths, which keep the request). */
static inline bool medium_testable(unsigned n)
{
	return n >= MEDIUM_MIN_PAGES && n <= MSHEAF_MAX_PAGES && !uslub_block_debug &&
	       !uslub_block_pad;
}
/* The test on the first page of block d of n pages: its start, one object, its page
 * count's medium sheaf. Set while the block is the program's or in a sheaf, and kept
 * while a block a sheaf spilled waits in its thread's medium-block cache (still marked
 * free, so a second free stops on the fast path as in the sheaf); clear (0) in a depot
 * or a zone, and for a block the cache took from anywhere else, so free's slow path sees
 * those. Kept, the sheaf's spills and refills write no test: a line of tests covers 8
 * pages, those of other threads' blocks too, whose frees read it - rewritten at each
 * spill and refill, it made two threads replacing 8-32 KiB blocks run at one thread's
 * speed (README, "Threads and medium blocks"). Only the first page: the block's start is
 * the one pointer free may be given, and its other pages keep the test 0 of pages that
 * are no slab's, which sends a pointer into them to the slow path's report as surely (a
 * test on each of 32 pages was 32 stores, and four lines, every time a block went into a
 * sheaf or out of one). */
static inline struct page_test medium_test(unsigned n, const void *start)
{
	return (struct page_test){(uint32_t)(uintptr_t)start, 1, MCPU_OFF(n)};
}
static inline void medium_tests_set(struct page_desc *d, unsigned n, const void *start)
{
	*page_test_of(d) = medium_test(n, start);
}
/* Whether d's test is a sheaf of n pages' at start already. */
static inline bool medium_test_is(const struct page_desc *d, unsigned n, const void *start)
{
	struct page_test want = medium_test(n, start), *e = page_test_of(d);
	return e->start == want.start && e->objects == want.objects && e->cpu_off == want.cpu_off;
}
/* Sheaves of n pages hold coloured blocks (below its largest count). */
static inline bool medium_colorable(unsigned n)
{
	return medium_testable(n) && n < MSHEAF_MAX_PAGES;
}
/* The page counts the medium-block cache keeps: each up to MSHEAF_MAX_PAGES, and past it
 * every eighth up to MEDIUM_MAX_PAGES (160, 192, 224, 256 KiB, as the large classes above,
 * large.c: by the page, blocks of 132-256 KiB replaced at random were each their own
 * count, and a cache of 4 MiB missed one time in five). */
static inline bool medium_count(size_t n)
{
	return n >= MEDIUM_MIN_PAGES && n <= MEDIUM_MAX_PAGES &&
	       (n <= MSHEAF_MAX_PAGES || !(n % 8));
}
/* The largest medium request: the largest sheaf's where address space is bounded, whose
 * blocks past it take their exact pages (large.c, class_pages). */
static inline size_t medium_max_bytes(void)
{
	unsigned n = __atomic_load_n(&uslub_space_limited, __ATOMIC_RELAXED) ? MSHEAF_MAX_PAGES
									     : MEDIUM_MAX_PAGES;
	return (size_t)n << USLUB_PAGE_SHIFT;
}
/* ... and the counts the cache takes now: where address space is bounded, no request
 * past MSHEAF_MAX_PAGES would find them there (a 6-thread program at 256 KiB under
 * `ulimit -v` ran at 0.43x while cached blocks no request took filled the caches). */
static inline bool medium_cacheable(size_t n)
{
	return medium_count(n) && ((n << USLUB_PAGE_SHIFT) <= medium_max_bytes());
}
static inline unsigned medium_count_up(size_t n)
{
	return (unsigned)(n <= MSHEAF_MAX_PAGES ? n : (n + 7) & ~(size_t)7);
}
/* The pages of a medium request: with room for a colour where blocks of that count are
 * coloured, the largest sheaf's count past that, and a cache count above. */
static inline unsigned medium_pages(size_t size)
{
	size_t n = (size + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT;
	if (n > MSHEAF_MAX_PAGES || !medium_testable(MEDIUM_MIN_PAGES))
		return medium_count_up(n);
	n = (size + MEDIUM_COLOR_ROOM + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT;
	return n < MSHEAF_MAX_PAGES ? (unsigned)n : MSHEAF_MAX_PAGES;
}
/* The largest request blocks of n pages serve (medium_pages' inverse). */
static inline size_t medium_fits(unsigned n)
{
	return ((size_t)n << USLUB_PAGE_SHIFT) - (medium_colorable(n) ? MEDIUM_COLOR_ROOM : 0);
}
/* Block d coloured or not (an unguarded one); returns its start, uslub_large_start's. */
static inline void *medium_color(struct page_desc *d, bool colored)
{
	d->flags = (uint8_t)((d->flags & ~PF_COLOR) | (colored ? PF_COLOR : 0));
	return (char *)page_address(d) + (colored ? medium_color_of(d) : 0);
}
/* Free block d of n pages as a sheaf of n pages holds it: coloured where that count is,
 * else at its page. */
static inline void *medium_sheaf_color(struct page_desc *d, unsigned n)
{
	return medium_color(d, medium_colorable(n));
}
static inline void medium_tests_clear(struct page_desc *d)
{
	*page_test_of(d) = (struct page_test){0, 0, 0};
}
/* d: a large block's head. Larger blocks carry no test, and their descriptor is read
 * already where the test's line may not be. */
static inline bool medium_tested(const struct page_desc *d)
{
	return d->objects <= MSHEAF_MAX_PAGES && page_test_of(d)->objects != 0;
}
/* Large block d, started at p, waits in a medium sheaf: tested, and marked free as every
 * block a sheaf holds is (a live block's second word is the program's). */
static inline bool medium_in_sheaf(const struct page_desc *d, const void *p)
{
	return medium_tested(d) && is_marked_free(p);
}

/* ---- slabs ------------------------------------------------------------------------- */

/* Objects in a slab of `order` pages: plain caches fill it; a debug cache's slots are
 * `stride` apart and the last object's right red zone follows them (debug.h). */
static inline unsigned uslub_cache_objects(const struct uslub_cache *c, unsigned order)
{
	size_t bytes = USLUB_PAGE_SIZE << order;
	if (c->debug)
		return (unsigned)((bytes - c->tail) / c->stride);
	return (unsigned)(bytes / c->size);
}
/* Objects in slab s once all are carved. `s->objects` counts those carved so far: the
 * objects past it have never been touched and are free (slab.c, section 9). */
static inline unsigned uslub_slab_capacity(const struct uslub_cache *c, const struct page_desc *s)
{
	return s->order == c->order ? c->objects : uslub_cache_objects(c, s->order);
}
/* Carve the next step of s's untouched objects into a list of free, marked objects:
 * its head, its last object in *tail and its length in *count (NULL, 0 when every
 * object is carved). For the owner of a frozen slab or the holder of its node's
 * list_lock when it is unfrozen; the caller accounts for the objects in the slab word. */
void *uslub_slab_carve(struct uslub_cache *c, struct page_desc *s, void **tail, unsigned *count);
/* The same for the owner, which holds the objects carved: counted in use. */
void *uslub_slab_extend(struct uslub_cache *c, struct page_desc *s, unsigned *count);
/* The free pointer stored in a free object (decoded, for walkers such as check.c). */
void *uslub_slab_next_free(const struct uslub_cache *c, void *object);

/* ---- what the slow-path files share (slab.c, alloc.c, free.c, sheaf.c) ---------- */

/* Free pointers: at the object's start in a plain cache; in a debug cache in the slot's
 * metadata, where debug/ decodes and checks them (through its hooks). */
static inline void *get_next(const struct uslub_cache *c, void *object)
{
	if (unlikely(c->debug))
		return uslub_hooks.get_next(c, object);
	return link_get(object);
}

static inline void set_next(const struct uslub_cache *c, void *object, void *next)
{
	if (unlikely(c->debug))
		uslub_hooks.set_next(c, object, next);
	else
		link_set(object, next);
}

/* The next object on a free list of slab s, checked: a link that does not name an
 * object of s stops the program instead of being followed (walks of lists the fast
 * path does not pop: deactivation, the consistency walker). */
static inline void *get_next_checked(const struct uslub_cache *c, struct page_desc *s, void *object)
{
	void *next = get_next(c, object);
	/* A plain cache answers with the multiply the free fast path uses, not a division:
	 * the refill checks one link per load. */
	if (next && unlikely(c->debug ? uslub_slab_object_start(s, next) != next
				      : !plain_object_at(s, next)))
		uslub_report_corrupt("free pointer outside its slab", c, page_address(s), object);
	return next;
}

/* A free object of a plain cache carries its mark; a debug cache keeps the state in
 * its metadata instead (debug.c). */
static inline void mark_free_plain(const struct uslub_cache *c, void *object)
{
	if (likely(!c->debug))
		mark_free(object);
}

static inline uintptr_t slab_bits(struct page_desc *s)
{
	return (uintptr_t)page_address(s) | (USLUB_PAGE_SHIFT + s->order);
}

static inline unsigned slab_nid(struct page_desc *s)
{
	/* A slab may sit in a region of its node's large-block zone (borrowed pages). */
	return region_of(s)->nid;
}

/* A slab belongs to the node of its region, whichever thread frees into it. */
static inline struct cache_node *node_of_slab(struct uslub_cache *c, struct page_desc *s)
{
	return cache_node_of(c, slab_nid(s));
}

/* Counters of threads without state of their own go straight to the cache, atomically:
 * those are rare and off the fast path. */
static inline void stat_shared(struct uslub_thread *t, unsigned cls, enum uslub_stat_item item)
{
#if USLUB_STATS_ENABLED
	if (likely(t->state == THREAD_LIVE || t->state == THREAD_ORPHAN))
		uslub_own_store(t->cpu[cls].stat[item], t->cpu[cls].stat[item] + 1);
	else
		__atomic_fetch_add(&uslub_caches[cls].stat[item], 1, __ATOMIC_RELAXED);
#else
	(void)t, (void)cls, (void)item;
#endif
}

/* A counter of the cache itself, for an event no thread's cache_cpu should be written
 * for (a thread's early objects, sheaf.c): atomically, as stat_shared's. */
#if USLUB_STATS_ENABLED
#define stat_cache(c, item) __atomic_fetch_add(&(c)->stat[USLUB_STAT_##item], 1, __ATOMIC_RELAXED)
#else
#define stat_cache(c, item) ((void)(c))
#endif
/* ... into cc, a thread's, unless it is NULL. */
#define stat_to(cc, c, item)                                                                       \
	do {                                                                                       \
		if (cc)                                                                            \
			uslub_stat(cc, item);                                                      \
		else                                                                               \
			stat_cache(c, item);                                                       \
	} while (0)

static inline void add_partial(struct cache_node *n, struct page_desc *s, bool tail)
{
	if (tail)
		cds_list_add_tail(&s->list, &n->partial);
	else
		cds_list_add(&s->list, &n->partial);
	s->flags |= PF_ON_PARTIAL;
	/* Under list_lock, but get_partial_node peeks at it without: an atomic store. */
	__atomic_store_n(&n->nr_partial, n->nr_partial + 1, __ATOMIC_RELAXED);
}

static inline void remove_partial(struct cache_node *n, struct page_desc *s)
{
	cds_list_del(&s->list);
	s->flags &= (uint8_t)~PF_ON_PARTIAL;
	__atomic_store_n(&n->nr_partial, n->nr_partial - 1, __ATOMIC_RELAXED);
}

/* A free by the slab's owner: onto its local list, no atomic (the fast path inlines the
 * same for plain caches). */
static inline void push_local(const struct uslub_cache *c, struct page_desc *s, void *p)
{
	set_next(c, p, s->local_free);
	mark_free_plain(c, p);
	s->local_free = p;
	s->local_count++;
}

/* The caches at start-up, in two steps around debug/'s (uslub_debug_init, which gives
 * the debug caches their slot layout and seeds uslub_random): uslub_caches_init
 * sets every cache's plain layout; uslub_caches_open then draws the keys and sets what
 * follows from the layout - orders, counts, sheaf capacities - and the cache-node rows. */
void uslub_caches_open(void);
/* Objects a carving step adds, by class (cache.c; slab.c, section 9). */
extern uint16_t uslub_carve_step[USLUB_NR_CACHES];
/* What follows from a cache's layout: magic, orders, counts, sheaf capacity (cache.c). */
void uslub_cache_setup(struct uslub_cache *c);

/* ---- object caches (objcache.c) ------------------------------------------------- */

/* A program's cache (uslub_cache_create): merged into a compatible cache (a kmalloc cache
 * or another object cache) unless its flags, its constructor or USLUB_MERGE=0 forbid it,
 * else made in the next free slot. `debug` is what debug/ asks for this cache (0 when it
 * asks nothing); `setup`, when given, lays a new slot out for debug/ before its orders are
 * computed. NULL with errno EINVAL or ENOSPC (no slot left). */
struct uslub_cache *uslub_objcache_make(const char *name, size_t size, size_t align, unsigned flags,
					void (*ctor)(void *), unsigned debug,
					void (*setup)(struct uslub_cache *c));
/* A handle going away (uslub_cache_destroy): an alias leaves its cache; a cache of its
 * own is marked dead, and nothing merges into it again. */
void uslub_objcache_release(struct uslub_cache *c);
bool uslub_objcache_is_alias(const struct uslub_cache *c);
/* The handles merged into a cache (aliases), for the statistics: calls fn for each. */
void uslub_objcache_aliases(const struct uslub_cache *c,
			    void (*fn)(const struct uslub_cache *alias, void *arg), void *arg);
/* Is slot cls a cache to show: a kmalloc cache, or an object cache not destroyed. */
static inline bool uslub_cache_shown(unsigned cls)
{
	return cls < USLUB_NR_CLASSES ||
	       !atomic_load_explicit(&uslub_caches[cls].dead, memory_order_relaxed);
}

/* Slabs of TYPESAFE_BY_RCU caches go back to the page allocator only after an RCU grace
 * period: uslub_discard_slab pushes them here, and the next safe point hands the batch to
 * the program's call_rcu (api/objcache.c, through uslub_hooks.rcu_flush). */
void uslub_rcu_defer_slab(struct page_desc *s);
/* Take the slabs deferred so far (a list through `next`), and count them out. */
struct page_desc *uslub_rcu_take_slabs(void);
/* Pending work of RCU, for the statistics: slabs and objects waiting for a grace period,
 * and batches handed to call_rcu. */
struct uslub_rcu_stats {
	_Atomic uint64_t pending_slabs, pending_objects, batches, freed_objects, freed_slabs;
};
extern struct uslub_rcu_stats uslub_rcu_stats;

/* cc: where its counters go; NULL for the cache's own (uslub_deactivate_shared). */
struct page_desc *uslub_new_slab(struct uslub_cache *c, struct uslub_thread *t,
				 struct cache_cpu *cc, void **fl);
void uslub_discard_slab(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);
void uslub_deactivate_slab(struct uslub_cache *c, struct page_desc *s, void *fl,
			   struct uslub_thread *t);
/* The same for a new slab that no cache_cpu of t holds (a thread's early object,
 * thread/sheaf.c), made with uslub_new_slab(..., NULL, ...): counted in the cache. */
void uslub_deactivate_shared(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);
void uslub_unfreeze_partials(struct uslub_cache *c, struct cache_cpu *cc, struct uslub_thread *t);
void uslub_put_cpu_partial(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);
struct page_desc *uslub_get_partial(struct uslub_cache *c, struct uslub_thread *t,
				    struct cache_cpu *cc, void **fl);
#pragma GCC visibility pop

/* The thread's medium-block cache, its inline half. */
#include "slab/medium.h"

#endif
