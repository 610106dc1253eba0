/* What a cache still holds when the program destroys it: under U, the allocation sites of
 * its objects still allocated, as the kernel's "Objects remaining in %s on
 * __kmem_cache_shutdown()" lists each object with its allocation track. Here the objects
 * are counted by site (the first LEAK_SITES sites, the rest together), since a program's
 * leak is a few sites and many objects. The walk is the sweep's (sweep.c): each region of
 * each zone under the zone's lock, so no page it reads is unmapped meanwhile; the sites
 * are printed after the lock is dropped, reading /proc/self/maps. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/print.h"
#include "os/vg.h"
#include "page/page.h"
#include "slab/slab.h"

#define LEAK_SITES 8

struct leak_sites {
	uintptr_t addr[LEAK_SITES];
	unsigned long count[LEAK_SITES];
	unsigned nr;
	unsigned long other; /* objects of sites past the first LEAK_SITES */
};

static void note(struct leak_sites *ls, uintptr_t addr)
{
	for (unsigned i = 0; i < ls->nr; i++)
		if (ls->addr[i] == addr) {
			ls->count[i]++;
			return;
		}
	if (ls->nr < LEAK_SITES) {
		ls->addr[ls->nr] = addr;
		ls->count[ls->nr++] = 1;
		return;
	}
	ls->other++;
}

/* The objects carved in slab d of c whose state says allocated. */
static void slab_sites(const struct uslub_cache *c, struct page_desc *d, struct leak_sites *ls)
{
	unsigned objects = __atomic_load_n(&d->objects, __ATOMIC_RELAXED);
	char *first = (char *)page_address(d) + c->offset;
	for (unsigned i = 0; i < objects; i++) {
		char *o = first + (size_t)i * c->stride;
		struct dbg_meta *m = dbg_meta_of(c, o);
		mem_open(m, sizeof(*m));
		bool live = m->state == ((uintptr_t)o ^ DBG_STATE_ALLOC);
		uintptr_t addr = m->track[TRACK_ALLOC].addr;
		mem_close(m, sizeof(*m));
		if (live)
			note(ls, addr);
	}
}

static void region_sites(const struct uslub_cache *c, struct uslub_node *n, struct region *r,
			 struct leak_sites *ls)
{
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	size_t grown = __atomic_load_n(&r->grown, __ATOMIC_RELAXED);
	struct page_desc *first = (struct page_desc *)r;
	for (size_t i = FIRST_PAGE; i < grown;) {
		struct page_desc *d = first + i;
		size_t len = 1;
		if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_SLAB &&
		    __atomic_load_n(&d->head, __ATOMIC_RELAXED) == d) {
			unsigned order = __atomic_load_n(&d->order, __ATOMIC_RELAXED);
			if (order <= USLUB_MAX_ORDER && i + (1UL << order) <= grown) {
				if (__atomic_load_n(&d->cls, __ATOMIC_RELAXED) == c->cls)
					slab_sites(c, d, ls);
				len = 1UL << order;
			}
		}
		i += len;
	}
	pthread_mutex_unlock(&n->lock);
}

void uslub_debug_report_leaks(const struct uslub_cache *c)
{
	if (!(c->debug & DBG_TRACK))
		return;
	struct leak_sites ls = {.nr = 0};
	unsigned nr_nodes = uslub_nr_nodes < MAX_NODES ? uslub_nr_nodes : MAX_NODES;
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (z % MAX_NODES < nr_nodes)
			for (struct region *r =
				 __atomic_load_n(&uslub_nodes[z].regions, __ATOMIC_ACQUIRE);
			     r; r = r->next)
				region_sites(c, &uslub_nodes[z], r, &ls);
	struct uslub_out o;
	uslub_out_init(&o, 2);
	uslub_printf(&o, "uslub: objects remaining in %s on uslub_cache_destroy(), allocated at:\n",
		     c->name);
	for (unsigned i = 0; i < ls.nr; i++) {
		uslub_printf(&o, "  %lu x ", ls.count[i]);
		uslub_debug_print_addr(&o, ls.addr[i]);
		uslub_printf(&o, "\n");
	}
	if (ls.other)
		uslub_printf(&o, "  %lu more at other sites\n", ls.other);
	uslub_out_flush(&o);
}
