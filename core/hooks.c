/* The hooks' no-op defaults (hooks.h): a layer calls an entry whether or not an
 * observer installed one. */
#include "hooks.h"

static void no_set_next(const struct uslub_cache *c, void *object, void *next)
{
	(void)c, (void)object, (void)next;
}

static void *no_get_next(const struct uslub_cache *c, void *object)
{
	(void)c, (void)object;
	return NULL;
}

static void no_object(const struct uslub_cache *c, void *object)
{
	(void)c, (void)object;
}

static void no_slab(const struct uslub_cache *c, struct page_desc *s)
{
	(void)c, (void)s;
}

static void no_alloc(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
		     void *caller)
{
	(void)c, (void)s, (void)object, (void)size, (void)caller;
}

static bool no_free(struct uslub_cache *c, struct page_desc *s, void *object, void *caller)
{
	(void)c, (void)s, (void)object, (void)caller;
	return false;
}

static void no_report(const struct uslub_cache *c, struct page_desc *s, void *object,
		      const char *what, const void *p)
{
	(void)c, (void)s, (void)object, (void)what, (void)p;
}

static void no_block_alloc(void *p, size_t size, size_t span, size_t lead, bool zeroed)
{
	(void)p, (void)size, (void)span, (void)lead, (void)zeroed;
}

static void no_block_check(void *p, size_t size, size_t span, size_t lead, const char *op)
{
	(void)p, (void)size, (void)span, (void)lead, (void)op;
}

static bool no_block_free(void *p, size_t size, size_t span, size_t lead, struct page_desc *d)
{
	(void)p, (void)size, (void)span, (void)lead, (void)d;
	return false;
}

static void no_block_resize(void *p, void *q, size_t old, size_t old_span, size_t size, size_t span,
			    size_t lead)
{
	(void)p, (void)q, (void)old, (void)old_span, (void)size, (void)span, (void)lead;
}

static void no_event(void)
{
}

static void no_note(uint64_t warm_bytes)
{
	(void)warm_bytes;
}

static void no_nodes(unsigned from, unsigned to)
{
	(void)from, (void)to;
}

static bool no_shrink(void)
{
	return false;
}

_Atomic int uslub_hooks_pending;
_Atomic int uslub_rcu_pending;
unsigned uslub_block_debug;
unsigned uslub_block_pad;
int uslub_memcheck; /* os/vg.h */

struct uslub_hooks uslub_hooks = {
    .set_next = no_set_next,
    .get_next = no_get_next,
    .init_object = no_object,
    .slab_ready = no_slab,
    .slab_discard = no_slab,
    .object_alloc = no_alloc,
    .object_free = no_free,
    .object_report = no_report,
    .block_alloc = no_block_alloc,
    .block_check = no_block_check,
    .block_free = no_block_free,
    .block_resize = no_block_resize,
    .background_start = no_event,
    .background_kick = no_event,
    .background_note = no_note,
    .nodes_online = no_nodes,
    .shrink = no_shrink,
    .release_held = no_event,
    .rcu_flush = no_event,
};
