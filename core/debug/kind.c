/* C++'s allocation kinds in debug caches: operator new and new[] mark what they return,
 * the deletes check the mark (ASan's alloc-dealloc-mismatch), and free checks that it
 * frees what malloc gave (debug.c). The mark lives in the object's metadata, so a cache
 * without USLUB_DEBUG letters keeps none and checks none. A large block keeps its mark in
 * its descriptor (dbg_kind) when the letters apply to every cache, a huge block in its
 * entry of the huge table. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/vg.h"
#include "page/page.h"

/* As ASan words it: what allocated, then what deallocates (a free's are debug.c's). */
static const char *mismatch(uint64_t had, enum dbg_kind kind)
{
	static const char *const what[3][3] = {
	    [KIND_MALLOC][KIND_NEW] = "alloc-dealloc-mismatch (malloc vs operator delete)",
	    [KIND_MALLOC][KIND_NEW_ARRAY] = "alloc-dealloc-mismatch (malloc vs operator delete [])",
	    [KIND_NEW][KIND_NEW_ARRAY] =
		"alloc-dealloc-mismatch (operator new vs operator delete [])",
	    [KIND_NEW_ARRAY][KIND_NEW] =
		"alloc-dealloc-mismatch (operator new [] vs operator delete)",
	    [KIND_NEW][KIND_MALLOC] = "alloc-dealloc-mismatch (operator new vs free)",
	    [KIND_NEW_ARRAY][KIND_MALLOC] = "alloc-dealloc-mismatch (operator new [] vs free)",
	};
	return had < 3 ? what[had][kind] : NULL;
}

void uslub_debug_set_kind(struct uslub_cache *c, struct page_desc *s, void *object,
			  enum dbg_kind kind)
{
	(void)s;
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->kind, sizeof(m->kind));
	m->kind = kind;
	mem_close(&m->kind, sizeof(m->kind));
}

void uslub_debug_check_kind(struct uslub_cache *c, struct page_desc *s, void *object,
			    enum dbg_kind kind, const char *op)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(m, sizeof(*m));
	uint32_t had = m->kind;
	size_t req = m->orig_size;
	mem_close(m, sizeof(*m));
	/* A free object is left to the free, which reports it as a double free. */
	if (uslub_debug_is_free(c, object))
		return;
	if (had != kind) {
		uslub_debug_op = op;
		uslub_debug_caller = NULL;
		uslub_debug_report_object(
		    c, s, object,
		    mismatch(had, kind) ? mismatch(had, kind) : "Object metadata overwritten",
		    had < 3 ? NULL : (void *)&m->kind, req <= c->size ? req : REQ_UNKNOWN);
	}
	uslub_debug_set_kind(c, s, object, KIND_MALLOC);
}

size_t uslub_debug_requested(struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->orig_size, sizeof(m->orig_size));
	size_t size = m->orig_size;
	mem_close(&m->orig_size, sizeof(m->orig_size));
	return size;
}

void uslub_debug_check_block_kind(struct page_desc *d, void *p, enum dbg_kind kind, const char *op)
{
	const char *what = mismatch(d->dbg_kind, kind);
	if (what)
		uslub_report_bad_block(what, op, p, "large", uslub_large_request(d));
	d->dbg_kind = KIND_MALLOC; /* the free that follows passes */
}

void uslub_debug_check_huge_kind(void *p, enum dbg_kind kind, const char *op)
{
	int had = uslub_huge_kind(p, KIND_MALLOC);
	const char *what = had >= 0 ? mismatch((uint64_t)had, kind) : NULL;
	if (what)
		uslub_report_bad_block(what, op, p, "huge", uslub_huge_usable(p));
}
