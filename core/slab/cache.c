/* The caches: one per size class, their orders and counts, the cache-node rows of their
 * partial lists, and the keys every free pointer and free mark depends on. Set up in two
 * steps at start-up (api/startup.c): the plain layout, then - once debug/ has given the
 * debug caches their slot layout - what follows from the layout. */
#include "os/os.h"
#include "slab/slab.h"

struct uslub_cache uslub_caches[USLUB_NR_CACHES];
struct cache_node uslub_cache_nodes[MAX_NODES][USLUB_NR_CACHES];
_Atomic unsigned uslub_nr_caches = USLUB_NR_CLASSES;
struct uslub_keys uslub_keys;
uint16_t uslub_cpu_of[USLUB_MAX_FAST / 16 + 1];

/* Objects a carving step adds (slab.c, section 9): mimalloc's 4 KiB of objects, at least
 * CARVE_MIN. By class, set at start-up. */
#define CARVE_BYTES 4096
#define CARVE_MIN   4
uint16_t uslub_carve_step[USLUB_NR_CACHES];

void uslub_caches_init(void)
{
	/* An object cache's slot gets its class when the cache is made (objcache.c): written
	 * here, the 56 slots were 24 KiB of .bss resident in every program. Code that walks
	 * every slot (the heap walker, uslub_lock_all) goes by index. */
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		c->cls = i;
		c->size = uslub_class_size[i];
		c->stride = c->size;
		c->offset = 0;
		uslub_class_name(i, c->name);
	}
}

/* What follows from a cache's layout: its magic, orders, counts and sheaf capacity. For
 * the kmalloc caches at start-up, and for an object cache when it is made (objcache.c),
 * before any slab of it exists. */
void uslub_cache_setup(struct uslub_cache *c)
{
	struct uslub_order_params p = {
	    .min_order = uslub_config.min_order,
	    .max_order = uslub_config.max_order,
	    .min_objects = uslub_config.min_objects,
	    .nr_cpus = uslub_os_ncpus(),
	};
	/* A debug cache's magic is 0: its objects never start at offset 0 of a slot,
	 * so the free fast path's test fails for every one of them. */
	uslub_lookup.magic[c->cls] = c->debug ? 0 : UINT64_MAX / c->size + 1;
	c->cpu_off = CPU_OFF(c->cls);
	unsigned bytes = c->debug ? c->stride + c->tail : c->size;
	c->order = uslub_calculate_order(bytes, &p);
	c->min_order = uslub_get_order(bytes);
	if (c->min_order > c->order)
		c->min_order = c->order;
	c->objects = uslub_cache_objects(c, c->order);
	c->min_objects = uslub_cache_objects(c, c->min_order);
	unsigned step = CARVE_BYTES / c->size;
	uslub_carve_step[c->cls] = (uint16_t)(step < CARVE_MIN ? CARVE_MIN : step);
	/* The kernel's set_cpu_partial, in objects, turned into slabs. */
	unsigned nr = c->size >= 4096 ? 6 : c->size >= 1024 ? 24 : c->size >= 256 ? 52 : 120;
	c->cpu_partial_slabs = (nr * 2 + c->objects - 1) / c->objects;
	/* The kernel's min_partial: ilog2(size) / 2, within 5..10. */
	unsigned lg = 31 - (unsigned)__builtin_clz(c->size);
	c->min_partial = lg / 2 < 5 ? 5 : lg / 2 > 10 ? 10 : lg / 2;
	/* Each sheaf object may pin a slab of its own, so the largest objects get fewer. A
	 * sheaf's count is a random walk when a program frees and allocates one class
	 * alike, so the barn is reached about every (cap / 2)^2 operations: with 8 for
	 * 1-4 KiB objects, two threads replacing blocks of up to 4 KiB met there at every
	 * few dozen and ran at 0.75x one thread; with 28, 1.6x, for 1 MiB more peak in
	 * prodcons and thread_local (tools/bench/results/medium-blocks.md). Above 4 KiB, 4
	 * reached the barn every few operations: one thread replacing blocks of up to 8 KiB
	 * ran at 0.83x tcmalloc, with 8 at 1.03x, peak memory within the runs' spread
	 * (tools/bench/results/sheaves-barns.md); on a Zen 5 VM 8 ran at 0.91x, where each
	 * barn trip's atomics weigh more, and 16 at 1.09x (two threads 1.00x), peaks as
	 * before (tools/bench/results/sheaf-16.md). */
	unsigned cap = c->size <= 256 ? SHEAF_MAX : c->size <= 4096 ? 28 : 16;
	c->sheaf_capacity = c->debug ? 0 : cap < uslub_config.sheaves ? cap : uslub_config.sheaves;
}

void uslub_caches_open(void)
{
	/* The keys never change once a slab exists: every free pointer and mark depends on
	 * them. The mark is odd, so no aligned address xor'ed with it is 0, the value a
	 * fresh allocation leaves in the word. */
	uslub_keys.secret = uslub_random();
	uslub_keys.mask = uslub_config.harden == USLUB_HARDEN_OFF ? 0 : UINTPTR_MAX;
	uslub_keys.mark = uslub_random() | 1;
	for (size_t i = 0; i < USLUB_MAX_SMALL / 16 + 1; i++)
		uslub_cpu_of[i] = (uint16_t)offsetof(struct uslub_thread, cpu[uslub_class_of[i]]);
	for (size_t i = USLUB_MAX_SMALL / 16 + 1; i < USLUB_MAX_FAST / 16 + 1; i++)
		uslub_cpu_of[i] = MCPU_OFF(medium_pages(i * 16));
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		uslub_cache_setup(&uslub_caches[i]);
	uslub_cache_nodes_init(0, uslub_nr_nodes);
}

void uslub_cache_nodes_init(unsigned from, unsigned to)
{
	for (unsigned n = from; n < to; n++)
		for (unsigned i = 0; i < USLUB_NR_CACHES; i++) {
			struct cache_node *cn = &uslub_cache_nodes[n][i];
			pthread_mutex_init(&cn->list_lock, NULL);
			CDS_INIT_LIST_HEAD(&cn->partial);
			cn->nr_partial = 0;
		}
}
