/* Debug caches: the kernel's slub_debug in user space (USLUB_DEBUG), the hardened
 * freelist (USLUB_HARDEN=full), and the checkers (valgrind, AddressSanitizer).
 *
 * A cache with any of these on is a *debug cache*: its thread freelist is never filled
 * and its free fast path never matches (the free fast path's interior-pointer test fails
 * for every object: the cache's divisibility magic is 0, which no offset passes), so every
 * allocation and free of it takes the slow path in slab.c, which calls the hooks below. The inline
 * fast paths have no debug branch.
 *
 * A debug cache lays its slab out in slots of `stride` bytes, with the object `offset`
 * bytes into its slot; W is the red zone width (USLUB_REDZONE, 64 by default, so a miss by
 * up to W bytes on either side lands in one):
 *
 *     slot + 0        right red zone of the previous slot's object (W bytes)
 *     slot + W        struct dbg_meta: free pointer, state word, tracks, sequence, kind
 *     ...             padding up to the object's alignment
 *     object - W      left red zone (W bytes)
 *     object          the object: the class size
 *
 * and the slab keeps W bytes after its last slot for that object's right red zone. The
 * offset and the stride are multiples of the largest power of two (up to a page) that
 * divides the class size, so objects keep the alignment aligned_alloc relies on. The free
 * pointer lives outside the object, so poisoning fills the whole object, and a write
 * after free cannot redirect the freelist.
 *
 * An allocated object keeps the size the program asked for (the kernel's orig_size) in
 * the word that holds the free pointer while it is free, so it costs no room. The
 * checkers see that size, not the class's: memcheck's block and ASan's unpoisoned bytes
 * end there, with Z the bytes from it to the end of the slot are red zone (the kernel's
 * kmalloc red zone), and malloc_usable_size reports it. */
#ifndef USLUB_DEBUG_H
#define USLUB_DEBUG_H

#include "hooks.h"
#include "os/vg.h"
#include "thread/thread.h"

#pragma GCC visibility push(hidden)

enum {
	DBG_CHECK = 0x1,	/* F: consistency checks, exact double-free detection */
	DBG_REDZONE = 0x2,	/* Z: red zones around each object */
	DBG_POISON = 0x4,	/* P: free objects filled with 0x6b ... 0xa5, checked */
	DBG_TRACK = 0x8,	/* U: last allocation and free site of each object */
	DBG_TRACE = 0x10,	/* T: one line per operation on stderr */
	DBG_HARDEN = 0x20,	/* USLUB_HARDEN=full: obfuscated free pointers, range-checked */
	DBG_VALGRIND = 0x40,	/* running under valgrind: memcheck told about every object */
	DBG_ASAN = 0x80,	/* an ASan build: free objects and metadata poisoned */
	DBG_QUARANTINE = 0x100, /* Q: freed objects held (quarantine.c) before reuse */
	DBG_BOUNDS = 0x200,	/* B: writes by memcpy, memmove, memset checked (bounds.c) */
};
/* The checkers that watch the bytes between the request and the class size: with one of
 * them on, malloc_usable_size reports the request, so a program that uses what it is told
 * it may use stays clean. */
#define DBG_SLACK (DBG_REDZONE | DBG_VALGRIND | DBG_ASAN)

/* Each red zone's width W (USLUB_REDZONE rounded up to 16), set by uslub_debug_init. */
extern unsigned uslub_debug_rz;
#define DBG_RZ	      uslub_debug_rz
#define DBG_META_SIZE 64 /* room for struct dbg_meta, after the previous right red zone */
#define POISON_FREE   0x6b
#define POISON_END    0xa5
#define RED_INACTIVE  0xbb
#define RED_ACTIVE    0xcc

struct dbg_track {
	uintptr_t addr; /* return address of the caller of malloc or free */
	uint32_t tid;
	uint32_t cpu;
};

struct dbg_meta {
	union {
		uintptr_t link;	    /* free: free pointer (obfuscated with DBG_HARDEN) */
		uint64_t orig_size; /* allocated: the size asked for, up to the class size */
	};
	uint64_t state;		   /* object address ^ STATE_ALLOC or STATE_FREE */
	struct dbg_track track[2]; /* TRACK_ALLOC, TRACK_FREE */
	/* Odd while an operation changes the object (a seqlock's count): the sweep
	 * (sweep.c) reads an object's state, red zones and poison between two even,
	 * equal loads of it, so it never reports an object caught mid-change. Written
	 * only by the thread operating on the object. */
	uint32_t seq;
	uint32_t kind; /* enum dbg_kind: how an allocated object was asked for */
};
_Static_assert(sizeof(struct dbg_meta) <= DBG_META_SIZE, "metadata fits its room");

/* The state word's two values, XORed with the object's address (debug.c). */
#define DBG_STATE_ALLOC 0xa110ca7eda110ca7ULL
#define DBG_STATE_FREE	0xf7eedf7eedf7eed0ULL

/* What allocated an object, so the matching deallocation can be checked (ASan's
 * alloc-dealloc-mismatch): malloc and the C family, operator new, operator new[]. */
enum dbg_kind { KIND_MALLOC, KIND_NEW, KIND_NEW_ARRAY };

enum { TRACK_ALLOC, TRACK_FREE };

/* Read USLUB_DEBUG and USLUB_HARDEN (already in uslub_config), ask whether valgrind runs,
 * and give each cache its flags, layout and secret. Called by start-up (api/startup.c)
 * between uslub_caches_init, which sets the plain layout, and uslub_caches_open; a cache
 * without flags keeps the plain layout. */
void uslub_debug_init(void);

/* An object cache's debug flags (api/objcache.c): what every cache gets, USLUB_DEBUG's
 * letters when its cache list names `name` (or there is none), and the cache's own
 * `letters` (USLUB_DEBUG_*); `typed` (a constructor or TYPESAFE_BY_RCU) drops what would
 * change or hide a free object. Then its slot layout, once c->debug is set. */
unsigned uslub_debug_cache_flags(const char *name, unsigned letters, bool typed);
void uslub_debug_cache_layout(struct uslub_cache *c);

/* What USLUB_DEBUG asked for: letters for some cache, and whether for every cache (no
 * list of them). Sized frees check the size they are given when these say so (sized.h);
 * set once by uslub_debug_init. */
extern bool uslub_debug_any;
extern bool uslub_debug_every_cache;

/* Where a debug object's metadata is. */
static inline struct dbg_meta *dbg_meta_of(const struct uslub_cache *c, void *object)
{
	return (struct dbg_meta *)((char *)object - c->offset + DBG_RZ);
}

/* memcheck's block of a debug object holding `size` bytes: the program's part of it, which
 * in a constructor's or an RCU cache starts `user_off` bytes in (types.h). A constructed
 * object is handed out defined: its bytes are the constructor's or what the program left
 * (issue 27: "the ctor's state defined"). A freed object of an RCU cache stays readable,
 * as a reader may still look at it (memcheck then sees no use after free there, which is
 * the cache's contract); a constructor's is closed until it is handed out again. */
static inline void dbg_vg_alloc(const struct uslub_cache *c, void *object, size_t size)
{
	char *p = (char *)object + c->user_off;
	if (c->ctor)
		vg_malloclike_zeroed(p, size - c->user_off);
	else
		vg_malloclike(p, size - c->user_off, DBG_RZ);
}
static inline void dbg_vg_free(const struct uslub_cache *c, void *object)
{
	char *p = (char *)object + c->user_off;
	vg_freelike(p, DBG_RZ);
	if (c->uflags & USLUB_CACHE_TYPESAFE_BY_RCU)
		vg_defined(p, c->size - c->user_off);
}

/* A freed object closed to the checkers, but an RCU cache's, which readers may read. */
static inline void dbg_close_freed(const struct uslub_cache *c, void *object)
{
	if (!(c->uflags & USLUB_CACHE_TYPESAFE_BY_RCU))
		mem_close(object, c->size);
}

/* Free pointers of a debug cache: decoded and, with DBG_HARDEN, checked to point at an
 * object of the same slab; a corrupted one is reported and the program stops. */
void *uslub_debug_get_next(const struct uslub_cache *c, void *object);
void uslub_debug_set_next(const struct uslub_cache *c, void *object, void *next);

/* A new slab: red zones, poison, state and free pointers are set by the caller through
 * these; uslub_debug_slab_ready then hides the whole slab from the program. */
void uslub_debug_init_object(const struct uslub_cache *c, void *object);
void uslub_debug_slab_ready(const struct uslub_cache *c, struct page_desc *s);
/* A slab going back to the page allocator: its pages are ordinary memory again. */
void uslub_debug_slab_discard(const struct uslub_cache *c, struct page_desc *s);

/* An object leaving the slab for the program (`size` bytes asked for), and one coming
 * back: the checks of each flag, then the object's state, tracks and poison; a violation
 * is reported and the program stops. `caller` is the program's return address. */
void uslub_debug_alloc(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
		       void *caller);
/* True when the quarantine (Q) keeps the object: it is then freed from there later. */
bool uslub_debug_free(struct uslub_cache *c, struct page_desc *s, void *object, void *caller);
/* An allocated object now holds `size` bytes (size <= the class size): realloc in place,
 * and aligned_alloc, which takes a class for its alignment. The old red zone is checked,
 * the new one set, and the checkers told. `op` names the call for a report. */
void uslub_debug_resize(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			const char *op);
/* What malloc_usable_size reports for an object of a debug cache: the request when a
 * checker watches the bytes after it (DBG_SLACK), else the class size. A pointer to a free
 * object is reported (`op` names the call) and the program stops. */
size_t uslub_debug_usable(struct uslub_cache *c, struct page_desc *s, void *object, const char *op);

/* The slab_is_valid() walker of USLUB_DEBUG=F and the tests: descriptor, counts and, for
 * the slab's owner, every free list; false with the reason in *why. */
bool uslub_slab_is_valid(struct page_desc *s, const char **why);
/* Is this debug object's state "free"? For the consistency walker. */
bool uslub_debug_is_free(const struct uslub_cache *c, void *object);

/* The kernel-style report: the cache, what was found, the object's bytes around `fault`
 * (NULL: the object's start), its alloc and free sites; then abort. */
__attribute__((noreturn)) void uslub_debug_report(const struct uslub_cache *c, struct page_desc *s,
						  void *object, const char *what,
						  const void *fault);

/* ---- the quarantine (Q, quarantine.c) and the sweep (sweep.c) ------------------------ */

/* Frees every held object now (its poison checked as it leaves): malloc_trim, and tests
 * that count live objects. */
void uslub_quarantine_drain(void);
/* Objects held now. */
uint64_t uslub_quarantine_held(void);
/* fork: taken before every other lock, so the child inherits a consistent queue. */
void uslub_quarantine_lock(void);
void uslub_quarantine_unlock(void);

/* Whether some debug cache has red zones or poison to sweep (and no checker of its own
 * watches the bytes); set by uslub_debug_init. */
extern bool uslub_debug_sweep_wanted;
/* Checks the red zones of allocated objects and the poison and red zones of free ones in
 * the debug caches' slabs; a bad one is reported (`op` names the occasion: malloc_trim,
 * exit, the background sweep) and the program stops. `pages` 0: every slab, from the
 * start; otherwise up to that many pages of slabs from where the last bounded sweep
 * stopped (the background thread's steps). */
void uslub_debug_sweep(const char *op, size_t pages);

/* C++ (preload/new_delete.c through api/sized.c): the allocation kind of p, a live
 * object of a debug cache (others are left alone), is set to `kind`, or checked against
 * the kind a deallocation of `kind` expects - a mismatch is reported and the program
 * stops - and reset so the free that follows passes. */
void uslub_debug_set_kind(struct uslub_cache *c, struct page_desc *s, void *object,
			  enum dbg_kind kind);
void uslub_debug_check_kind(struct uslub_cache *c, struct page_desc *s, void *object,
			    enum dbg_kind kind, const char *op);
/* The same for large block d at p (its descriptor keeps the kind, dbg_kind): a mismatch,
 * `kind` KIND_MALLOC for a free, is reported and the program stops. */
void uslub_debug_check_block_kind(struct page_desc *d, void *p, enum dbg_kind kind, const char *op);
/* The same for huge block p, whose kind its entry in the huge table keeps; nothing when p
 * is no huge block (its free reports it). */
void uslub_debug_check_huge_kind(void *p, enum dbg_kind kind, const char *op);
/* The size a debug object was asked for (its orig_size). */
size_t uslub_debug_requested(struct uslub_cache *c, void *object);

/* ---- large and huge blocks --------------------------------------------------------- */

/* The hooks of the large and huge blocks (hooks.h, block_*), under the checkers that
 * uslub_block_debug (hooks.h) names. */

/* A new block; `zeroed`: its bytes read as zero already (calloc of fresh pages). `lead`:
 * bytes of red zone before p (a guarded large block's first page, slab/large.c, or a huge
 * block's, page/huge.c). */
void uslub_debug_block_alloc(void *p, size_t size, size_t span, size_t lead, bool zeroed);
/* Z: the red zones before and after the request are intact, else a report names the
 * block and the program stops. `op` names the call. */
void uslub_debug_block_check(void *p, size_t size, size_t span, size_t lead, const char *op);
/* The block goes back (its red zones checked; a large one poisoned with P): true when
 * the quarantine (Q) keeps large block d, to release it later. d is NULL for a huge
 * block, which goes to the huge cache or the OS, where no check would read a poison. */
bool uslub_debug_block_free(void *p, size_t size, size_t span, size_t lead, struct page_desc *d);
/* The block at p (old bytes asked for in old_span) is now at q (p, or where mremap moved
 * it) with `size` in `span` and `lead` before it; the caller checked its red zones before
 * changing them. */
void uslub_debug_block_resize(void *p, void *q, size_t old, size_t old_span, size_t size,
			      size_t span, size_t lead);
/* The sweep's look at a guarded large block d, under its zone's lock (sweep.c): the red
 * zones of a live one, the poison of one the quarantine holds. */
void uslub_debug_block_sweep(struct page_desc *d, const char *op);
/* Q: large block d (freed, poisoned, PF_HELD) into the quarantine; false when it does not
 * take it (quarantine.c). */
bool uslub_quarantine_put_block(struct page_desc *d);

/* ---- B: the bounds of memcpy, memmove and memset (bounds.c) --------------------------- */

/* B for some cache: what the exported check (api/bounds.c) asks first; set at start-up. */
extern bool uslub_debug_bounds;
/* A write of n bytes at dst by `op` (memcpy, memmove, memset), called by the program at
 * `caller`: when dst lies in a block of a cache with B (or a large block, B on every
 * cache), the write must stay inside the block's request, and the block must be live;
 * else a report names the block, the offset and the op, and the program stops. Writes
 * from uslub's own code are not checked. */
void uslub_debug_check_write(const void *dst, size_t n, const char *op, const void *caller);

/* Under U, the allocation sites of cache c's objects still allocated, counted by site, on
 * stderr (uslub_cache_destroy of a cache with live objects; leaks.c). */
void uslub_debug_report_leaks(const struct uslub_cache *c);
/* Writes "ADDR (module+0xOFF)" for a code address, reading /proc/self/maps without
 * allocating, so `addr2line -e module 0xOFF` names the line. For reports and tests. */
struct uslub_out;
void uslub_debug_print_addr(struct uslub_out *o, uintptr_t addr);

#pragma GCC visibility pop

#endif
