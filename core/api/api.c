/* The malloc family with glibc's semantics, over the engine. */
#include "api/api.h"

#include "debug/debug.h"
#include "os/os.h"
#include "os/print.h"
#include "uslub.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

void *uslub_calloc(size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total) || total > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (total <= USLUB_MAX_SMALL) {
		void *p = uslub_malloc_inline(total);
		if (p)
			memset(p, 0, total);
		return p;
	}
	uslub_init();
	return uslub_thread_large_alloc(total, 0, true);
}

/* realloc's move: a new block, the bytes both hold, the old block freed. NULL, the old
 * block intact, when no new block can be had. */
static void *realloc_move(void *p, const struct uslub_ptr *ptr, size_t size, void *caller)
{
	void *q = uslub_malloc_inline(size);
	if (q) {
		memcpy(q, p, size < ptr->usable ? size : ptr->usable);
		uslub_free_ptr(p, ptr, "realloc", caller);
	}
	return q;
}

void *uslub_realloc(void *p, size_t size)
{
	if (!p)
		return uslub_malloc_inline(size);
	void *caller = __builtin_return_address(0);
	struct page_desc *d = block_of(p);
	struct uslub_ptr ptr;
	/* A huge block's size is left to the huge operation below, which looks it up. */
	uslub_classify(p, d, "realloc", d ? CLASSIFY_USABLE : 0, &ptr);
	if (size == 0) {
		uslub_free_ptr(p, &ptr, "realloc", caller);
		return NULL;
	}
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	void *q;
	switch (ptr.kind) {
	case PTR_SLAB: {
		/* Same class, or a shrink that keeps at least half: stay. */
		struct uslub_cache *c = ptr.c;
		if (size <= c->size && (size > c->size / 2 || c->size <= 16)) {
			if (unlikely(c->debug))
				uslub_debug_resize(c, ptr.d, p, size, "realloc");
			return p;
		}
		break;
	}
	case PTR_LARGE:
		if (size > USLUB_MAX_SMALL && size <= HUGE_THRESHOLD) {
			/* A shrink to less than half moves, as a slab object's does (and as
			 * tcmalloc's and mimalloc's do): left in place, the small block holds
			 * the middle of the free memory its old pages leave, and later big
			 * blocks that no longer fit there grow the heap (realloc_mix with
			 * buffers to 16 MiB: docs/design.md, "Large blocks"). With no block at
			 * hand, the shrink is made in place: it does not fail for want of memory.
			 */
			if (size < ptr.usable / 2) {
				int saved = errno;
				q = realloc_move(p, &ptr, size, caller);
				if (q)
					return q;
				errno = saved;
			}
			q = uslub_large_realloc(ptr.d, p, size);
			if (q)
				return q;
		}
		break;
	case PTR_HUGE: {
		bool found;
		if (size > HUGE_THRESHOLD) {
			q = uslub_huge_realloc(p, size, &found);
		} else {
			/* Smaller than a huge block: the new block first, then the old one's
			 * bytes copied over as it leaves the huge table. */
			q = uslub_malloc_inline(size);
			if (!q)
				return NULL;
			found = uslub_huge_move_out(p, q, size);
			if (!found)
				uslub_free_inline(q);
		}
		if (!found)
			uslub_report_no_block("realloc", p);
		return q;
	}
	}
	return realloc_move(p, &ptr, size, caller);
}

void *uslub_reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return uslub_realloc(p, total);
}

static void *aligned_alloc_any(size_t alignment, size_t size)
{
	if (size == 0)
		size = 1;
	if (alignment <= 16)
		return uslub_malloc_inline(size);
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (alignment <= USLUB_PAGE_SIZE && size <= USLUB_MAX_SMALL) {
		unsigned cls = uslub_aligned_class(size, alignment);
		void *p = uslub_malloc_inline(uslub_class_size[cls]);
		/* A debug cache keeps the request, not the class taken for the alignment. */
		struct uslub_cache *c = &uslub_caches[cls];
		if (p && unlikely(c->debug) && size < c->size)
			uslub_debug_resize(c, page_desc_of(p)->head, p, size, "aligned_alloc");
		return p;
	}
	uslub_init();
	return uslub_thread_large_alloc(size, alignment, false);
}

int uslub_posix_memalign(void **out, size_t alignment, size_t size)
{
	if (alignment < sizeof(void *) || (alignment & (alignment - 1)))
		return EINVAL;
	int saved = errno;
	void *p = aligned_alloc_any(alignment, size);
	errno = saved;
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* glibc's memalign: an alignment that is not a power of two is rounded up to one. */
void *uslub_memalign(size_t alignment, size_t size)
{
	if (alignment > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	return aligned_alloc_any(uslub_align_up(alignment), size);
}

void *uslub_pvalloc(size_t size)
{
	size_t rounded;
	if (__builtin_add_overflow(size, USLUB_PAGE_SIZE - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	rounded &= ~(USLUB_PAGE_SIZE - 1);
	return aligned_alloc_any(USLUB_PAGE_SIZE, rounded ? rounded : USLUB_PAGE_SIZE);
}

size_t uslub_malloc_usable_size(const void *p)
{
	if (!p)
		return 0;
	struct uslub_ptr ptr;
	uslub_classify(p, block_of(p), "malloc_usable_size", CLASSIFY_USABLE, &ptr);
	return ptr.usable;
}

/* Gives back the calling thread's cached pages and every warm free page but `pad`
 * bytes' worth; like glibc's, other threads' caches are not touched - but the states of
 * threads that are gone without a teardown are (thread.c, reaping). */
int uslub_malloc_trim(size_t pad)
{
	uslub_init();
	/* USLUB_DEBUG: every debug object checked, and the quarantine emptied (its objects'
	 * poison checked as they leave), so what it held can go back too. */
	uslub_debug_sweep("malloc_trim", 0);
	uslub_quarantine_drain();
	uslub_threads_reap(0);
	struct uslub_thread *t = uslub_tls_thread;
	bool in = uslub_slow_enter(t);
	if (in)
		uslub_sheaves_flush(t, false);
	uslub_barns_flush();
	if (in) {
		uslub_pcp_drain(t, 0);
		uslub_large_cache_drain(t);
	}
	uslub_slow_exit(t, in);
	uslub_medium_depots_flush();
	size_t released = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (zone_in_use(z))
			released +=
			    uslub_pages_release(z, z < MAX_NODES ? pad >> USLUB_PAGE_SHIFT : 0);
	released += uslub_huge_cache_release(true);
	return released > 0;
}

/* M_TRIM_THRESHOLD sets how much warm free memory stays before it is handed back. The
 * other glibc parameters tune arenas, mmap thresholds and fastbins, which uslub does not
 * have: they are accepted and have no effect. */
int uslub_mallopt(int param, int value)
{
	switch (param) {
	case M_TRIM_THRESHOLD:
		if (value < 0)
			return 0;
		uslub_trim_threshold = (uint64_t)value;
		return 1;
	case M_MXFAST:
	case M_TOP_PAD:
	case M_MMAP_THRESHOLD:
	case M_MMAP_MAX:
	case M_CHECK_ACTION:
	case M_PERTURB:
	case M_ARENA_TEST:
	case M_ARENA_MAX:
		return 1;
	default:
		return 0;
	}
}

struct mallinfo2 uslub_mallinfo2(void)
{
	struct uslub_totals t;
	uslub_get_totals(&t);
	struct mallinfo2 mi;
	memset(&mi, 0, sizeof(mi));
	/* glibc's meanings: arena = memory from the OS other than the mmapped blocks,
	 * uordblks / fordblks = the part of it in use / free, hblkhd = mmapped blocks (huge
	 * ones here; hblks, their number, is not kept), keepcost = what malloc_trim can
	 * release, usmblks = the historical high-water mark (glibc now leaves it 0). Free
	 * space counts free pages and the free objects of slabs. */
	uint64_t small = t.in_use - t.huge - t.large;
	mi.arena = t.mapped - t.huge;
	mi.hblkhd = t.huge;
	mi.uordblks = t.in_use - t.huge;
	mi.fordblks = t.free_pages + (t.slabs > small ? t.slabs - small : 0);
	mi.keepcost = t.warm_free;
	mi.usmblks = t.peak_mapped;
	for (unsigned z = 0; z < NR_ZONES; z++)
		for (unsigned o = 0; o <= USLUB_MAX_ORDER && zone_in_use(z); o++)
			mi.ordblks += __atomic_load_n(&uslub_nodes[z].nr_free[o], __ATOMIC_RELAXED);
	return mi;
}

/* ---- the prefixed API ------------------------------------------------------------ */

/* The prefixed API (uslub.h) for programs that link uslub: the functions above under
 * their own names, and the two fast paths out of line. preload/ exports the standard
 * names over the same functions. */
void *uslub_malloc(size_t size)
{
	return uslub_malloc_inline(size);
}

void uslub_free(void *p)
{
	uslub_free_inline(p);
}

void *uslub_aligned_alloc(size_t alignment, size_t size) __attribute__((alias("uslub_memalign")));

void *uslub_valloc(size_t size)
{
	return uslub_memalign(USLUB_PAGE_SIZE, size);
}
