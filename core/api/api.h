/* The malloc family on top of the engine, shared by the prefixed API (api.c) and the
 * exported names (preload/malloc.c): malloc's and free's inline fast paths, each reading
 * top to bottom on one screen, and the one classification of a pointer (lookup.c) that
 * every other operation on an existing block takes. */
#ifndef USLUB_API_IMPL_H
#define USLUB_API_IMPL_H

#include "debug/debug.h"
#include "thread/thread.h"
#include "uslub.h" /* the prefixed API: calloc, realloc, ... are implemented under it */

#include <malloc.h>

#pragma GCC visibility push(hidden)

/* ---- start-up (startup.c) ---------------------------------------------------------- */

extern _Atomic int uslub_ready;
void uslub_init_slow(void);
/* Every entry point that may come first sets the allocator up: one load when it is. */
static inline void uslub_init(void)
{
	if (unlikely(!atomic_load_explicit(&uslub_ready, memory_order_acquire)))
		uslub_init_slow();
}

/* ---- what a pointer is (lookup.c) -------------------------------------------------- */

enum uslub_ptr_kind {
	PTR_SLAB,  /* an object of a slab */
	PTR_LARGE, /* a large block, in the regions */
	PTR_HUGE,  /* outside the regions: a huge mapping, if the huge table knows it */
};

struct uslub_ptr {
	enum uslub_ptr_kind kind;
	struct page_desc *d;   /* slab or large block: its head descriptor; huge: NULL */
	struct uslub_cache *c; /* slab: its cache */
	size_t usable;	       /* bytes the program may use (the request, where a checker
				* watches the bytes after it): always for a plain slab
				* object, with CLASSIFY_USABLE for the rest */
};

enum { CLASSIFY_USABLE = 0x1 };

/* A pointer with no live block behind it: a second free of a block whose memory went
 * back (its pages free, or its huge mapping gone) is reported as a double free, anything
 * else as an invalid pointer. Stops the program. */
__attribute__((noreturn)) void uslub_report_no_block(const char *func, const void *p);

/* Classifies p, whose block_of() is d, for operation `op` (named in a report): a live
 * block's start, or the program stops with a report of what p is instead (an interior,
 * foreign or freed pointer). A huge block is not looked up unless CLASSIFY_USABLE asks
 * for its size: each huge operation looks it up once itself. */
static inline __attribute__((always_inline)) void uslub_classify(const void *p, struct page_desc *d,
								 const char *op, unsigned flags,
								 struct uslub_ptr *out)
{
	out->d = d;
	out->c = NULL;
	out->usable = 0;
	if (!d) {
		/* No block in the regions: a huge mapping, or nothing of ours - or a page
		 * inside a bare block (slab.h, PF_BARE), which no other step would know. */
		struct page_desc *bare = uslub_large_bare_around(p);
		if (unlikely(bare))
			uslub_report_bad_block("invalid pointer", op, p, "inside a large",
					       (size_t)bare->objects << USLUB_PAGE_SHIFT);
		out->kind = PTR_HUGE;
		if (flags & CLASSIFY_USABLE) {
			out->usable = uslub_huge_usable(p);
			if (!out->usable)
				uslub_report_no_block(op, p);
		}
		return;
	}
	if (d->kind == PAGE_LARGE) {
		size_t bytes = (size_t)d->objects << USLUB_PAGE_SHIFT;
		/* Freed, waiting in a thread's sheaf or cache, or in the quarantine. A freed
		 * block may start elsewhere now: a cached one at its page, one in a sheaf at
		 * the sheaf's colour (slab.h, medium_color_of). */
		const void *start = uslub_large_start(d);
		bool freed = (d->flags & (PF_CACHED | PF_HELD)) || medium_in_sheaf(d, start);
		if (unlikely(p != start) &&
		    (!freed ||
		     (p != page_address(d) && p != (char *)page_address(d) + medium_color_of(d))))
			uslub_report_bad_block("invalid pointer", op, p, "inside a large", bytes);
		if (freed)
			uslub_report_bad_block("double free", op, p, "large", bytes);
		out->kind = PTR_LARGE;
		if (flags & CLASSIFY_USABLE)
			out->usable = uslub_large_usable(d);
		return;
	}
	if (d->kind != PAGE_SLAB)
		uslub_report_no_block(op, p);
	struct uslub_cache *c = &uslub_caches[d->cls];
	if (unlikely(c->debug) ? uslub_slab_object_start(d, p) != p : !plain_object_at(d, p))
		uslub_report_bad_free("invalid pointer", op, p, c, d);
	out->kind = PTR_SLAB;
	out->c = c;
	if (likely(!c->debug)) {
		if (is_marked_free(p))
			uslub_report_bad_free("double free", op, p, c, d);
		out->usable = c->size;
	} else if (flags & CLASSIFY_USABLE) {
		/* A debug cache tells a free object by its state, and says so itself. */
		out->usable = uslub_debug_usable(c, d, (void *)p, op);
	}
}

/* Frees p, classified for `op`, out of line: every kind and case (lookup.c). */
void uslub_free_ptr_slow(void *p, const struct uslub_ptr *ptr, const char *op, void *caller);
/* Frees p, classified for `op`; `caller` is the program's call site (USLUB_DEBUG=U). A
 * plain object whose class's sheaf is open and has room is pushed as free's fast path
 * pushes it (realloc's and the sized frees' common case); the rest goes out of line. */
static inline void uslub_free_ptr(void *p, const struct uslub_ptr *ptr, const char *op,
				  void *caller)
{
	if (likely(ptr->kind == PTR_SLAB)) {
		struct cache_cpu *cc = &uslub_tls_thread->cpu[ptr->d->cls];
		unsigned n = cc->sheaf_count;
		if (likely(cc->magic != 0) && likely(n < cc->sheaf_cap)) {
			mark_free(p);
			cc->sheaf[n] = p;
			uslub_own_store(cc->sheaf_count, (uint16_t)(n + 1));
			return;
		}
	}
	uslub_free_ptr_slow(p, ptr, op, caller);
}
/* free of p, whose block_of() is d, when the fast path did not take it. */
void uslub_free_slow(void *p, struct page_desc *d);

/* ---- aligned requests (api.c, and sized.c's check of them) --------------------------- */

/* glibc's memalign: an alignment that is not a power of two is rounded up to one. */
static inline size_t uslub_align_up(size_t alignment)
{
	size_t a = 1;
	while (a < alignment)
		a <<= 1;
	return a;
}

/* Power-of-two classes hold objects aligned to their size within page-aligned slabs, so
 * a small request aligned to a power of two up to a page takes the first class that is
 * a multiple of the alignment. */
static inline unsigned uslub_aligned_class(size_t size, size_t alignment)
{
	unsigned cls = uslub_size_to_class(size > alignment ? size : alignment);
	while (uslub_class_size[cls] % alignment)
		cls++;
	return cls;
}

/* ---- the fast paths -------------------------------------------------------------- */

/* v in a register of the compiler's choice that the compiler cannot see through; on
 * x86-64, in the register named (rdx "d", rcx "c", ...). */
#if defined(__x86_64__)
#define KEEP_IN(reg, v) __asm__("" : "+" reg(v))
#else
#define KEEP_IN(reg, v) __asm__("" : "+r"(v))
#endif

/* C++'s operator new and delete (preload/new_delete.c) take the same fast paths with a
 * `kind` (enum dbg_kind, a constant at each call): only their slow paths differ, where
 * every debug cache's operations go, and keep the kind under USLUB_DEBUG (sized.c). */
void *uslub_new_slow(size_t size, unsigned kind);
void uslub_delete_slow(void *p, unsigned kind);

/* malloc: the top of the thread's sheaf of the size's cache. An empty sheaf (also every
 * sheaf of a thread without state, and of a debug cache) sends malloc to the refill. */
static inline __attribute__((always_inline)) void *uslub_malloc_inline_as(size_t size,
									  unsigned kind)
{
	if (likely(size <= USLUB_MAX_FAST)) {
		struct cache_cpu *cc =
		    (struct cache_cpu *)((char *)uslub_tls_thread + uslub_cpu_of[(size + 15) >> 4]);
		/* As in free, below; and cc, n kept out of the result's register, where GCC 12
		 * put one and then copied the object over (one instruction more). */
		KEEP_IN("d", cc);
		size_t n;
		/* One decrement, for the index, the count and the test alike: its borrow is
		 * the empty sheaf (GCC 12 made a test and two decrements of it). */
		if (likely(!__builtin_sub_overflow((size_t)cc->sheaf_count, 1, &n))) {
			KEEP_IN("c", n); /* see cc */
			void *object = cc->sheaf[n];
			uslub_own_store(cc->sheaf_count, (uint16_t)n);
			mark_allocated(object);
			uslub_stat(cc, ALLOC_FASTPATH);
			return object;
		}
	}
	uslub_init();
	if (kind)
		return uslub_new_slow(size, kind);
	return uslub_slab_alloc_slow(size);
}

static inline void *uslub_malloc_inline(size_t size)
{
	return uslub_malloc_inline_as(size, 0);
}

/* free: onto the thread's sheaf of the object's cache, whichever slab it lies in and
 * whichever thread holds that slab - no atomic, no slab touched. The pointer must be an
 * object's start inside a slab: the test of p's own page (every page of a slab carries
 * one, so `head` is not followed; types.h) gives the slab's start and the class's
 * cache_cpu, and one 64x64-bit multiply by the class's magic there tells (Lemire's
 * test; types.h). A page that is no slab's has objects 0, which no offset is below;
 * a sheaf not open has magic 0, which no offset passes. Since p lies in the page, its
 * offset in the slab is below 2^32 and its quotient below 2^16. And p must not be free
 * already: every free object carries its mark, whichever list, sheaf or barn it is on
 * (slab.c, section 7). */
static inline __attribute__((always_inline)) void uslub_free_inline_as(void *p, unsigned kind)
{
	uintptr_t i = (uintptr_t)p >> REGION_SHIFT;
	if (likely(i < REGION_SLOTS)) {
		const struct page_test *e = page_test_in_table(i, p);
		struct cache_cpu *cc =
		    (struct cache_cpu *)((uintptr_t)uslub_tls_thread + e->cpu_off);
		uint32_t off = (uint32_t)(uintptr_t)p - e->start;
		uint64_t magic = cc->magic;
		unsigned __int128 m = (unsigned __int128)off * magic;
		if (likely((uint64_t)m < magic) && likely((uint16_t)(m >> 64) < objects_of(e))) {
			/* The key is read before the stores into p, which the compiler cannot
			 * tell apart from it. */
			uintptr_t mark = uslub_keys.mark ^ (uintptr_t)p;
			size_t n = cc->sheaf_count;
			if (unlikely(((uintptr_t *)p)[1] == mark))
				uslub_double_free(p, page_desc_of(p)->head);
			if (likely(n < cc->sheaf_cap)) {
				((uintptr_t *)p)[1] = mark;
				cc->sheaf[n] = p;
				/* n is dead after this line: the count is bumped in n's own
				 * register, not in a copy taken before the stores (GCC 12). */
				__asm__("" : "+r"(n));
				/* Counted as free_fastpath without a counter (stats.c). */
				uslub_own_store(cc->sheaf_count, (uint16_t)(n + 1));
				return;
			}
			/* The class from the cache_cpu's place: a whole sheaf moves without
			 * the slab's descriptor ever being read. */
			uslub_sheaf_overflow(p, cc);
			return;
		}
	}
	if (kind)
		uslub_delete_slow(p, kind);
	else
		uslub_free_slow(p, block_of(p));
}

static inline void uslub_free_inline(void *p)
{
	uslub_free_inline_as(p, 0);
}

/* The safe points' hook of RCU (rcu.c): hands what waits for a grace period to call_rcu. */
void uslub_rcu_flush(void);
#pragma GCC visibility pop

int uslub_mallopt(int param, int value);
struct mallinfo2 uslub_mallinfo2(void);

#endif
