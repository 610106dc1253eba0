/* The barn (slab.c, section 6): per node and cache, the full sheaves that threads trade,
 * its decay, and the bulk free (kmem_cache_free_bulk) that sends sheaves and barns back
 * to their slabs. */
#include "thread/thread.h"
#include "os/os.h"
#include "slab/slab.h"

#include <string.h>

struct barn *uslub_barns[NR_BARNS];

/* ---- the barn --------------------------------------------------------------------- */

/* What cache c's barn holds at most: BARN_BYTES of objects, within BARN_MIN_SHEAVES
 * sheaves and BARN_MAX objects, in whole sheaves. 0 without sheaves. */
static uint32_t barn_limit(const struct uslub_cache *c)
{
	uint32_t cap = c->sheaf_capacity;
	if (!cap)
		return 0;
	uint64_t n = BARN_BYTES / c->size;
	if (n > BARN_MAX)
		n = BARN_MAX;
	n -= n % cap;
	return n < BARN_MIN_SHEAVES * cap ? BARN_MIN_SHEAVES * cap : (uint32_t)n;
}

/* A slot's barns, made at its first barn_put (sheaf.c): every cache's barn, and the
 * kmalloc caches' slots, in one block of pages (under 512 KiB, touched as used), never
 * freed. An object cache's slots come at its own first barn_put (uslub_barn_grow): its
 * size is not known before. Made under cache 0's list_lock of the node, which fork and
 * the heap walker hold before they take the barn locks, so a barn never appears while
 * they look. */
static void *meta_pages(unsigned node, size_t bytes)
{
	unsigned order = 0;
	while ((USLUB_PAGE_SIZE << order) < bytes)
		order++;
	struct page_desc *d = uslub_pages_alloc(node, order, 0);
	if (!d)
		return NULL;
	for (size_t i = 1; i < (1UL << order); i++)
		d[i].head = d;
	d->order = (uint8_t)order;
	d->cls = CLS_NONE;
	__atomic_store_n(&d->kind, PAGE_META, __ATOMIC_RELAXED);
	__atomic_store_n(&d->head, d, __ATOMIC_RELEASE);
	return page_address(d);
}

struct barn *uslub_barns_make(unsigned slot)
{
	unsigned node = slot / BARN_SHARDS;
	struct barn *b;
	size_t bytes = sizeof(struct barn) * USLUB_NR_CACHES;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		bytes += barn_limit(&uslub_caches[i]) * sizeof(void *);
	pthread_mutex_t *guard = &cache_node_of(&uslub_caches[0], node)->list_lock;
	uslub_lock(guard, USLUB_LOCK_LIST);
	b = uslub_barns[slot];
	if (!b) {
		b = meta_pages(node, bytes);
		if (b) {
			void **slots = (void **)(b + USLUB_NR_CACHES);
			for (unsigned i = 0; i < USLUB_NR_CACHES; i++) {
				atomic_store_explicit(&b[i].lock, 0, memory_order_relaxed);
				b[i].count = 0;
				b[i].low = 0;
				b[i].limit = 0;
				b[i].objects = NULL;
				if (i < USLUB_NR_CLASSES) {
					b[i].limit = barn_limit(&uslub_caches[i]);
					b[i].objects = slots;
					slots += b[i].limit;
				}
			}
			__atomic_store_n(&uslub_barns[slot], b, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(guard);
	return b;
}

/* An object cache's barn of a node gets its slots, once, under the cache's list_lock of
 * the node (fork and the heap walker hold it before the barn locks); the limit is
 * published last, under the barn's lock, so whoever sees room sees the slots. */
bool uslub_barn_grow(struct uslub_cache *c, unsigned slot, struct barn *b)
{
	unsigned node = slot / BARN_SHARDS;
	pthread_mutex_t *guard = &cache_node_of(c, node)->list_lock;
	uslub_lock(guard, USLUB_LOCK_LIST);
	if (!__atomic_load_n(&b->limit, __ATOMIC_RELAXED)) {
		uint32_t limit = barn_limit(c);
		void **slots = limit ? meta_pages(node, limit * sizeof(void *)) : NULL;
		if (slots) {
			uslub_barn_lock(b);
			b->objects = slots;
			__atomic_store_n(&b->limit, limit, __ATOMIC_RELAXED);
			uslub_barn_unlock(b);
		}
	}
	pthread_mutex_unlock(guard);
	return __atomic_load_n(&b->limit, __ATOMIC_RELAXED) != 0;
}

/* ---- flushing to the slabs -------------------------------------------------------- */

/* n free objects of cache c (marked free, counted in their slabs' inuse) back to their
 * slabs, as kmem_cache_free_bulk does: from the top of the array down, each object
 * gathers the objects of its slab that lie below it into one detached list, looking past
 * at most one object of another slab in a row (build_detached_freelist looks past three:
 * a sheaf filled in allocation order holds runs of one slab, which need none, and a
 * random one gains nothing from a longer search; tools/bench/results/). The list is
 * pushed onto the slab's local list if t holds the slab, else onto its remote list with
 * one compare-and-swap. The array is consumed. */
void uslub_flush_objects(struct uslub_cache *c, struct uslub_thread *t, void **objects, unsigned n)
{
	/* The objects' descriptors are cold (free read only the dense page tests): ask for
	 * them all first, so their misses overlap instead of coming one per slab. */
	for (unsigned i = n; i--;)
		__builtin_prefetch(page_desc_of(objects[i]), 1);
	for (unsigned i = n; i--;) {
		void *head = objects[i];
		if (!head)
			continue;
		struct page_desc *s = block_of(head);
		uintptr_t base = (uintptr_t)page_address(s);
		uintptr_t bytes = USLUB_PAGE_SIZE << s->order;
		void *tail = head;
		unsigned count = 1, misses = 0;
		for (unsigned j = i; j-- && misses <= 1;) {
			void *p = objects[j];
			if (!p)
				continue;
			if ((uintptr_t)p - base < bytes) {
				set_next(c, tail, p);
				tail = p;
				objects[j] = NULL;
				count++;
			} else {
				misses++;
			}
		}
		if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
			set_next(c, tail, s->local_free);
			s->local_free = head;
			s->local_count = (uint16_t)(s->local_count + count);
		} else {
			uslub_slab_free_chain(c, s, head, tail, count, t);
		}
	}
}

/* The bottom of a barn is what was put there longest ago; the top is what threads take.
 * `low` objects were not taken for a whole period: they go, a sheaf's worth at a time from
 * the bottom, the rest moved down, so no barn stays locked over the slab work. They are
 * sent as by a thread without state, which freezes no slab for itself. */
static void barn_decay(struct uslub_cache *c, struct barn *b)
{
	void *batch[SHEAF_MAX];
	uslub_barn_lock(b);
	uint32_t old = b->low < b->count ? b->low : b->count;
	b->low = b->count - old;
	uslub_barn_unlock(b);
	while (old) {
		uslub_barn_lock(b);
		unsigned n = old < SHEAF_MAX ? old : SHEAF_MAX;
		if (n > b->count)
			n = b->count;
		memcpy(batch, b->objects, n * sizeof(void *));
		memmove(b->objects, b->objects + n, (b->count - n) * sizeof(void *));
		__atomic_store_n(&b->count, b->count - n, __ATOMIC_RELAXED);
		b->low = b->low > n ? b->low - n : 0;
		uslub_barn_unlock(b);
		if (!n)
			break;
		uslub_flush_objects(c, &uslub_empty_thread, batch, n);
		__atomic_fetch_add(&c->stat[USLUB_STAT_BARN_FLUSH], n, __ATOMIC_RELAXED);
		old -= n;
	}
	uslub_barn_lock(b);
	b->low = b->count;
	uslub_barn_unlock(b);
}

/* Every object of barn b back: the decay's work with every object counted as unused. */
static void barn_flush(struct uslub_cache *c, struct barn *b)
{
	if (!__atomic_load_n(&b->count, __ATOMIC_RELAXED))
		return;
	uslub_barn_lock(b);
	b->low = b->count;
	uslub_barn_unlock(b);
	barn_decay(c, b);
}

/* malloc_trim: everything the barns hold goes back to the slabs, so empty slabs can go
 * back to the page allocator - the decay's work with every object counted as unused. */
void uslub_barns_flush(void)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++)
			barn_flush(&uslub_caches[i], &b[i]);
	}
}

/* An object cache's shrink: its barns' objects back to their slabs. */
void uslub_barns_flush_cache(struct uslub_cache *c)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
		if (b)
			barn_flush(c, &b[c->cls]);
	}
}

void uslub_barns_decay(void)
{
	static _Atomic uint64_t last;
	uint64_t now = uslub_os_now_ms(), then = atomic_load_explicit(&last, memory_order_relaxed);
	if (now - then < BARN_DECAY_MS || !atomic_compare_exchange_strong(&last, &then, now))
		return;
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++)
			if (__atomic_load_n(&b[i].count, __ATOMIC_RELAXED))
				barn_decay(&uslub_caches[i], &b[i]);
	}
}

bool uslub_barns_held(void)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++)
			if (__atomic_load_n(&b[i].count, __ATOMIC_RELAXED))
				return true;
	}
	return false;
}

void uslub_barns_lock_all(void)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = uslub_barns[slot];
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++)
			uslub_barn_lock(&b[i]);
	}
}

void uslub_barns_unlock_all(void)
{
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = uslub_barns[slot];
		for (unsigned i = 0; b && i < USLUB_NR_CACHES; i++)
			uslub_barn_unlock(&b[i]);
	}
}
