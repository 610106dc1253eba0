/* B: the bounds of memcpy, memmove and memset. libuslub_bounds.so (preload/bounds.c),
 * preloaded after libuslub.so, puts its own memcpy, memmove and memset in front of libc's
 * and asks here, through uslub_check_write (api/inspect.c), before each write: a write
 * into a block of a cache with B must stay inside the object's request, and the object
 * must be live (snmalloc checks its memcpy the same way). Red zones find such a write
 * later, at free or by the sweep, and only within their width; here it is found at the
 * call, at any distance inside the block's slab or pages, with the program's call site.
 *
 * The bounds library is a separate object so that a program that does not ask pays
 * nothing: libc's memcpy stays the one every call reaches. Once it is loaded, uslub's own
 * calls (realloc's copy, calloc's clearing, the poison) reach its memcpy too; they are
 * told by their return address, inside this object's code, and let through. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/print.h"
#include "slab/slab.h"

#include <elf.h>
#include <link.h>

bool uslub_debug_bounds;

/* This object's own code (the ELF header the linker places at its start, and its
 * executable segment): writes made from there are uslub's. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
static _Atomic uintptr_t own_lo, own_hi;

static void find_own_code(void)
{
	const ElfW(Ehdr) *e = (const void *)__ehdr_start;
	const ElfW(Phdr) *ph = (const void *)(__ehdr_start + e->e_phoff);
	uintptr_t bias = 0;
	bool first = true;
	for (unsigned i = 0; i < e->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (first) /* the header is the first segment's first bytes */
			bias = (uintptr_t)e - (ph[i].p_vaddr - ph[i].p_offset);
		first = false;
		if (ph[i].p_flags & PF_X) {
			/* lo first: a thread that sees hi sees lo (the same values from any). */
			atomic_store_explicit(&own_lo, bias + ph[i].p_vaddr, memory_order_relaxed);
			atomic_store_explicit(&own_hi, bias + ph[i].p_vaddr + ph[i].p_memsz,
					      memory_order_release);
		}
	}
}

static __attribute__((noreturn)) void report(const struct uslub_cache *c, struct page_desc *s,
					     void *object, size_t req, size_t span,
					     const unsigned char *fault, bool freed, size_t n,
					     const char *op, const void *caller)
{
	struct uslub_out what;
	uslub_out_init(&what, -1);
	if (freed)
		uslub_printf(&what, "%s(): %zu-byte write into a freed %s", op, n,
			     c ? "object" : "block");
	else
		uslub_printf(&what, "%s(): %zu-byte write out of bounds", op, n);
	what.buf[what.len] = '\0'; /* 80 bytes at most in a 2 KiB buffer */
	uslub_debug_op = op;
	uslub_debug_caller = (void *)caller;
	if (c)
		uslub_debug_report_object(c, s, object, what.buf, fault, req);
	uslub_debug_report_block(object, req, span, what.buf, fault);
}

/* The first byte of [dst, dst + n) outside [start, start + req), or NULL. */
static const unsigned char *outside(const char *dst, size_t n, const char *start, size_t req)
{
	if (dst < start)
		return (const unsigned char *)dst;
	if (n > req || (size_t)(dst - start) > req - n)
		return (const unsigned char *)(dst > start + req ? dst : start + req);
	return NULL;
}

static void check_slab(struct page_desc *s, const char *dst, size_t n, const char *op,
		       const void *caller)
{
	struct uslub_cache *c = &uslub_caches[s->cls];
	if (!(c->debug & DBG_BOUNDS))
		return;
	char *base = page_address(s);
	unsigned objects = uslub_slab_capacity(c, s);
	if (!objects)
		return;
	size_t k = (size_t)(dst - base) / c->stride;
	size_t in_slot = (size_t)(dst - base) % c->stride;
	/* A slot begins with the previous object's right red zone (debug.h): a write there,
	 * or past the last slot, overflows that object; the rest, up to the object, is the
	 * next one's metadata and left red zone. */
	if (k >= objects || (k > 0 && in_slot < DBG_RZ))
		k = k >= objects ? objects - 1 : k - 1;
	char *object = base + k * c->stride + c->offset;
	if (uslub_debug_is_free(c, object)) {
		report(c, s, object, REQ_UNKNOWN, 0, (const unsigned char *)dst, true, n, op,
		       caller);
	}
	size_t req = uslub_debug_requested(c, object);
	if (req > c->size)
		req = c->size;
	const unsigned char *bad = outside(dst, n, object, req);
	if (bad)
		report(c, s, object, req, 0, bad, false, n, op, caller);
}

static void check_large(struct page_desc *d, const char *dst, size_t n, const char *op,
			const void *caller)
{
	char *start = uslub_large_start(d);
	size_t req = uslub_large_request(d), span = uslub_large_span(d);
	if ((d->flags & (PF_CACHED | PF_HELD)) || medium_in_sheaf(d, start))
		report(NULL, d, start, req, span, (const unsigned char *)dst, true, n, op, caller);
	const unsigned char *bad = outside(dst, n, start, req);
	if (bad)
		report(NULL, d, start, req, span, bad, false, n, op, caller);
}

void uslub_debug_check_write(const void *dst, size_t n, const char *op, const void *caller)
{
	if (!n || !region_of(dst))
		return;
	uintptr_t hi = atomic_load_explicit(&own_hi, memory_order_acquire);
	if (!hi) {
		find_own_code(); /* the same answer for every thread that races here */
		hi = atomic_load_explicit(&own_hi, memory_order_acquire);
	}
	uintptr_t lo = atomic_load_explicit(&own_lo, memory_order_relaxed);
	if ((uintptr_t)caller >= lo && (uintptr_t)caller < hi)
		return;
	struct page_desc *d = block_of(dst);
	if (!d)
		return; /* free pages, or the region's own metadata */
	unsigned kind = __atomic_load_n(&d->kind, __ATOMIC_RELAXED);
	if (kind == PAGE_SLAB)
		check_slab(d, dst, n, op, caller);
	else if (kind == PAGE_LARGE && uslub_debug_every_cache)
		check_large(d, dst, n, op, caller);
}
