/* The engine's shared types: what every layer stands on - the regions and their page
 * descriptors, the one table that finds a pointer's page, the caches', the threads' and
 * the page caches' structures, the free-pointer keys - and no function of any layer.
 * Each layer's calls are in its own header (os/os.h, page/page.h, slab/slab.h,
 * thread/thread.h, api/api.h); the observers are reached through hooks.h. See
 * slab/slab.c for the design essay. */
#ifndef USLUB_TYPES_H
#define USLUB_TYPES_H

#include "size_classes.h"
#include "lock_stat.h"
#include "stat_items.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <urcu/list.h>

/* Everything in the engine is internal to the library: with the declarations hidden too,
 * the compiler reaches the tables directly instead of through the GOT. */
#pragma GCC visibility push(hidden)

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ volatile("" ::: "memory")
#endif
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define noinline    __attribute__((noinline))

/* ---- regions and page descriptors ------------------------------------------------ */

/* A region is a 256 MiB slot of address space, aligned to its size, so `p >> REGION_SHIFT` finds it
 * in a flat table and `p & REGION_MASK` its page. The region's first 4 MiB hold one 64-byte
 * descriptor per page (the kernel's vmemmap); the descriptors of those first pages are never used,
 * so the region's own header sits there. The next 512 KiB hold free's 8-byte test of every page
 * (struct page_test), and the pages follow. Only the metadata and the pages grown so far are mapped
 * (page/region.c): the rest of the slot is free address space, where another mapping may even lie -
 * its descriptors read as zero. */
#define REGION_SHIFT 28
#define REGION_SIZE  (1UL << REGION_SHIFT)
#define REGION_MASK  (REGION_SIZE - 1)
#define REGION_PAGES (REGION_SIZE >> USLUB_PAGE_SHIFT)
#define DESC_SHIFT   6
#define TEST_SHIFT   3
#define CPU_BYTES    512 /* sizeof(struct cache_cpu) */
#define TEST_OFFSET  (REGION_PAGES << DESC_SHIFT)
#define META_BYTES   (TEST_OFFSET + (REGION_PAGES << TEST_SHIFT))
#define FIRST_PAGE   (META_BYTES >> USLUB_PAGE_SHIFT)
#define ADDR_BITS    47
#define REGION_SLOTS (1UL << (ADDR_BITS - REGION_SHIFT))
#define MAX_BLOCK    (USLUB_PAGE_SIZE << USLUB_MAX_ORDER)
#define MAX_NODES    16

enum page_kind {
	PAGE_UNUSED = 0, /* never handed out, or inside a free block: reads as zero */
	PAGE_FREE,	 /* head of a free buddy block */
	PAGE_SLAB,	 /* head or tail page of a slab */
	PAGE_LARGE,	 /* head or tail page of a large block */
	PAGE_META,	 /* the allocator's own (thread structs) */
	PAGE_EXTENT,	 /* head of a free run a large-block zone keeps whole (page/extent.c) */
};

/* Free-block flag: its pages may not be resident (never touched, or released). */
#define PF_COLD 0x1
/* Slab flag: on its node's partial list. */
#define PF_ON_PARTIAL 0x2
/* Large-block flag: freed, waiting in its thread's cache for reuse. */
#define PF_CACHED 0x8
/* Large-block flag: laid out for the checkers (slab/large.c, uslub_block_pad), its first
 * page red zone and the program's bytes from the second. */
#define PF_GUARD 0x10
/* Large-block flag: freed, held by the quarantine (USLUB_DEBUG=Q) before it goes back. */
#define PF_HELD 0x20
/* Large-block flag: the program's bytes start a few cache lines into the first page, at
 * the block's colour (slab/slab.h, medium_color_of), not at the page. */
#define PF_COLOR 0x40

struct uslub_thread;

/* The kernel's struct page / struct slab in one: every page has one, a slab's or a block's
 * metadata lives in its first page's. */
struct page_desc {
	struct page_desc *head;	    /* first page of this slab or block; NULL if free */
	struct uslub_thread *owner; /* thread holding (freezing) the slab, else NULL */
	void *local_free;	    /* owner's frees: no atomics, owner only */
	_Atomic uint64_t word;	    /* remote freelist | inuse | frozen: see slab.c */
	/* As in the kernel's struct slab, one slab is never on a node list and a thread's
	 * partial list at once (nor a free block on a buddy list and a hand-back batch). */
	union {
		struct cds_list_head list; /* node partial list, buddy free list, page cache */
		struct page_desc *next;	   /* thread partial list, page-allocator batch */
	};
	uint64_t dbg_kind;    /* large, under USLUB_DEBUG: how it was asked for (dbg_kind) */
	uint16_t objects;     /* slab: objects carved; large: pages asked for */
	uint16_t local_count; /* objects on local_free; large: last page's unused bytes */
	uint8_t order;
	uint8_t kind;
	uint8_t cls;
	uint8_t flags;
};
_Static_assert(sizeof(struct page_desc) == (1 << DESC_SHIFT), "descriptor is 64 bytes");

/* free's object test (slab.h), one per page, written into every page of a slab so that
 * free reads the pointer's own page and never follows `head`. They sit apart from the
 * descriptors, eight to a cache line where a descriptor takes a whole one: a free into
 * a random page of a large heap misses the cache on its page's test, and eight times
 * fewer lines miss less (tcmalloc's pagemap cache and mimalloc's page map are as dense).
 * A page of no slab has test 0, whose magic fails every offset. */
struct page_test {
	uint32_t start;	  /* the slab's first byte, low 32 bits */
	uint16_t objects; /* objects carved so far: page_desc.objects of the slab */
	/* On a slab's pages, the offset of its class's cache_cpu in a thread, which holds
	 * the class's magic for the thread's fast path (cache_cpu.magic); 0 on every other
	 * page, whose objects is 0 too, so no offset passes. */
	uint16_t cpu_off;
};
_Static_assert(sizeof(struct page_test) == (1 << TEST_SHIFT), "a page's test is 8 bytes");

/* The slab word: remote freelist head, inuse, frozen (see slab.c, section 3). */
#define W_FROZEN      (1ULL << 63)
#define W_INUSE_SHIFT 32
#define W_INUSE_MASK  0xffffffULL

static inline uint64_t w_make(uint32_t head, uint64_t inuse, uint64_t frozen)
{
	return (uint64_t)head | (inuse << W_INUSE_SHIFT) | frozen;
}
static inline uint32_t w_head(uint64_t w)
{
	return (uint32_t)w;
}
static inline uint32_t w_inuse(uint64_t w)
{
	return (uint32_t)((w >> W_INUSE_SHIFT) & W_INUSE_MASK);
}
static inline void *decode(uint32_t head, char *base)
{
	return head ? base + head - 1 : NULL;
}
static inline uint32_t encode(void *p, char *base)
{
	return p ? (uint32_t)((char *)p - base) + 1 : 0;
}
struct uslub_node;

struct region {
	struct uslub_node *node;
	struct region *next;
	size_t grown; /* pages [FIRST_PAGE, grown) are mapped and belong to the buddy */
	size_t end;   /* growth stops here: REGION_PAGES, or where another mapping begins */
	unsigned nid; /* the NUMA node (its zones share it), for slabs' node lists */
};
_Static_assert(sizeof(struct region) <= (FIRST_PAGE << DESC_SHIFT), "header fits");

/* The caches: the kmalloc caches, one per size class (0 .. USLUB_NR_CLASSES - 1), then
 * the object caches programs make with uslub_cache_create (slab/objcache.c) that do not
 * merge into one of them. Every table indexed by class has a slot for each; a thread's
 * cache_cpu of a slot must lie within page_test.cpu_off's 16 bits (128 slots of
 * CPU_BYTES), so the thread state is an order-4 block (64 KiB) of which a thread touches
 * only the slots of the caches it uses (all of it when made on warm pages: thread.c). The
 * 30 medium sheaves' slots come after them, so 56 object caches fit where 64 did. */
#define USLUB_USER_CACHES 56
#define USLUB_NR_CACHES	  (USLUB_NR_CLASSES + USLUB_USER_CACHES)

/* Which object does slab offset `off` fall in, and is it its start? Lemire's fast
 * division and divisibility test in one multiply: with magic = 2^64 / size rounded up,
 * the high half of off * magic is off / size and the low half is below magic exactly
 * when size divides off, for every off below 2^32. A debug cache's magic is 0, which no
 * offset passes. free's fast path reads the magic from the thread's cache_cpu, whose
 * line it reads for the sheaf anyway; the slow paths from the table here. */
struct uslub_lookup {
	/* The metadata of a region that is not there: zero, so no page passes, and never
	 * written. A slot of the region table holds its region's distance from here, so an
	 * empty slot (0) reads as this region and free's fast path tests no NULL (mimalloc's
	 * empty page, for the same reason). Untouched, it costs address space only. */
	char nil[META_BYTES];
	uintptr_t region[REGION_SLOTS];
	uint64_t magic[USLUB_NR_CACHES]; /* by class, for the slow paths */
};
extern struct uslub_lookup uslub_lookup;

/* page_test.cpu_off of a slab of class cls. */
#define CPU_OFF(cls) ((uint16_t)((cls)*CPU_BYTES))

/* The test of p's page, nil's when p is in no region; i is p >> REGION_SHIFT < REGION_SLOTS. */
static inline const struct page_test *page_test_in_table(uintptr_t i, const void *p)
{
	/* In integers: the region lies outside the nil array it is reached from. */
	uintptr_t at =
	    ((uintptr_t)p >> (USLUB_PAGE_SHIFT - TEST_SHIFT)) & ((REGION_PAGES - 1) << TEST_SHIFT);
	uintptr_t base = (uintptr_t)uslub_lookup.nil + uslub_lookup.region[i];
	return (const struct page_test *)(base + at) + (TEST_OFFSET >> TEST_SHIFT);
}
static inline struct region *region_of(const void *p)
{
	uintptr_t i = (uintptr_t)p >> REGION_SHIFT;
	uintptr_t e = i < REGION_SLOTS ? uslub_lookup.region[i] : 0;
	return e ? (struct region *)((uintptr_t)uslub_lookup.nil + e) : NULL;
}

/* The descriptor of p's page, in region r (region_of(p)). */
static inline struct page_desc *region_desc(struct region *r, const void *p)
{
	return (
	    struct page_desc *)((uintptr_t)r +
				((((uintptr_t)p & REGION_MASK) >> USLUB_PAGE_SHIFT) << DESC_SHIFT));
}

/* The one lookup of a pointer: the descriptor of the block p lies in (a slab, a large
 * block, a thread structure), or NULL when p is in no region (a huge block, or not ours)
 * or in free pages. free, realloc and malloc_usable_size look a pointer up once, here, and
 * every later step takes the answer. */
static inline struct page_desc *block_of(const void *p)
{
	struct region *r = region_of(p);
	return r ? region_desc(r, p)->head : NULL;
}

static inline struct page_desc *page_desc_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	return (struct page_desc *)((a & ~REGION_MASK) +
				    (((a & REGION_MASK) >> USLUB_PAGE_SHIFT) << DESC_SHIFT));
}

static inline void *page_address(const struct page_desc *d)
{
	uintptr_t a = (uintptr_t)d;
	return (void *)((a & ~REGION_MASK) +
			(((a & REGION_MASK) >> DESC_SHIFT) << USLUB_PAGE_SHIFT));
}

/* The test of descriptor d's page. */
static inline struct page_test *page_test_of(const struct page_desc *d)
{
	uintptr_t a = (uintptr_t)d;
	return (struct page_test *)((a & ~REGION_MASK) + TEST_OFFSET +
				    (((a & REGION_MASK) >> DESC_SHIFT) << TEST_SHIFT));
}

/* The most objects a thread's sheaf of one cache holds (USLUB_SHEAVES). */
#define SHEAF_MAX 28

/* Blocks above this go to their own mapping (page/huge.c); the rest to the regions. Up
 * to MAX_BLOCK a block is cut from one buddy block; above, from a run of them (a big
 * buffer, run.c): freed, its pages stay in the zone for the next one, where a mapping of
 * its own was mapped, moved and faulted in anew (tools/bench/results/big-buffers.md). */
#define HUGE_THRESHOLD ((size_t)32 << 20)

/* ---- caches, slabs, threads ------------------------------------------------------ */

/* kmem_cache_node */
struct cache_node {
	pthread_mutex_t list_lock;
	struct cds_list_head partial;
	uint64_t nr_partial;
};

/* kmem_cache */
struct uslub_cache {
	char name[24];
	uint32_t size;
	uint32_t cls;
	/* CPU_OFF(cls), and the program's object's place in the engine's (below): the
	 * object caches' fast paths (api/objcache.c) read both from the program's handle,
	 * on the line of its cls. */
	uintptr_t cpu_off;
	/* An object cache (slab/objcache.c); 0 for the rest. The program's object lies
	 * `user_off` bytes into the engine's: caches with a constructor or TYPESAFE_BY_RCU
	 * keep the free pointer and mark in front of it, so freeing never writes into the
	 * object (the kernel moves the free pointer out of such objects). */
	uintptr_t user_off;
	uint32_t order;		    /* preferred (oo) */
	uint32_t min_order;	    /* fallback (min) */
	uint32_t objects;	    /* per preferred slab */
	uint32_t min_objects;	    /* per fallback slab */
	uint32_t cpu_partial_slabs; /* bound of a thread's partial list */
	uint32_t min_partial;	    /* empty slabs a node keeps */
	uint32_t sheaf_capacity;    /* objects a thread's sheaf of this cache holds */
	/* Object layout (debug.h): objects sit `offset` bytes into slots `stride` apart.
	 * Plain caches: offset 0, stride = size. Debug caches add red zones and a metadata
	 * record around each object, and take the slow path for every operation. */
	uint32_t stride;
	uint32_t offset;
	uint32_t debug;	 /* DBG_* flags (debug.h); 0 for a plain cache */
	uint32_t tail;	 /* bytes after the last slot: a debug cache's last right red zone */
	uint64_t secret; /* DBG_HARDEN: key of the freelist pointers */
	_Atomic uint64_t nr_slabs;
	_Atomic uint64_t nr_slabs_by_order[USLUB_MAX_ORDER + 1];
	_Atomic uint64_t total_objects;
	uint64_t stat[USLUB_NR_STATS]; /* folded from exited threads, under stat_lock */
	/* The rest of an object cache's (slab/objcache.c); zero for a kmalloc cache. */
	uint32_t user_size; /* the size asked for */
	uint32_t user_align;
	uint32_t uflags; /* USLUB_CACHE_* (uslub.h) */
	void (*ctor)(void *object);
	struct uslub_cache *alias_of; /* a merged cache's handle: the cache it shares */
	_Atomic uint32_t aliases;     /* handles merged into this cache */
	_Atomic uint32_t dead;	      /* destroyed (its slot is not reused) */
};

/* The class byte of a descriptor that is not a slab's (large blocks, thread states). */
#define CLS_NONE 0xff

/* A slab's count of carved objects, which carving raises while other threads free into
 * the slab (slab.c, section 9). Under ThreadSanitizer a relaxed atomic load; elsewhere a
 * plain one, the same instruction on x86: GCC allocates registers worse around an
 * atomic or volatile load in free's fast path (3 instructions a free), and
 * a stale value is still above every object handed out. */
#ifdef USLUB_TSAN /* stat_items.h */
#define objects_of(d) __atomic_load_n(&(d)->objects, __ATOMIC_RELAXED)
#else
#define objects_of(d) ((d)->objects)
#endif

/* Is p the start of an object inside slab s (its head descriptor), s being a plain
 * cache's slab? False for every pointer into a debug cache, and for any pointer outside
 * the slab: the slow paths ask this of links read from free objects too. */
static inline bool plain_object_at(const struct page_desc *s, const void *p)
{
	uint64_t off = (uintptr_t)p - ((uintptr_t)page_address(s));
	uint64_t magic = uslub_lookup.magic[s->cls];
	unsigned __int128 m = (unsigned __int128)off * magic;
	return likely(!(off >> 32)) && likely((uint64_t)m < magic) &&
	       likely((uint64_t)(m >> 64) < objects_of(s));
}

/* kmem_cache_cpu: one per cache in each thread. The sheaf (Linux 6.18's percpu sheaf) is
 * the thread's allocation and free path for the cache: malloc pops it, free pushes onto it,
 * whichever slab the object lies in; the slab fields below it are where the sheaf is
 * refilled from and the objects of a full sheaf go back to when the barn has no room (see
 * slab.c, section 6). The sheaf comes first, so both fast paths read one cache line for
 * the count and one for the slot. */
struct cache_cpu {
	uint16_t sheaf_count; /* objects in sheaf[] */
	uint16_t sheaf_cap;   /* 0 for threads without state and for debug caches */
	uint16_t nr_partial;
	/* Refills served from the node's shared slabs before the thread holds a slab of
	 * this cache, after its early objects (sheaf.c): a thread that allocates a few
	 * objects costs no slab. */
	uint8_t shared_refills;
	uint8_t last_move;	   /* the sheaf's last slow path: SHEAF_REFILLED or SHEAF_SPILLED */
	void *freelist;		   /* objects of `slab`, taken without atomics */
	struct page_desc *slab;	   /* frozen by this thread */
	struct page_desc *partial; /* more slabs frozen by this thread */
	/* The class's magic (uslub_lookup) while the sheaf is open, for free's fast path,
	 * which reads this line for the count anyway; 0 while it is closed, and in threads
	 * without state and debug caches, so their frees take the slow path. */
	uint64_t magic;
	uint64_t stat[USLUB_NR_THREAD_STATS];
	void *sheaf[SHEAF_MAX];
} __attribute__((aligned(CPU_BYTES)));
_Static_assert(sizeof(struct cache_cpu) == CPU_BYTES, "cache_cpu is CPU_BYTES");
/* malloc's fast path: the offset of cpu[class] in a thread, by (size + 15) / 16, for
 * sizes up to USLUB_MAX_SMALL (the class table scaled, so malloc does not multiply), and
 * of the medium sheaf of the size's page count above, up to USLUB_MAX_FAST (below).
 * Written at start-up before any thread has state of its own; threads without state
 * find every sheaf empty whatever they read. */
extern uint16_t uslub_cpu_of[];

/* free_fastpath is not counted where it happens: the fast path's push already writes
 * sheaf_count. Each fast free adds 1 to the count, each fast malloc takes 1 from it and
 * adds 1 to alloc_fastpath, and every other change of the count (refills, spills,
 * flushes: sheaf_set_count) subtracts itself from stat[FREE_FASTPATH]. So the sum below
 * is the number of fast frees. Relaxed loads: a reader of another thread's counters
 * gets a figure as racy as the plain counters'. */
static inline uint64_t uslub_cc_stat(const struct cache_cpu *cc, unsigned k)
{
	uint64_t v = __atomic_load_n(&cc->stat[k], __ATOMIC_RELAXED);
	if (USLUB_STATS_ENABLED && k == USLUB_STAT_FREE_FASTPATH)
		v += __atomic_load_n(&cc->sheaf_count, __ATOMIC_RELAXED) +
		     __atomic_load_n(&cc->stat[USLUB_STAT_ALLOC_FASTPATH], __ATOMIC_RELAXED);
	return v;
}
/* A change of the sheaf's count that is not a fast-path push or pop. */
static inline void sheaf_set_count(struct cache_cpu *cc, unsigned n)
{
	uslub_stat_add(cc, FREE_FASTPATH, (uint64_t)cc->sheaf_count - n);
	uslub_own_store(cc->sheaf_count, (uint16_t)n);
}

/* The thread's medium-block cache (slab/medium.c): freed large blocks of up to
 * MEDIUM_MAX_PAGES pages (256 KiB, tcmalloc's bound; past 128 KiB in every eighth page
 * count, slab/slab.h: medium_count), by page count, held to
 * `medium_high` pages, which starts at MEDIUM_HIGH_MIN (the 64 KiB the cache held before
 * it grew with demand) and grows with the thread's churn up to MEDIUM_HIGH_MAX (4 MiB, as
 * gperftools bounds a thread's cache), less with many threads: the caches together are
 * held to MEDIUM_HIGH_TOTAL (32 MiB, gperftools' default total), and no thread's to
 * under MEDIUM_HIGH_MIN_MAX (1 MiB). At 1 MiB blocks of 8-128 KiB replaced at random
 * missed three times in ten, 427 instructions a replacement against 230 at 4 MiB; the
 * price is peak memory where blocks kept out of the zones split the holes larger blocks
 * need (realloc_mix: 375 MiB against 329). A refill brings up to MEDIUM_BATCH blocks.
 * Figures: README.md, "Threads and medium blocks", and tools/bench/results/medium-blocks.md. */
#define MEDIUM_MIN_PAGES    (USLUB_MAX_SMALL / USLUB_PAGE_SIZE + 1)
#define MEDIUM_MAX_PAGES    64
#define MEDIUM_HIGH_MIN	    16
#define MEDIUM_HIGH_MAX	    1024
#define MEDIUM_HIGH_MIN_MAX 256
#define MEDIUM_HIGH_TOTAL   8192
#define MEDIUM_BATCH	    8
_Static_assert(MEDIUM_MAX_PAGES <= 64, "the bins' mask is 64 bits (slab/medium.h, medium_bit)");

/* The medium sheaves (thread/medium_sheaf.c): blocks of MEDIUM_MIN_PAGES..MSHEAF_MAX_PAGES pages
 * (8 KiB < size <= 128 KiB, USLUB_MAX_FAST: every medium block) take malloc's and free's fast paths
 * as objects do, one cache_cpu per page count (uslub_thread.mcpu): a block's first page carries
 * free's test with objects 1, so only its start passes. Sizes uniform up to 32 KiB are three
 * quarters medium blocks, and with a path of their own the branch between the two kinds was
 * mispredicted at random in malloc and in free (README.md, "Threads and medium blocks"); blocks of
 * 9-32 pages on the medium-block cache's own path took 216 instructions a replacement at 16 B -
 * 128 KiB, 145 on the sheaves. */
#define MSHEAF_MAX_PAGES 32
#define NR_MSHEAVES	 (MSHEAF_MAX_PAGES - MEDIUM_MIN_PAGES + 1)
#define USLUB_MAX_FAST	 ((size_t)MSHEAF_MAX_PAGES << USLUB_PAGE_SHIFT)
_Static_assert(MSHEAF_MAX_PAGES <= MEDIUM_MAX_PAGES, "a medium sheaf's blocks are medium");

/* Free medium blocks by page count: bin n lists blocks of n pages through their
 * descriptors' `next`; bit n of `nonempty` says bin n has one. A thread's cache and a
 * node's depot (slab/medium.c) are each one. */
struct medium_bins {
	struct page_desc *head[MEDIUM_MAX_PAGES + 1];
	uint16_t count[MEDIUM_MAX_PAGES + 1];
	uint64_t nonempty;
	uint32_t pages; /* in the bins together */
};

#define USLUB_MEDIUM_STAT_ITEMS(X)                                                                 \
	X(MEDIUM_HIT, medium_hits)    /* a request served from the cache */                        \
	X(MEDIUM_MISS, medium_misses) /* ... from the node's depot or the zone, with a batch */    \
	X(MEDIUM_DEPOT, medium_depot_refills) /* misses the depot served */                        \
	X(MEDIUM_REFILL, medium_refills)      /* blocks those batches brought besides */           \
	X(MEDIUM_FREE, medium_frees)	      /* blocks freed into the cache */                    \
	X(MEDIUM_FLUSH, medium_flushes)	      /* blocks sent on to the depot or the zones */
enum uslub_medium_stat_item {
#define X(id, name) USLUB_##id,
	USLUB_MEDIUM_STAT_ITEMS(X)
#undef X
	    USLUB_NR_MEDIUM_STATS
};

/* The thread's page cache (thread.c): free blocks of orders 0..PCP_MAX_ORDER, the orders
 * the kernel's per-CPU pagesets hold (PAGE_ALLOC_COSTLY_ORDER), so slabs of every cache
 * turn over without the node lock. Sizes in pages, all orders together. */
#define PCP_MAX_ORDER	     3
#define PCP_ORDERS	     (PCP_MAX_ORDER + 1)
#define PCP_HIGH_MIN	     8	/* what a thread keeps before it shows demand: one order-3 block */
#define PCP_HIGH	     64 /* ... and at most, after it has */
#define PCP_HIGH_ORDER_PAGES 8	/* kept of each order above 0 */
#define PCP_BATCH_SHIFT	     4	/* the largest order-0 refill: 16 pages */
#define PCP_BATCH_STEPS	     (2 * PCP_BATCH_SHIFT)

/* Page-cache counters, per order (folded like the caches' at exit; stats.c prints them). */
#define USLUB_PCP_STAT_ITEMS(X)                                                                    \
	X(PCP_HIT, pcp_hits)	   /* a block taken from the thread's list */                      \
	X(PCP_MISS, pcp_misses)	   /* the list was empty: a refill from the buddy was tried */     \
	X(PCP_REFILL, pcp_refills) /* blocks brought in by refills */                              \
	X(PCP_FREE, pcp_frees)	   /* blocks freed into the list */                                \
	X(PCP_DRAIN, pcp_drains)   /* blocks sent back to the buddy */
enum uslub_pcp_stat_item {
#define X(id, name) USLUB_##id,
	USLUB_PCP_STAT_ITEMS(X)
#undef X
	    USLUB_NR_PCP_STATS
};
struct uslub_thread {
	struct cache_cpu cpu[USLUB_NR_CACHES];
	/* The medium sheaves: mcpu[n - MEDIUM_MIN_PAGES] holds blocks of n pages. */
	struct cache_cpu mcpu[NR_MSHEAVES];
	struct uslub_thread *reg_next, *reg_prev; /* registry, under uslub_registry_lock */
	unsigned node;
	/* The page cache: free blocks by order, linked through their descriptors' `list`,
	 * newest first (the warmest are taken first, the oldest drained first). Only the
	 * thread touches it (the orphan's: under uslub_orphan_lock). */
	struct cds_list_head pcp[PCP_ORDERS];
	uint16_t pcp_blocks[PCP_ORDERS]; /* blocks on each list */
	unsigned pcp_count;		 /* pages on the lists */
	unsigned pcp_node;		 /* the node the blocks came from */
	uint16_t pcp_high;		 /* drained down when a free takes it past this */
	uint8_t pcp_batch_step;		 /* an order-0 refill brings 2^(step / 2) pages */
	uint8_t barn_ticks;		 /* sheaf slow paths since the barns' clock was looked at */
	uint8_t barn_shard;		 /* which of the node's barns it puts into (thread.h) */
	uint64_t pcp_stat[USLUB_NR_PCP_STATS][PCP_ORDERS];
	/* The medium-block cache (slab/medium.c). */
	struct medium_bins medium;
	uint32_t medium_high;  /* flushed down to half of it when a free passes it */
	unsigned medium_node;  /* the node the blocks came from */
	unsigned medium_shard; /* which of the node's depots it uses first (depot.c) */
	uint64_t medium_stat[USLUB_NR_MEDIUM_STATS];
	_Atomic int medium_busy, medium_claim; /* owner in, drain wants in (medium.c) */
	_Atomic int medium_user; /* counted in uslub_medium_users (thread/medium_sheaf.c) */
	int state;		 /* THREAD_* */
	/* Below the sheaves (slabs, freelists, page cache; the medium-block cache: see
	 * medium_busy) the owner works on slow paths only, under this lock, so the background
	 * thread can give an idle thread's back (thread.c, idle drain). */
	_Atomic int slow_lock;
	/* A slow path ran since the drain last looked (the barn's refill sets it unlocked;
	 * relaxed: a late look only delays a drain); idle_ticks: its looks since then. */
	_Atomic bool active;
	uint8_t idle_ticks;
	bool parked;			/* unpublished to take its sheaves (thread.c) */
	struct uslub_thread **tls_slot; /* where its thread's uslub_tls_thread lies */
	uint64_t made_ticks;		/* since boot: its thread started before */
	_Atomic int64_t large_delta;	/* large blocks' bytes not yet folded in (usage.c) */
	/* Objects of each cache taken with its sheaf still closed (sheaf.c, early
	 * objects): counted here, on the page creation writes anyway, so that a thread
	 * holding a few blocks of a dozen caches writes no page of cpu[]. */
	uint8_t early[USLUB_NR_CACHES];
	/* The kernel's ids of the thread that made the state, so a sweep can tell it is gone
	 * (thread.c, reaping). tid 0: never swept - the orphan, a state being torn down, and
	 * in a forked child the parent's other threads'. Set before the state is published,
	 * cleared under uslub_registry_lock. */
	int tgid, tid;
};

_Static_assert(sizeof(struct uslub_thread) <= (USLUB_PAGE_SIZE << 4), "a thread state is order 4");
/* What a state's creation writes - the fields after the cache_cpus - lies on one page. */
_Static_assert(offsetof(struct uslub_thread, reg_next) >> USLUB_PAGE_SHIFT ==
		   (sizeof(struct uslub_thread) - 1) >> USLUB_PAGE_SHIFT,
	       "a thread state's own fields share one page");
_Static_assert(CPU_OFF(USLUB_NR_CACHES - 1) == (USLUB_NR_CACHES - 1) * CPU_BYTES,
	       "every cache's cache_cpu offset fits page_test.cpu_off");
/* page_test.cpu_off of a block of n pages (MEDIUM_MIN_PAGES..MSHEAF_MAX_PAGES). */
#define MCPU_OFF(n)                                                                                \
	((uint16_t)(offsetof(struct uslub_thread, mcpu) + ((n)-MEDIUM_MIN_PAGES) * CPU_BYTES))
_Static_assert(offsetof(struct uslub_thread, mcpu[NR_MSHEAVES]) <= UINT16_MAX,
	       "every medium sheaf's cache_cpu offset fits page_test.cpu_off");
_Static_assert(USLUB_NR_CACHES < CLS_NONE, "a class byte names every cache");

enum { THREAD_EMPTY, THREAD_LIVE, THREAD_DEAD, THREAD_ORPHAN };
extern __thread struct uslub_thread *uslub_tls_thread;
/* States in the registry, the orphan's included (thread.c stores it, relaxed; others peek:
 * slab/medium.c uses its depot only when more than one thread has a state; usage.c); and
 * threads with medium sheaves open, which share those sheaves' bound and the medium-block
 * caches' (thread/medium_sheaf.c; while none has, the states share them). */
extern unsigned uslub_nr_thread_states, uslub_medium_users;
extern struct uslub_thread uslub_empty_thread;
/* Free pointers and free marks of plain caches (slab.c, section 7). Set once at start-up,
 * before the first slab. A stored free pointer is the next object's address mixed with
 * the secret and the byte-swapped address it is stored at (the kernel's
 * CONFIG_SLAB_FREELIST_HARDENED); `mask` is 0 with USLUB_HARDEN=off, which stores them in
 * the clear. Every free object of a plain cache carries `mark` ^ its own address in its
 * second word, and no allocated one does: free checks it before anything else. */
struct uslub_keys {
	uintptr_t secret;
	uintptr_t mask;
	uintptr_t mark;
};
extern struct uslub_keys uslub_keys;

static inline uintptr_t link_key(const void *slot)
{
	return ((uintptr_t)__builtin_bswap64((uint64_t)(uintptr_t)slot) ^ uslub_keys.secret) &
	       uslub_keys.mask;
}
static inline void *link_get(const void *object)
{
	return (void *)(*(const uintptr_t *)object ^ link_key(object));
}
static inline void link_set(void *object, const void *next)
{
	*(uintptr_t *)object = (uintptr_t)next ^ link_key(object);
}
static inline bool is_marked_free(const void *object)
{
	return ((const uintptr_t *)object)[1] == (uslub_keys.mark ^ (uintptr_t)object);
}
static inline void mark_free(void *object)
{
	((uintptr_t *)object)[1] = uslub_keys.mark ^ (uintptr_t)object;
}
static inline void mark_allocated(void *object)
{
	((uintptr_t *)object)[1] = 0;
}

/* The owner's side of slow_lock: taken on every slow path that touches what lies below
 * the sheaves. Uncontended but for the moments a drain holds it. Only a live state has
 * one to take (the orphan has its own lock; the empty and dead ones hold nothing). */
static inline bool uslub_slow_enter(struct uslub_thread *t)
{
	if (t->state != THREAD_LIVE)
		return false;
	if (unlikely(atomic_exchange_explicit(&t->slow_lock, 1, memory_order_acquire))) {
		uslub_lock_waited(USLUB_LOCK_SLOW);
		while (atomic_exchange_explicit(&t->slow_lock, 1, memory_order_acquire))
			cpu_relax();
	}
	atomic_store_explicit(&t->active, true, memory_order_relaxed);
	return true;
}
static inline void uslub_slow_exit(struct uslub_thread *t, bool entered)
{
	if (entered)
		atomic_store_explicit(&t->slow_lock, 0, memory_order_release);
}
#pragma GCC visibility pop
#endif
