/* Sized frees under USLUB_DEBUG (sized.h): the size a free is given, against its block. */
#include "api/sized.h"

#include "os/print.h"

#include <errno.h>

#define DBG_LETTERS (DBG_CHECK | DBG_REDZONE | DBG_POISON | DBG_TRACK | DBG_TRACE)

static const char *const op_name[] = {
    [SIZED_DELETE] = "operator delete",
    [SIZED_DELETE_ARRAY] = "operator delete[]",
    [SIZED_FREE] = "free_sized",
    [SIZED_FREE_ALIGNED] = "free_aligned_sized",
};

/* The class an allocation of `size` bytes aligned to `align` takes, as api.c's
 * aligned_alloc_any takes it; USLUB_NR_CLASSES for a large block. */
static unsigned class_for(size_t size, size_t align)
{
	if (size == 0)
		size = 1;
	align = uslub_align_up(align); /* memalign's rounding */
	if (size > USLUB_MAX_SMALL || align > USLUB_PAGE_SIZE)
		return USLUB_NR_CLASSES;
	if (align <= 16)
		return uslub_size_to_class(size);
	return uslub_aligned_class(size, align);
}

static bool fits_slab(const struct uslub_cache *c, size_t size, size_t align,
		      enum uslub_sized_op op)
{
	if (class_for(size, align) == c->cls)
		return true;
	/* realloc keeps an object that shrinks to more than half of it (api.c), and C23
	 * lets free_sized be given the size realloc was. */
	return op == SIZED_FREE && size <= c->size && (size > c->size / 2 || c->size <= 16);
}

/* Pages a large or huge block of `size` bytes holds, without overflow near SIZE_MAX. */
static size_t pages_of(size_t size)
{
	if (size == 0)
		size = 1;
	return (size >> USLUB_PAGE_SHIFT) + ((size & (USLUB_PAGE_SIZE - 1)) != 0);
}

/* Out of line: its buffer would keep the check from ending in a tail call. */
static noinline __attribute__((noreturn)) void
report_size(void *p, size_t size, enum uslub_sized_op op, const struct uslub_cache *c,
	    struct page_desc *s, const char *kind, size_t bytes)
{
	struct uslub_out what;
	uslub_out_init(&what, -1);
	uslub_printf(&what, "size %zu does not match the block", size);
	what.buf[what.len] = '\0'; /* 50 bytes at most in a 2 KiB buffer */
	if (c)
		uslub_report_bad_free(what.buf, op_name[op], p, c, s);
	uslub_report_bad_block(what.buf, op_name[op], p, kind, bytes);
}

/* The debug cache of p, a slab object, when it keeps kinds; NULL otherwise. */
static struct uslub_cache *kind_cache(void *p, struct page_desc **s)
{
	struct page_desc *d = block_of(p);
	if (!d || d->kind != PAGE_SLAB)
		return NULL;
	struct uslub_cache *c = &uslub_caches[d->cls];
	*s = d;
	return (c->debug & DBG_LETTERS) ? c : NULL;
}

/* A large block that keeps its kind (the letters apply to every cache), or NULL. */
static struct page_desc *kind_block(void *p)
{
	struct page_desc *d = block_of(p);
	return d && d->kind == PAGE_LARGE && uslub_debug_every_cache ? d : NULL;
}

void uslub_new_mark(void *p, enum dbg_kind kind)
{
	struct page_desc *s;
	struct uslub_cache *c = kind_cache(p, &s);
	if (c)
		uslub_debug_set_kind(c, s, p, kind);
	else if ((s = kind_block(p)))
		s->dbg_kind = kind;
	else if (uslub_debug_every_cache && !block_of(p))
		uslub_huge_kind(p, (int)kind);
}

void uslub_delete_check(void *p, enum dbg_kind kind, const char *op)
{
	if (!p)
		return;
	struct page_desc *s;
	struct uslub_cache *c = kind_cache(p, &s);
	if (!c && !(s = kind_block(p))) {
		if (uslub_debug_every_cache && !block_of(p))
			uslub_debug_check_huge_kind(p, kind, op);
		return;
	}
	/* A pointer that is no block's start, or a freed one, is reported by the
	 * classification. */
	struct uslub_ptr ptr;
	uslub_classify(p, s, op, 0, &ptr);
	if (c)
		uslub_debug_check_kind(c, s, p, kind, op);
	else
		uslub_debug_check_block_kind(s, p, kind, op);
}

void *uslub_new_slow(size_t size, unsigned kind)
{
	void *p = uslub_slab_alloc_slow(size);
	if (unlikely(uslub_debug_any) && p)
		uslub_new_mark(p, kind);
	return p;
}

/* Reached by a tail call from the operator, and ends in free's by one: the return
 * address free's slow path records (USLUB_DEBUG=U) is still the program's call site. */
void uslub_delete_slow(void *p, unsigned kind)
{
	if (unlikely(uslub_debug_any))
		uslub_delete_check(p, kind,
				   kind == KIND_NEW ? "operator delete" : "operator delete[]");
	uslub_free_slow(p, block_of(p));
}

void uslub_free_sized_check(void *p, size_t size, size_t align, enum uslub_sized_op op)
{
	if (!p)
		return;
	void *caller = __builtin_return_address(0);
	/* A pointer that is not a live block's start is reported as free reports it without
	 * a size; a live one's size is checked, then it is freed as classified. */
	struct uslub_ptr ptr;
	uslub_classify(p, block_of(p), "free", 0, &ptr);
	struct page_desc *s = ptr.d;
	if (ptr.kind == PTR_SLAB) {
		struct uslub_cache *c = ptr.c;
		bool delete = op == SIZED_DELETE || op == SIZED_DELETE_ARRAY;
		if ((c->debug & DBG_LETTERS) && !uslub_debug_is_free(c, p)) {
			/* A delete is given the size new was asked for, exactly (an aligned
			 * new of 0 bytes asks for 1, as aligned_alloc does). */
			size_t req = uslub_debug_requested(c, p);
			if (delete ? size != req && !(size == 0 && req == 1 && align)
				   : !fits_slab(c, size, align, op))
				report_size(p, size, op, c, s, NULL, 0);
			if (delete)
				uslub_debug_check_kind(
				    c, s, p, op == SIZED_DELETE ? KIND_NEW : KIND_NEW_ARRAY,
				    op_name[op]);
		}
	} else if (ptr.kind == PTR_LARGE) {
		/* The request's pages: a guarded block has more of its own (large.c). */
		size_t req = uslub_large_request(s);
		if (uslub_debug_every_cache && pages_of(size) != pages_of(req))
			report_size(p, size, op, NULL, NULL, "large",
				    pages_of(req) << USLUB_PAGE_SHIFT);
		if (uslub_debug_every_cache && (op == SIZED_DELETE || op == SIZED_DELETE_ARRAY))
			uslub_debug_check_block_kind(
			    s, p, op == SIZED_DELETE ? KIND_NEW : KIND_NEW_ARRAY, op_name[op]);
	} else {
		/* The request under a checker, else the whole mapping (uslub_huge_usable):
		 * pages either way, checked by the free's one look-up. */
		size_t len;
		if (uslub_debug_every_cache && (op == SIZED_DELETE || op == SIZED_DELETE_ARRAY))
			uslub_debug_check_huge_kind(
			    p, op == SIZED_DELETE ? KIND_NEW : KIND_NEW_ARRAY, op_name[op]);
		int saved = errno;
		int freed = uslub_huge_free(p, uslub_debug_every_cache ? pages_of(size) : 0, &len);
		errno = saved;
		if (freed < 0)
			report_size(p, size, op, NULL, NULL, "huge", len);
		if (!freed)
			uslub_report_no_block("free", p);
		return;
	}
	uslub_free_ptr(p, &ptr, "free", caller);
}
