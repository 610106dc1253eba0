/* What a thread holds goes back: its sheaves, slabs and page cache when it exits, all but
 * the sheaves when it idles (thread.c). */
#include "thread/thread.h"
#include "slab/slab.h"

void uslub_thread_flush(struct uslub_thread *t)
{
	uslub_sheaves_flush(t, true);
	uslub_thread_flush_slabs(t);
}

void uslub_thread_flush_cache_slabs(struct uslub_thread *t, unsigned i)
{
	struct cache_cpu *cc = &t->cpu[i];
	struct uslub_cache *c = &uslub_caches[i];
	if (cc->slab) {
		struct page_desc *s = cc->slab;
		void *fl = cc->freelist;
		cc->slab = NULL;
		cc->freelist = NULL;
		uslub_stat(cc, CPUSLAB_FLUSH);
		uslub_deactivate_slab(c, s, fl, t);
	}
	uslub_unfreeze_partials(c, cc, t);
}

void uslub_thread_flush_slabs(struct uslub_thread *t)
{
	for (unsigned i = 0, n = uslub_caches_in_use(); i < n; i++)
		uslub_thread_flush_cache_slabs(t, i);
	uslub_pcp_drain(t, 0);
}
