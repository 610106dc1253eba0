/* The page layer's own declarations: what its files share with one another (the calls
 * the layers above make are in the first part of this header). The buddy (buddy.c) keeps the free
 * lists; regions (region.c) give it address space; runs (run.c) cut large blocks from neighbouring
 * free blocks; decay (decay.c) hands free memory back to the OS; the page cache (pcp.c) stands in
 * front of the buddy for each thread; huge blocks (huge.c) are mappings of their own. */
#ifndef USLUB_PAGE_H
#define USLUB_PAGE_H

#include "os/os.h"
#include "types.h"

#pragma GCC visibility push(hidden)

/* ---- zones and the buddy allocator ----------------------------------------------- */

/* A decay period (USLUB_DECAY_MS) is cut into this many steps: free memory is stamped
 * with its step, and the decay looks at it once a step. */
#define DECAY_STEPS 8

/* Ranges a zone moved pages into (move.c, section 10), each a mapping of the kernel's
 * own until handed back; under the zone's lock. */
#define MOVED_PIECES 1024
struct moved_piece {
	uintptr_t lo, hi;
};
struct uslub_moved {
	unsigned count;	   /* read without the lock for a peek */
	unsigned reserved; /* records promised to moves under way */
	struct moved_piece piece[MOVED_PIECES];
};

#define FREED_HINTS 4
/* Bins of free runs kept whole (extent.c): lengths below 8 pages one each, then four a
 * doubling up to 65,535 pages. */
#define EXT_BINS 60

struct uslub_node {
	pthread_mutex_t lock;
	_Atomic bool made; /* its lock and lists set up (zone_made), stored last */
	struct cds_list_head free_area[USLUB_MAX_ORDER + 1];
	uint64_t nr_free[USLUB_MAX_ORDER + 1];
	uint64_t nr_warm[USLUB_MAX_ORDER + 1];
	struct region *regions; /* newest first; growth takes from the newest */
	/* Large zone: the page after the last large block cut from cold memory, where the
	 * next one goes when its pages are free and cold (alloc_run). */
	struct page_desc *large_next;
	/* A page of each of the last FREED_HINTS blocks of more than PLACED_PAGES freed here
	 * (ring at freed_next): where a big block's search looks first (run.c, recent_fit). */
	struct page_desc *freed[FREED_HINTS];
	unsigned freed_next;
	/* Free runs kept whole in front of the buddy (extent.c): bins by length, the mask of
	 * those that hold one (stored atomically, peeked at without the lock), their pages
	 * (counted in free_pages and warm_free_pages too). */
	struct cds_list_head ext_bin[EXT_BINS];
	uint64_t ext_mask;
	uint64_t ext_pages;
	uint64_t ext_hits;    /* large blocks cut from one */
	uint64_t ext_flushes; /* times the zone gave its extents to the buddy */
	uint64_t free_pages;
	uint64_t warm_free_pages; /* free and probably resident */
	/* Decay (decay.c, section 6), under the lock but for decay_last. */
	uint64_t released_free_pages;	  /* free, and handed back to the OS after use */
	uint64_t released_blocks;	  /* ... in so many blocks (stored atomically) */
	uint64_t reuse_high[DECAY_STEPS]; /* per step: highest level of used free memory */
	uint64_t reuse[DECAY_STEPS];	  /* per step: most of it taken again since a high */
	uint64_t reuse_window_high;	  /* the highest of reuse_high */
	uint32_t reuse_step;		  /* the step whose slots were filled last */
	_Atomic uint32_t decay_last;	  /* the step of the last decay pass (CAS elects) */
	/* The step in which a span last found the zone over its keep (decay.c, sections 9
	 * and 11: while spans pay, blocks of 1-4 MiB freed unfilled are looked at). */
	uint32_t pay_step;
	uint64_t decay_passes; /* passes that handed memory back */
	uint64_t bound_sheds;  /* hand-backs of what exceeded the bound (bound.c) */
	uint64_t moved_pages;  /* pages moved into spans rather than faulted in */
	unsigned handing_back; /* batches off the lists, being handed back (lock_all waits) */
	/* counters, under lock */
	uint64_t grows;
	uint64_t grown_pages;	/* pages its regions have grown by (stored atomically) */
	uint64_t nowait_misses; /* high-order tries that found nothing at hand */
	uint64_t reclaims;	/* GFP_RECLAIM hand-backs at the cap */
	uint64_t runs;		/* large blocks made of neighbouring smaller free blocks */
	uint64_t released_bytes;
	uint64_t release_calls;
	uint64_t region_count;
	/* get_any_partial on behalf of threads of this node (atomic adds, slow path) */
	uint64_t any_partial_calls;
	uint64_t any_partial_tried;  /* nodes whose list was looked at */
	uint64_t any_partial_again;  /* ... that this search had looked at already (the local
				      * node included, get_partial's): 0 with the fix */
	uint64_t remote_slabs;	     /* slabs taken from another node's list */
	uint64_t remote_objects;     /* ... and the free objects they brought */
	uint64_t local_partial_hits; /* get_partial served by the local list */
};

/* Each node has page allocators ("zones") of three kinds: slots [0, MAX_NODES) serve slabs,
 * thread state, the page caches and large blocks of up to SMALL_LARGE_PAGES pages that
 * the medium-block cache does not take; the medium-block cache's blocks come from a zone
 * of their own; the slots above those serve the larger blocks, so that no kind cuts up
 * another's free memory (tools/bench/results/large-blocks.md). The bound is the
 * medium-block cache's: blocks that threads hold apart from the zones then split only
 * the medium zones' free memory, never the holes the larger blocks need. A region belongs
 * to one zone.
 *
 * The larger blocks have up to MAX_ARENAS zones a node, arenas as jemalloc calls them: a
 * thread takes its own (uslub_thread_arena, round robin), so two threads that replace
 * blocks of 128 KiB - 32 MiB do not meet at one lock, held for a span search of a few
 * thousand instructions (two threads had run at half one thread's rate). A block goes
 * back to the zone of its region, whichever thread frees it. Zone z serves node
 * z % MAX_NODES; arena 0 is the slot LARGE_ZONE(node) names.
 *
 * The medium blocks have as many zones, one an arena (MEDIUM_ARENA_ZONE), each lending its
 * free memory to the others before they grow (arena.c). Cut from the slab zone, which
 * every thread's depot overflow went back to and every thread's refill cut from, a block
 * passed from one thread to another; in zones of their own, blocks of up to 1 MiB replaced
 * at random ran 1.14x faster on one thread, 1.09x on two. Cut from the large arenas,
 * they took the larger blocks' room (0.45x; tools/bench/results/two-threads-128k.md). */
#define MAX_ARENAS		       8
#define LARGE_ARENA_ZONE(node, arena)  ((node) + MAX_NODES * (1 + (arena)))
#define LARGE_ZONE(node)	       LARGE_ARENA_ZONE(node, 0)
#define MEDIUM_ARENA_ZONE(node, arena) ((node) + MAX_NODES * (1 + MAX_ARENAS + (arena)))
#define NR_ZONES		       (MAX_NODES * (1 + 2 * MAX_ARENAS))
#define SMALL_LARGE_PAGES	       MSHEAF_MAX_PAGES
extern unsigned uslub_nr_arenas; /* large-block zones a node has in use, and medium ones (node.c) */
/* Whether zone z is a large-block arena's (not a slab zone, not a medium zone). */
static inline bool zone_is_large(unsigned z)
{
	return z >= MAX_NODES && z / MAX_NODES <= MAX_ARENAS;
}
/* The arena whose medium zone z is, or -1 where z is another kind of zone. */
static inline int medium_zone_arena(unsigned z)
{
	return z / MAX_NODES > MAX_ARENAS ? (int)(z / MAX_NODES - 1 - MAX_ARENAS) : -1;
}
/* A free block of `order` for medium zone z from the node's other medium zones, then its
 * slab zone, where the lock is free; or NULL (arena.c). */
struct page_desc *uslub_medium_borrow(unsigned z, unsigned order, unsigned gfp);
/* The zone of a large block of npages pages for a thread on node `node` whose arena is
 * `arena`. */
static inline unsigned large_zone_of(unsigned node, unsigned arena, size_t npages)
{
	return npages <= SMALL_LARGE_PAGES ? node : LARGE_ARENA_ZONE(node, arena);
}
extern struct uslub_node uslub_nodes[NR_ZONES];
extern unsigned uslub_nr_nodes; /* in use: 1, libnuma's count, or USLUB_NUMA=fake:N */
/* Whether zone z has been made: its lock and lists set up (arena.c, uslub_zone_make). The
 * nodes' slab zones are made at start-up, an arena's zone by the first block cut from it:
 * all eight arenas made at start touched 11 pages of uslub_nodes in every process, which
 * most programs' large blocks never reach. A flag of its own, stored with release after
 * the rest: the list heads are written under the lock from then on. */
static inline bool zone_made(unsigned z)
{
	return atomic_load_explicit(&uslub_nodes[z].made, memory_order_acquire);
}
/* Whether zone z is one of those in use (its node's, and its arena's) and made. */
static inline bool zone_in_use(unsigned z)
{
	unsigned kind = z / MAX_NODES; /* 0: slabs; 1..MAX_ARENAS: large; above: medium */
	unsigned arena = kind > MAX_ARENAS ? kind - MAX_ARENAS : kind;
	return z % MAX_NODES < uslub_nr_nodes && arena <= uslub_nr_arenas && zone_made(z);
}
void uslub_zone_make(unsigned z);
extern pthread_mutex_t uslub_zone_make_lock; /* arena.c */
/* Zone z made if it is not yet: where a block is about to be cut from it. */
static inline void uslub_zone_ready(unsigned z)
{
	if (__builtin_expect(!zone_made(z), 0))
		uslub_zone_make(z);
}
extern _Atomic uint64_t uslub_mapped_bytes; /* from the OS, resident or not */
extern _Atomic uint64_t uslub_peak_mapped;

enum {
	GFP_TRYLOCK = 0x1,  /* give up rather than wait for a contended node lock */
	GFP_NOGROW = 0x2,   /* only blocks already free: take nothing more from the OS */
	GFP_WARM = 0x4,	    /* only warm blocks: fault in no fresh page on the caller's time */
	GFP_COLD = 0x8,	    /* prefer a cold block (the replenisher, which warms it) */
	GFP_RECLAIM = 0x10, /* wait mode's high-order request (reclaims at the cap, as all
			     * blocking requests do) */
	/* The high-order try: a block already free and at hand (a warm one first), or
	 * nothing - no lock wait, no growing, no reclaim. A cold block costs a page fault
	 * per page when first touched, as the minimum-order slab taken instead would: that
	 * is not the cost the kernel's lesson is about. GFP_WARM is kept for callers that
	 * want to avoid even that. */
	GFP_NOWAIT = GFP_TRYLOCK | GFP_NOGROW,
};

/* 2^order pages from node's buddy; NULL with errno ENOMEM when there is none. */
struct page_desc *uslub_pages_alloc(unsigned node, unsigned order, unsigned gfp);
void uslub_pages_free(struct page_desc *d, unsigned order);
/* bytes at block, taken warm, made zero; pages already zero are read, not written (zero.c). */
void uslub_pages_zero(void *block, size_t bytes);
/* Pages [d, d + npages) back to the buddy as naturally aligned blocks. */
void uslub_pages_free_range(struct page_desc *d, size_t npages);
/* The same, for pages whose descriptors past the first name no block already (a bare
 * large block, slab.h's PF_BARE): none is written before the lock. */
void uslub_pages_free_bare(struct page_desc *d, size_t npages);
/* Blocks ds[i] of npages[i] pages back, as uslub_pages_free_range does each, with one
 * lock hold per run of blocks of one zone. */
void uslub_pages_free_blocks(struct page_desc *const *ds, const uint16_t *npages, unsigned k);
/* A large block of npages from the free runs zone `zone` keeps whole (extent.c), its
 * pages warm; NULL where none is long enough, or, with `trylock`, where the zone's lock
 * is held. */
struct page_desc *uslub_extent_take(unsigned zone, size_t npages, bool trylock);
/* Every run zone `zone` keeps whole to the buddy (takes the lock); false where it kept
 * none. */
bool uslub_extents_flush(unsigned zone);
/* Take pages [d, d + npages) out of the free lists if all are free; 0 on success. */
int uslub_pages_claim(struct page_desc *d, size_t npages);
/* npages for a large block from the zone's free blocks only: out of one block of the
 * order that holds them (its tail given back; its flags kept), else a run of neighbouring
 * smaller ones (flags 0), looked for among up to `tries` blocks (at most RUN_TRIES);
 * NULL if neither is free. */
#define RUN_TRIES 256
struct page_desc *uslub_pages_alloc_run(unsigned node, size_t npages, unsigned tries);
/* A run of npages free pages of zone `node`, claimed: warm free pages first, then cold
 * ones, then the zone grown for it. NULL, ENOMEM. For spans (more than a MAX_BLOCK) and
 * for large blocks of more than PLACED_PAGES. */
struct page_desc *uslub_pages_alloc_span(unsigned node, size_t npages);
/* The same from the zone's free pages only: NULL, ENOMEM, where it would grow. */
struct page_desc *uslub_pages_find_span(unsigned node, size_t npages);
/* Large blocks of more than this many pages (1 MiB) are placed as spans are, in the
 * tightest of the warmest holes, not cut from a block of their order (slab/large.c says
 * why); blocks of exactly 1 MiB, common in programs (realloc_mix has one in 21), are not:
 * in a heap of many small free blocks the search cost them more than it saved. */
#define PLACED_PAGES (1UL << (USLUB_MAX_ORDER - 2))
/* At USLUB_MEM_LIMIT free memory still counts against the cap: every free block of zone
 * `node`'s node goes back to the OS, so the cap admits a block (a released one or a fresh
 * one) - reclaim, on the caller's time. Called and returns with n's lock held, which it
 * drops meanwhile; counted in n->reclaims. */
void uslub_reclaim_locked(struct uslub_node *n, unsigned node);
/* npages out of a block of 2^order taken as uslub_pages_alloc does with `gfp` (growing
 * the heap if need be, unless GFP_NOGROW), the rest given back; unless `aligned`, moved
 * back over free pages right before the block, so blocks carved one after another lie
 * end to end. NULL, ENOMEM. */
struct page_desc *uslub_pages_alloc_exact(unsigned node, unsigned order, size_t npages,
					  bool aligned, unsigned gfp);
/* Unmap the free blocks at the top of every region, so the address space they hold is
 * there for a huge block under RLIMIT_AS; the regions grow there again later. Bytes
 * unmapped. */
size_t uslub_pages_unmap_free(void);
/* Release warm free pages to the OS until at most `keep` warm pages stay free. */
size_t uslub_pages_release(unsigned node, uint64_t keep);
/* Span d of npages was cut from zone n: as many warm free pages as it has pages not
 * resident, beyond what the zone keeps, go back, highest first (decay.c, section 9). */
void uslub_pages_pay(struct uslub_node *n, struct page_desc *d, size_t npages);
/* The flags block d of npages (more than PLACED_PAGES) goes free with, looked at without the
 * lock: PF_COLD, its pages handed back, where the program did not write it through; else
 * 0 (decay.c, section 11). `step`: the decay step now. */
unsigned uslub_pages_unfilled(struct uslub_node *n, struct page_desc *d, size_t npages,
			      uint32_t step);
/* Move up to `want` pages of the batch's blocks (off the lists, being paid) into the
 * pages of span d that are not resident (move.c): the pages moved, 0 where none could.
 * Where some moved, the batch's blocks it never reached are cut off into *rest. */
size_t uslub_pages_move(struct uslub_node *n, struct page_desc *d, size_t npages,
			struct page_desc *batch, size_t want, struct page_desc **rest);
/* Whether [addr, addr + size), being handed back, meets a range pages were moved into;
 * if so its records are gone, and the caller maps it afresh (uslub_os_renew). */
bool uslub_moved_take(struct uslub_node *n, void *addr, size_t size);
/* [addr, addr + size) was unmapped: its records go. Under the lock. */
void uslub_moved_forget_locked(struct uslub_node *n, void *addr, size_t size);
/* Whether pages can be moved (a kernel with MREMAP_DONTUNMAP, not under memcheck). */
bool uslub_pages_can_move(void);
/* Would taking `bytes` more from the OS pass USLUB_MEM_LIMIT? */
bool uslub_over_limit(uint64_t bytes);
/* Address space is bounded (RLIMIT_AS, or USLUB_MEM_LIMIT), as the last growth found: large
 * blocks then take their exact pages, not their size class's (slab/large.c). */
extern bool uslub_space_limited;
/* Warm free memory a zone keeps however little of it is reused (M_TRIM_THRESHOLD). */
uint64_t uslub_release_threshold(void);
/* Free memory kept for reuse (warm free pages and cached huge mappings) may reach this
 * many bytes: a floor once the live set collapsed, the waves' height where it keeps
 * collapsing (bound.c). */
uint64_t uslub_keep_bound(void);
/* Called where free memory grew or memory in use fell (page and huge frees): hands the
 * excess over uslub_keep_bound back to the OS at once, oldest first. Takes zone locks
 * and huge_lock, one at a time: with none held. */
void uslub_pages_bound(void);
/* `bytes` of a block leave the live set, counted in `in_use` (uslub_large_bytes,
 * uslub_huge_bytes): the bound's guess of the waves' height sees the live set with them
 * first (bound.c). */
void uslub_bound_leaving(_Atomic uint64_t *in_use, uint64_t bytes);
/* One decay pass over every zone whose pass for the current step is due; the background
 * thread's work. Bytes handed back. */
size_t uslub_pages_decay_all(void);
/* Milliseconds until the next decay step; -1 when no zone holds warm free memory. */
long uslub_pages_decay_wait_ms(void);
/* Bind every zone's regions to their node (uslub_topo.real_multi): for the regions made
 * before the topology was known; region_new binds the later ones. */
void uslub_pages_bind_regions(void);
/* Zones in use from now on: those of `nodes` nodes, with `arenas` large-block zones each
 * (their lists made), before a thread may take one: at start-up, when libnuma finds more
 * nodes, and in tests, which ask for more arenas than the machine's CPUs give. */
void uslub_pages_use(unsigned nodes, unsigned arenas);
void uslub_pages_lock_all(void);
void uslub_pages_unlock_all(void);
/* Walk the buddy lists and check every invariant; 0 when consistent. For tests. */
int uslub_pages_check(unsigned node);

/* Warm free memory a zone keeps however little of it is reused: M_TRIM_THRESHOLD, which
 * mallopt sets (decay.c). */
extern uint64_t uslub_trim_threshold;

/* ---- memory in use (usage.c) ---------------------------------------------------------- */

extern _Atomic uint64_t uslub_slab_bytes; /* pages in slabs */
/* Pages in large blocks, less what the threads have counted and not folded in yet (their
 * `large_delta`s: usage.c): exact with those added, as the heap walker and the stats add
 * them. */
extern _Atomic uint64_t uslub_large_bytes;
/* A large block of `bytes` (negative: leaving) comes into use for the calling thread,
 * counted in its state and folded into uslub_large_bytes a batch at a time. */
void uslub_large_count(int64_t bytes);
/* What thread state t has counted and not folded in, folded in now (its exit, the idle
 * drain: atomic against the owner's counting). */
void uslub_large_fold(struct uslub_thread *t);
/* uslub_large_bytes, read as signed, clamped at zero (usage.c says why it may be less). */
static inline uint64_t uslub_large_in_use(void)
{
	int64_t v = (int64_t)atomic_load_explicit(&uslub_large_bytes, memory_order_relaxed);
	return v > 0 ? (uint64_t)v : 0;
}
/* Of those, the blocks the depots hold (slab/medium.c): free to the program, so not in use
 * where the bound asks whether the live set collapsed (bound.c). */
extern _Atomic uint64_t uslub_depot_bytes;
extern _Atomic uint64_t uslub_peak_in_use;
/* Raise uslub_peak_in_use to what slabs, large and huge blocks hold now. */
void uslub_note_in_use(void);

/* ---- the thread's page cache (pcp.c) -------------------------------------------------- */

/* Blocks of 2^order pages through the thread's page cache (orders above PCP_MAX_ORDER go
 * straight to the buddy). gfp as for uslub_pages_alloc: a block on the thread's list is at
 * hand under any flags, GFP_NOWAIT included. */
struct page_desc *uslub_pcp_alloc(struct uslub_thread *t, unsigned node, unsigned order,
				  unsigned gfp);
void uslub_pcp_free(struct uslub_thread *t, struct page_desc *d, unsigned order);
/* Send the oldest blocks back until at most `keep` pages stay; with 0, the demand the
 * cache has learnt is forgotten too (exit, malloc_trim). */
void uslub_pcp_drain(struct uslub_thread *t, unsigned keep);
extern const char *const uslub_pcp_stat_names[USLUB_NR_PCP_STATS];
/* Folded from exited threads, under uslub_stat_lock and uslub_fold_seq. */
extern uint64_t uslub_pcp_stat[USLUB_NR_PCP_STATS][PCP_ORDERS];

/* ---- huge blocks (huge.c) ------------------------------------------------------------- */

void *uslub_huge_alloc(size_t size, size_t align, bool zero);
/* Nonzero if p is a huge block: the bytes the program may use, the mapping's or, when a
 * checker watches (debug.h, uslub_block_debug), the request. Likewise for a large one. */
size_t uslub_huge_usable(const void *p);
/* A huge block's mapping begins at `start` (the block there, or a page on: its lead). */
bool uslub_huge_maps(const void *start);
/* A huge block is freed into the huge cache or unmapped: 1. 0 when p is no huge block.
 * With expect_pages, the sized frees' check: when the block's usable bytes (as
 * uslub_huge_usable counts them) are not that many pages, -1 and nothing is freed, the
 * bytes in *usable. One look-up of the table. */
int uslub_huge_free(void *p, size_t expect_pages, size_t *usable);
/* realloc of huge block p to a smaller block `to`: its first bytes, at most max, copied,
 * then p freed; 0 when p is no huge block (to untouched). One look-up of the table. */
int uslub_huge_move_out(void *p, void *to, size_t max);
/* Unmap cached huge mappings unused for the decay period, or all of them (malloc_trim,
 * and before a mapping refused at a limit is tried again); bytes unmapped. Takes
 * huge_lock: not with it held. */
size_t uslub_huge_cache_release(bool all);
/* Unmap cached huge mappings, oldest first, until at most `keep` bytes stay cached; bytes
 * unmapped. Takes huge_lock. */
size_t uslub_huge_cache_trim(uint64_t keep);
/* p was a huge block among the last ones freed. */
bool uslub_huge_was_freed(const void *p);
/* Resize huge block p in place or by mremap (NULL, errno ENOMEM: p is left as it was);
 * *found false when p is no huge block. One look-up of the table. */
void *uslub_huge_realloc(void *p, size_t size, bool *found);
/* The kind (enum dbg_kind) huge block p was asked for with, then `set` recorded unless it
 * is negative; -1 when p is no huge block. USLUB_DEBUG's C++ checks (api/sized.c). */
int uslub_huge_kind(const void *p, int set);
/* Each huge block's start, request and mapping length handed to `check`, under huge_lock,
 * which every change of a block's red zone also holds (the checkers' sweep). */
void uslub_huge_sweep(void (*check)(void *p, size_t size, size_t span, size_t lead, const char *op),
		      const char *op);
void uslub_huge_lock(void);
void uslub_huge_unlock(void);
extern _Atomic uint64_t uslub_huge_bytes;
extern _Atomic uint64_t uslub_huge_cached_bytes; /* freed, kept mapped for reuse */

#pragma GCC visibility pop

/* ---- what the page layer's files share ----------------------------------------------- */

#pragma GCC visibility push(hidden)

/* Flag of a free block whose pages are not counted in uslub_mapped_bytes. */
#define PF_RELEASED 0x4
/* A hand-back batch's block whose mapping could not be restored (move.c): off the lists
 * for good. No block carries these flags otherwise. */
#define PF_LOST 0xff

static inline uint64_t block_bytes(unsigned order)
{
	return USLUB_PAGE_SIZE << order;
}

static inline uintptr_t page_index(const struct page_desc *d)
{
	return ((uintptr_t)d & REGION_MASK) >> DESC_SHIFT;
}

/* ---- the buddy (buddy.c) ---------------------------------------------------------- */

/* A zone's lock given up. The zones' warm free pages together were a counter each unlock
 * that changed them added to, once a hold (before: at each block put on or taken off a
 * list, some 19 atomic adds to one line a 2 MiB block replaced, 9% of two threads' rate,
 * tools/bench/results/shared-lines-large.md); two threads in two arenas still passed its
 * line to each other at every large block. The bound, its one reader, adds the zones up
 * now, and only once the live set has collapsed (bound.c). */
static inline void uslub_zone_unlock(struct uslub_node *n)
{
	pthread_mutex_unlock(&n->lock);
}

/* Block d off zone n's free list, under the lock. */
void uslub_list_remove(struct uslub_node *n, struct page_desc *d);
/* Put one naturally aligned block back and merge it with free buddies, under the lock.
 * `stamp`: the decay step it went free in, when warm. */
void uslub_free_one(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
		    uint16_t stamp);
/* Pages [d, d + npages) onto zone n's lists as naturally aligned blocks, under the lock. */
void uslub_free_range_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			     unsigned flags, uint16_t stamp);
/* The first block of at least `order` that the flags allow, under the lock. */
struct page_desc *uslub_find_block(struct uslub_node *n, unsigned order, unsigned gfp);
/* Block d out of zone n's lists, cut to `order`; the lock is held and dropped here. */
struct page_desc *uslub_take_block(struct uslub_node *n, struct page_desc *d, unsigned order);
/* The first npages (fewer than it holds) of free block d, not handed back, out of zone
 * n's lists; the rest stays free. Under the lock, kept. */
void uslub_take_pages_locked(struct uslub_node *n, struct page_desc *d, size_t npages);
/* The free block that holds page `d`, or NULL if the page is in use. */
struct page_desc *uslub_free_block_of(struct page_desc *d);
/* The free block whose last page is d, or NULL (a free block's last page keeps a hint). */
struct page_desc *uslub_free_block_ending(struct page_desc *d);

/* ---- free runs kept whole (extent.c) ----------------------------------------------- */

/* Freed pages [d, d + npages) of zone n kept as an extent, merged with those beside it,
 * under the lock - unless `alone`, only where one lies beside them; false where they
 * are not kept (a slab zone keeps none) and the buddy takes them. `stamp`: the decay
 * step they went free in. */
bool uslub_extent_put_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			     uint16_t stamp, bool alone);
/* Every extent of zone n to the buddy, under the lock: before anything takes free blocks
 * off the lists by age or place, and before the zone grows. */
void uslub_extents_flush_locked(struct uslub_node *n);
/* realloc's claim of [d, d + npages) where d heads an extent: 0 when the extent held it
 * (the rest stays one); -1 otherwise, the extent then given to the buddy. */
int uslub_extent_claim_locked(struct uslub_node *n, struct page_desc *d, size_t npages);
/* The bins' invariants, for uslub_pages_check: 0 when consistent. */
int uslub_extents_check(struct uslub_node *n);

/* ---- regions (region.c) ------------------------------------------------------------ */

/* `bytes` more counted in uslub_mapped_bytes, and its peak. */
void uslub_mapped_add(uint64_t bytes);
/* Add a block of 2^min_order pages, or a smaller one that aligns the next, to zone n,
 * under the lock; -1 (errno) when the OS or the cap refuses. */
int uslub_grow(struct uslub_node *n, unsigned min_order);

/* ---- decay (decay.c) --------------------------------------------------------------- */

/* What uslub_release_blocks hands back: warm blocks, or every block not handed back yet
 * (fresh ones included). The decay chooses by age (uslub_decay_zone). */
enum release_mode { RELEASE_ANY, RELEASE_ALL };
size_t uslub_release_blocks(unsigned node, uint64_t keep, enum release_mode mode);
/* The current decay step. */
uint32_t uslub_step_now(void);
/* Zone n's level of used free memory, after pages went free or were taken; under the
 * lock. */
void uslub_note_free(struct uslub_node *n);
void uslub_note_reuse(struct uslub_node *n);
/* Zone n's decay pass for `step`, if no one has made it yet; bytes handed back. */
size_t uslub_decay_zone(struct uslub_node *n, uint32_t step);
/* A pass when a step has begun since the last; a look at the clock otherwise. */
void uslub_maybe_decay(struct uslub_node *n);
/* Warm blocks of zone n off its lists, oldest first, until at most `keep` warm pages
 * stay or only blocks younger than `min_age` steps are left (blocks free for the whole
 * period go whatever `keep` says); under the lock. The batch is for uslub_hand_back,
 * which hands it to the OS outside the lock and puts it on the lists again; bytes. */
struct page_desc *uslub_shed_locked(struct uslub_node *n, uint32_t step, uint64_t keep,
				    int min_age);
size_t uslub_hand_back(struct uslub_node *n, struct page_desc *batch);

/* ---- arenas: a node's large-block zones (arena.c) --------------------------------- */

/* Warm free pages zone n keeps before a span pays (decay.c, section 9): a quarter of the
 * large blocks in use, at least M_TRIM_THRESHOLD, shared among a node's arenas by the
 * pages each has in use. */
uint64_t uslub_pay_keep(const struct uslub_node *n);
/* The calling thread's arena: given round robin at its first large block (a thread state
 * is not needed for it: a thread may make none but large blocks). */
unsigned uslub_thread_arena(void);
/* Warm free pages zone n keeps over its keep (a peek). */
uint64_t uslub_over_keep(const struct uslub_node *n);
/* Arena a of large-block zone n's node, or NULL where that is n or n is a slab zone. */
struct uslub_node *uslub_other_arena(const struct uslub_node *n, unsigned a);
/* Warm free pages the arenas of large-block zone n's node keep over what one zone would
 * keep (a peek; for a slab zone, or one arena, uslub_over_keep). */
uint64_t uslub_node_over(const struct uslub_node *n);

/* ---- the thread's page cache (pcp.c) ----------------------------------------------- */

/* Empty lists, high at its minimum: a new thread state's. */
void uslub_pcp_init(struct uslub_thread *t);

/* ---- huge blocks (huge.c) ------------------------------------------------------------ */

/* When the oldest cached huge mapping is due to go back; 0 while the cache is empty.
 * Stored under huge_lock, read without it. */
extern _Atomic uint64_t uslub_huge_expiry_ms;

/* The large-block paths look at the clock too while the huge cache holds a mapping, so
 * a program that has stopped using huge blocks still sees them go back. */
static inline void uslub_huge_cache_tick(void)
{
	uint64_t due = atomic_load_explicit(&uslub_huge_expiry_ms, memory_order_relaxed);
	if (unlikely(due) && uslub_os_now_ms() >= due)
		uslub_huge_cache_release(false);
}

#pragma GCC visibility pop

#endif
