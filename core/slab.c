/* uslub: caches and slabs, the SLUB design in user space.
 *
 * 1. Overview. Every request up to 8 KiB goes to one of 32 caches (kmalloc-16 ...
 *    kmalloc-8k). A cache carves slabs - runs of 2^order pages from the page allocator -
 *    into equal objects and threads a freelist through the free ones. Each thread holds,
 *    per cache, one current slab whose freelist it pops without locks or atomics
 *    (kmem_cache_cpu), and a short list of more slabs (the kernel's per-CPU partial
 *    list). Behind those, each cache has one partial list per NUMA node behind a lock
 *    (kmem_cache_node).
 *
 * 2. Start-up under LD_PRELOAD. The first malloc may come from the dynamic loader, from
 *    a constructor of a library loaded before us (libnuma's calls malloc 48 times), or
 *    from TLS set-up. uslub_init runs on the first call of any entry point, reads its
 *    settings from `environ` and needs nothing from libc that allocates. Threads start
 *    with their TLS pointer on a static empty thread whose freelists are all empty, so the
 *    fast path needs no "initialised?" test: the first allocation fails into the slow
 *    path, which builds the thread's state. Nothing is torn down at exit: libraries'
 *    destructors free after ours ran.
 *
 * 3. Thread slabs. A slab a thread holds is "frozen": its descriptor names the thread
 *    (owner). The owner allocates from the thread's freelist and frees onto the slab's
 *    local list, both plain stores. Other threads free with one compare-and-swap onto the
 *    slab's remote list, which lives in one 64-bit word with the slab's inuse count and
 *    frozen bit - SLUB's cmpxchg_double of freelist and counters, packed (the freelist
 *    as an offset in the slab):
 *
 *        bits  0..31  remote freelist head, offset from the slab start + 1 (0: empty)
 *        bits 32..55  inuse: objects not on the slab's freelist
 *        bit  63      frozen
 *
 *    When its freelist runs dry the owner takes the local list, then the remote list
 *    (one exchange), and only then looks elsewhere.
 *
 * 4. Slab states. THREAD (current slab), THREAD-PARTIAL (on a thread's partial list),
 *    both frozen; NODE-PARTIAL (unfrozen, some objects free, on the node's list); FULL
 *    (unfrozen, no free object, on no list). Moves:
 *      - current slab runs out and has no frees pending: unfrozen as FULL;
 *      - a free into a FULL slab freezes it for the freeing thread, which puts it on its
 *        partial list (SLUB's put_cpu_partial), so a thread that frees what others
 *        allocated reuses that memory without touching a lock;
 *      - a thread partial list longer than cpu_partial_slabs is unfrozen to the node;
 *      - get_partial freezes up to half of cpu_partial_slabs node slabs at once;
 *      - an unfrozen slab whose last object is freed goes back to the page allocator,
 *        unless the node keeps fewer than min_partial slabs, then it stays as a partial.
 *    A thread that exits unfreezes everything it holds and gives back its pages.
 *
 * 5. Lock order: orphan lock -> registry lock -> stat lock -> cache node list_lock ->
 *    page allocator node lock -> huge lock. In practice the list_lock is dropped before
 *    pages are freed, so list_lock and the page lock are never held together; fork
 *    takes them all in this order, after thread.c's sweep lock and liburcu's locks.
 *
 * 6. Sheaves (Linux 6.18's percpu sheaves, per thread here). A free of an object whose
 *    slab the thread does not hold goes, while there is room, into the thread's sheaf of
 *    that cache: a small array, no atomic, the slab untouched (the object still counts
 *    in its slab's inuse). malloc takes from the sheaf when the thread's freelist is
 *    empty, before any slab is looked at. Without it, a program whose threads free each
 *    other's objects moves a full slab to the freeing thread for almost every free (the
 *    free freezes it, the thread allocates one object from it and lets it go again).
 *    Two frees into one page in a row skip the sheaf and freeze the slab as SLUB does,
 *    and a slab frozen that way takes its objects back from the top of the sheaf
 *    (sheaf_return), so a thread freeing its own objects in order still gets SLUB's
 *    behaviour. malloc_trim and thread exit send the sheaf's objects to their slabs
 *    (uslub_sheaves_flush).
 *
 * 7. Bad frees and protected free pointers. A free object may sit on a thread freelist,
 *    a local list, a remote list or any thread's sheaf, and only the owner may walk the
 *    first two, so "is p already free?" cannot be answered by walking lists. Instead,
 *    every free object of a plain cache carries a mark in its second word - a secret
 *    drawn at start-up, xor'ed with the object's address - written when the object is
 *    freed (and when a new slab is threaded), cleared when it is handed out. Every free
 *    path checks it first, so a double free is caught whichever list or sheaf the first
 *    free put the object on, also after its thread exited and in a slab whose objects are
 *    all free. This is glibc's tcache key, made per object: with the address mixed in, a
 *    mark copied elsewhere (the program reading freed memory) is not a mark there, so a
 *    match needs no confirming walk, and the program cannot make one without the secret.
 *    Large blocks are caught by their state (cached, or their pages free), huge ones by a
 *    ring of the last 64 unmapped. A debug cache keeps the state in its metadata.
 *
 *    Free pointers are stored mixed with a second secret and the byte-swapped address
 *    they are stored at (the kernel's CONFIG_SLAB_FREELIST_HARDENED; glibc's
 *    safe-linking), so a use after free that writes a pointer steers nothing: the value
 *    decodes to an address outside the slab. The pop checks that each object it is about
 *    to read lies inside the thread's current slab (slabs are aligned to their size, so
 *    cache_cpu keeps the slab's address and log2 size in one word); walks of other lists
 *    check each link names an object of the slab and stop after `objects` steps, so a
 *    corrupted list is reported ("corrupted free list"), never followed forever.
 *    USLUB_HARDEN=off stores the pointers in the clear (for comparison); the marks and
 *    the checks stay. Two threads freeing one object at the same instant can both pass
 *    the mark check, as with glibc: the remote list's CAS then catches the case where
 *    it is still the list's head, and a slab's inuse never goes below zero. */
#include "internal.h"
#include "debug.h"
#include "options.h"
#include "os.h"
#include "node.h"
#include "print.h"
#include "replenish.h"
#include "slab.h"
#include "vg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct uslub_cache uslub_caches[USLUB_NR_CLASSES];
uint64_t uslub_class_magic[USLUB_NR_CLASSES];
struct uslub_keys uslub_keys;

/* Free pointers: at the object's start in a plain cache; in a debug cache in the slot's
 * metadata, where debug.c decodes and checks them. */
static inline void *get_next(const struct uslub_cache *c, void *object)
{
	if (unlikely(c->debug))
		return uslub_debug_get_next(c, object);
	return link_get(object);
}
static inline void set_next(const struct uslub_cache *c, void *object, void *next)
{
	if (unlikely(c->debug))
		uslub_debug_set_next(c, object, next);
	else
		link_set(object, next);
}

/* The next object on a free list of slab s, checked: a link that does not name an
 * object of s stops the program instead of being followed (walks of lists the fast
 * path does not pop: deactivation, the consistency walker). */
static inline void *get_next_checked(const struct uslub_cache *c, struct page_desc *s, void *object)
{
	void *next = get_next(c, object);
	if (unlikely(next) && unlikely(uslub_slab_object_start(s, next) != next))
		uslub_report_corrupt("free pointer outside its slab", c, page_address(s), object);
	return next;
}

/* A free object of a plain cache carries its mark; a debug cache keeps the state in
 * its metadata instead (debug.c). */
static inline void mark_free_plain(const struct uslub_cache *c, void *object)
{
	if (likely(!c->debug))
		mark_free(object);
}

static inline uintptr_t slab_bits(struct page_desc *s)
{
	return (uintptr_t)page_address(s) | (USLUB_PAGE_SHIFT + s->order);
}

void *uslub_slab_next_free(const struct uslub_cache *c, void *object)
{
	return get_next(c, object);
}

static inline unsigned slab_nid(struct page_desc *s)
{
	/* A slab may sit in a region of its node's large-block zone (borrowed pages). */
	return region_of(s)->nid;
}

/* A slab belongs to the node of its region, whichever thread frees into it. */
static inline struct cache_node *node_of_slab(struct uslub_cache *c, struct page_desc *s)
{
	return &c->node[slab_nid(s)];
}

/* Counters of threads without state of their own go straight to the cache, atomically:
 * those are rare and off the fast path. */
static void stat_shared(struct uslub_thread *t, unsigned cls, enum uslub_stat_item item)
{
#if USLUB_STATS_ENABLED
	if (likely(t->state == THREAD_LIVE || t->state == THREAD_ORPHAN))
		t->cpu[cls].stat[item]++;
	else
		__atomic_fetch_add(&uslub_caches[cls].stat[item], 1, __ATOMIC_RELAXED);
#else
	(void)t, (void)cls, (void)item;
#endif
}

void uslub_caches_init(void)
{
	struct uslub_order_params p = {
	    .min_order = uslub_config.min_order,
	    .max_order = uslub_config.max_order,
	    .min_objects = uslub_config.min_objects,
	    .nr_cpus = uslub_os_ncpus(),
	};
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		c->cls = i;
		c->size = uslub_class_size[i];
		c->stride = c->size;
		c->offset = 0;
		uslub_class_name(i, c->name);
	}
	/* Which caches debug, and their slot layout; it seeds uslub_debug_random. */
	uslub_debug_init();
	/* The keys never change once a slab exists: every free pointer and mark depends on
	 * them. The mark is odd, so no aligned address xor'ed with it is 0, the value a
	 * fresh allocation leaves in the word. */
	uslub_keys.secret = uslub_debug_random();
	uslub_keys.mask = uslub_config.harden == USLUB_HARDEN_OFF ? 0 : UINTPTR_MAX;
	uslub_keys.mark = uslub_debug_random() | 1;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		/* A debug cache's magic is 0: its objects never start at offset 0 of a slot,
		 * so the free fast path's test fails for every one of them. */
		uslub_class_magic[i] = c->debug ? 0 : UINT64_MAX / c->size + 1;
		unsigned bytes = c->debug ? c->stride + DBG_RZ : c->size;
		c->order = uslub_calculate_order(bytes, &p);
		c->min_order = uslub_get_order(bytes);
		if (c->min_order > c->order)
			c->min_order = c->order;
		c->objects = uslub_cache_objects(c, c->order);
		c->min_objects = uslub_cache_objects(c, c->min_order);
		/* The kernel's set_cpu_partial, in objects, turned into slabs. */
		unsigned nr = c->size >= 4096	? 6
			      : c->size >= 1024 ? 24
			      : c->size >= 256	? 52
						: 120;
		c->cpu_partial_slabs = (nr * 2 + c->objects - 1) / c->objects;
		/* The kernel's min_partial: ilog2(size) / 2, within 5..10. */
		unsigned lg = 31 - (unsigned)__builtin_clz(c->size);
		c->min_partial = lg / 2 < 5 ? 5 : lg / 2 > 10 ? 10 : lg / 2;
		/* Each sheaf object may pin a slab of its own, so large objects get fewer. */
		unsigned cap = c->size <= 256	 ? SHEAF_MAX
			       : c->size <= 1024 ? 16
			       : c->size <= 4096 ? 8
						 : 4;
		c->sheaf_capacity = c->debug			 ? 0
				    : cap < uslub_config.sheaves ? cap
								 : uslub_config.sheaves;
		for (unsigned n = 0; n < MAX_NODES; n++) {
			pthread_mutex_init(&c->node[n].list_lock, NULL);
			CDS_INIT_LIST_HEAD(&c->node[n].partial);
		}
	}
}

/* ---- slabs ------------------------------------------------------------------------ */

/* Thread the freelist through a new slab's objects; it starts frozen for the owner, who
 * holds every object. */
static unsigned gcd(unsigned a, unsigned b)
{
	while (b) {
		unsigned r = a % b;
		a = b;
		b = r;
	}
	return a;
}

/* CONFIG_SLAB_FREELIST_RANDOM, without a table: objects are threaded in the order
 * start, start + step, ... (mod objects), start and step (coprime with the count) drawn
 * at random per slab, so which object follows which is not known in advance. That is
 * weaker than the kernel's shuffled sequence (the order is an arithmetic progression),
 * but needs no memory, costs the new slab one compare per object and the fast path
 * nothing. Returns the list's head. */
static void *thread_freelist(struct uslub_cache *c, char *first, unsigned objects)
{
	size_t step = 1, start = 0;
	if (uslub_config.harden != USLUB_HARDEN_OFF && objects > 2) {
		uint64_t r = uslub_debug_random();
		start = (unsigned)(r % objects);
		step = 1 + (unsigned)((r >> 32) % (objects - 1));
		while (gcd((unsigned)step, objects) != 1)
			step = step + 1 == objects ? 1 : step + 1;
	}
	size_t span = (size_t)objects * c->stride, delta = step * c->stride;
	char *end = first + span, *head = first + start * c->stride, *p = head;
	if (unlikely(c->debug)) {
		for (unsigned i = 0; i + 1 < objects; i++) {
			char *q = p + delta >= end ? p + delta - span : p + delta;
			uslub_debug_set_next(c, p, q);
			p = q;
		}
		uslub_debug_set_next(c, p, NULL);
		return head;
	}
	/* Each object gets its free mark too: a free of an object the slab never handed
	 * out is a double free as well. */
	if (step == 1 && start == 0) {
		for (; p + delta < end; p += delta) {
			link_set(p, p + delta);
			mark_free(p);
		}
	} else {
		/* The walk ends at the object one step before the head. */
		char *last = first + (start + objects - step) % objects * c->stride;
		while (p != last) {
			char *q = p + delta >= end ? p + delta - span : p + delta;
			link_set(p, q);
			mark_free(p);
			p = q;
		}
	}
	link_set(p, NULL);
	mark_free(p);
	return head;
}

static void *init_slab(struct uslub_cache *c, struct page_desc *s, unsigned order,
		       struct uslub_thread *t)
{
	unsigned objects = uslub_cache_objects(c, order);
	char *base = page_address(s);
	for (size_t i = 1; i < (1UL << order); i++)
		s[i].head = s;
	s->order = (uint8_t)order;
	s->cls = (uint8_t)c->cls;
	s->objects = (uint16_t)objects;
	s->flags = 0;
	s->local_free = NULL;
	s->local_count = 0;
	s->next = NULL;
	atomic_store_explicit(&s->word, w_make(0, objects, W_FROZEN), memory_order_relaxed);
	/* The page allocator reads a neighbour's kind under its own lock when it merges
	 * buddies, so kind changes made outside that lock are atomic stores. */
	__atomic_store_n(&s->kind, PAGE_SLAB, __ATOMIC_RELAXED);
	__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
	__atomic_store_n(&s->head, s, __ATOMIC_RELEASE);

	char *first = base + c->offset;
	if (unlikely(c->debug))
		for (unsigned i = 0; i < objects; i++)
			uslub_debug_init_object(c, first + (size_t)i * c->stride);
	void *head = thread_freelist(c, first, objects);
	if (unlikely(c->debug))
		uslub_debug_slab_ready(c, s);

	atomic_fetch_add(&c->nr_slabs, 1);
	atomic_fetch_add(&c->nr_slabs_by_order[order], 1);
	atomic_fetch_add(&c->total_objects, objects);
	atomic_fetch_add(&uslub_slab_bytes, USLUB_PAGE_SIZE << order);
	return head;
}

/* allocate_slab: the preferred order only if it is at hand (no waiting for the lock, no
 * growing), otherwise the minimum order at once - the kernel's __GFP_NORETRY try of
 * s->oo before s->min. With USLUB_HIGH_ORDER=wait the caller blocks for the preferred
 * order instead, as the kernel did before that change. */
static struct page_desc *allocate_slab(struct uslub_cache *c, struct uslub_thread *t,
				       struct cache_cpu *cc, unsigned *order_out)
{
	struct page_desc *s = NULL;
	unsigned order = c->order;

	if (order > c->min_order) {
		s = uslub_pages_alloc(t->node, order, GFP_NOWAIT);
		if (!s) {
			if (uslub_config.high_order_wait) {
				/* The pre-fix kernel: wait for the lock, grow, and at the cap
				 * hand memory back to make room - all on the caller's time. */
				uslub_stat(cc, HIGH_ORDER_STALL);
				s = uslub_pages_alloc(t->node, order, GFP_RECLAIM);
			} else {
				uslub_replenish_kick();
			}
		}
		if (!s) {
			uslub_stat(cc, ORDER_FALLBACK);
			order = c->min_order;
		}
	}
	if (!s)
		s = order == 0 ? uslub_pcp_alloc(t, t->node) : uslub_pages_alloc(t->node, order, 0);
	*order_out = order;
	return s;
}

static void discard_slab(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	unsigned order = s->order;
	atomic_fetch_sub(&c->nr_slabs, 1);
	atomic_fetch_sub(&c->nr_slabs_by_order[order], 1);
	atomic_fetch_sub(&c->total_objects, s->objects);
	atomic_fetch_sub(&uslub_slab_bytes, USLUB_PAGE_SIZE << order);
	atomic_store_explicit(&s->word, 0, memory_order_relaxed);
	s->local_free = NULL;
	s->local_count = 0;
	__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);
	stat_shared(t, c->cls, USLUB_STAT_FREE_SLAB);
	if (unlikely(c->debug))
		uslub_debug_slab_discard(c, s);
	__atomic_store_n(&s->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	if (order == 0 && (t->state == THREAD_LIVE || t->state == THREAD_ORPHAN)) {
		uslub_pcp_free(t, s);
	} else {
		uslub_pages_free(s, order);
	}
}

static void add_partial(struct cache_node *n, struct page_desc *s, bool tail)
{
	if (tail)
		cds_list_add_tail(&s->list, &n->partial);
	else
		cds_list_add(&s->list, &n->partial);
	s->flags |= PF_ON_PARTIAL;
	/* Under list_lock, but get_partial_node peeks at it without: an atomic store. */
	__atomic_store_n(&n->nr_partial, n->nr_partial + 1, __ATOMIC_RELAXED);
}

static void remove_partial(struct cache_node *n, struct page_desc *s)
{
	cds_list_del(&s->list);
	s->flags &= (uint8_t)~PF_ON_PARTIAL;
	__atomic_store_n(&n->nr_partial, n->nr_partial - 1, __ATOMIC_RELAXED);
}

/* A free by the slab's owner: onto its local list, no atomic (the fast path inlines the
 * same for plain caches). */
static inline void push_local(const struct uslub_cache *c, struct page_desc *s, void *p)
{
	set_next(c, p, s->local_free);
	mark_free_plain(c, p);
	s->local_free = p;
	s->local_count++;
}

/* The owner's free objects of a frozen slab: its local list, else its remote list. */
static void *take_slab_freelist(struct page_desc *s)
{
	void *fl = s->local_free;
	if (fl) {
		s->local_free = NULL;
		s->local_count = 0;
		return fl;
	}
	uint64_t old = atomic_load_explicit(&s->word, memory_order_acquire);
	while (w_head(old)) {
		if (atomic_compare_exchange_weak_explicit(
			&s->word, &old, w_make(0, s->objects, W_FROZEN), memory_order_acquire,
			memory_order_relaxed))
			return decode(w_head(old), page_address(s));
	}
	return NULL;
}

/* deactivate_slab: the owner lets a frozen slab go. Its free objects (the thread's
 * freelist `fl`, if it is the current slab, and the local list) join the remote ones on
 * the slab's own list; the slab then goes to the node's partial list, back to the page
 * allocator when empty, or nowhere when full. */
static void deactivate_slab(struct uslub_cache *c, struct page_desc *s, void *fl,
			    struct uslub_thread *t)
{
	struct cache_cpu *cc = &t->cpu[c->cls];
	struct cache_node *n = node_of_slab(c, s);
	char *base = page_address(s);
	/* The owner's free objects: the thread freelist (only when a thread flushes) ahead
	 * of the local list, whose length the free fast path keeps, so a slab dropped
	 * from the thread partial list costs no walk over its objects. */
	void *mine = s->local_free;
	uint32_t nfree = s->local_count;
	if (fl) {
		void *p = fl, *q;
		nfree++;
		while ((q = get_next_checked(c, s, p))) {
			p = q;
			if (unlikely(++nfree > s->objects))
				uslub_report_corrupt("free list longer than its slab", c, base, fl);
		}
		set_next(c, p, mine);
		mine = fl;
	}
	s->local_free = NULL;
	s->local_count = 0;
	__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);

	bool locked = false;
	uint64_t old, new;
	uint32_t inuse;
	void *remote, *head;
	for (;;) {
		old = atomic_load_explicit(&s->word, memory_order_acquire);
		remote = decode(w_head(old), base);
		if (unlikely(nfree > w_inuse(old)))
			uslub_report_corrupt("more free objects than the slab holds", c, base,
					     mine);
		inuse = w_inuse(old) - nfree;
		if ((mine || remote) && !locked) {
			pthread_mutex_lock(&n->list_lock);
			locked = true;
			continue;
		}
		head = mine;
		if (remote) {
			/* Remote frees go in front: they push at the head, so the tail of
			 * this snapshot stays put while the walk runs. */
			void *tail = remote;
			void *next;
			unsigned steps = 0;
			while ((next = get_next_checked(c, s, tail)) && next != mine) {
				tail = next; /* a retry finds the link it made */
				if (unlikely(++steps > s->objects))
					uslub_report_corrupt(
					    "remote free list longer than its slab", c, base,
					    remote);
			}
			set_next(c, tail, mine);
			head = remote;
		}
		new = w_make(encode(head, base), inuse, 0);
		/* acq_rel: the remote frees this folds in happened before the owner lets
		 * go, and whoever takes the slab next sees our writes. */
		if (atomic_compare_exchange_strong_explicit(
			&s->word, &old, new, memory_order_acq_rel, memory_order_acquire))
			break;
	}
	if (!locked) {
		uslub_stat(cc, DEACTIVATE_FULL);
		return;
	}
	if (remote)
		uslub_stat(cc, DEACTIVATE_REMOTE_FREES);
	if (inuse == 0 && n->nr_partial >= c->min_partial) {
		pthread_mutex_unlock(&n->list_lock);
		uslub_stat(cc, DEACTIVATE_EMPTY);
		discard_slab(c, s, t);
		return;
	}
	add_partial(n, s, inuse == 0);
	if (inuse == 0)
		uslub_stat(cc, DEACTIVATE_TO_TAIL);
	else
		uslub_stat(cc, DEACTIVATE_TO_HEAD);
	pthread_mutex_unlock(&n->list_lock);
}

static void unfreeze_partials(struct uslub_cache *c, struct cache_cpu *cc, struct uslub_thread *t)
{
	struct page_desc *s;
	while ((s = cc->partial)) {
		cc->partial = s->next;
		s->next = NULL;
		cc->nr_partial--;
		deactivate_slab(c, s, NULL, t);
	}
}

static void put_cpu_partial(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	struct cache_cpu *cc = &t->cpu[c->cls];
	if (cc->nr_partial >= c->cpu_partial_slabs) {
		uslub_stat(cc, CPU_PARTIAL_DRAIN);
		unfreeze_partials(c, cc, t);
	}
	s->next = cc->partial;
	cc->partial = s;
	cc->nr_partial++;
}

/* get_partial_node: freeze the first slab of a node's partial list for the caller, and
 * up to half a thread partial list more. Returns the first, its objects in *fl, and the
 * count of free objects taken in *found. */
static struct page_desc *get_partial_node(struct uslub_cache *c, struct cache_node *n,
					  struct uslub_thread *t, struct cache_cpu *cc, void **fl,
					  uint64_t *found)
{
	struct page_desc *first = NULL, *s, *tmp;

	if (!__atomic_load_n(&n->nr_partial, __ATOMIC_RELAXED))
		return NULL;
	pthread_mutex_lock(&n->list_lock);
	cds_list_for_each_entry_safe(s, tmp, &n->partial, list)
	{
		remove_partial(n, s);
		uint64_t old = atomic_load_explicit(&s->word, memory_order_relaxed);
		while (!atomic_compare_exchange_weak_explicit(
		    &s->word, &old, w_make(0, s->objects, W_FROZEN), memory_order_acquire,
		    memory_order_relaxed))
			;
		__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
		void *objects = decode(w_head(old), page_address(s));
		*found += s->objects - w_inuse(old);
		if (!first) {
			first = s;
			*fl = objects;
			uslub_stat(cc, ALLOC_FROM_PARTIAL);
		} else {
			s->local_free = objects;
			s->local_count = (uint16_t)(s->objects - w_inuse(old));
			s->next = cc->partial;
			cc->partial = s;
			cc->nr_partial++;
			uslub_stat(cc, CPU_PARTIAL_NODE);
		}
		if (cc->nr_partial >= c->cpu_partial_slabs / 2)
			break;
	}
	pthread_mutex_unlock(&n->list_lock);
	return first;
}

/* get_any_partial: the other nodes, nearest first. The local node was searched just
 * before and is not searched again, each node is looked at once, and with one node there
 * is nothing to search: the kernel's fix, which USLUB_NUMA=...,noskip turns off (the
 * search then starts at the local node and runs on one node too) for comparison. */
static struct page_desc *get_any_partial(struct uslub_cache *c, struct uslub_thread *t,
					 struct cache_cpu *cc, void **fl)
{
	unsigned local = t->node, nr = uslub_nr_nodes;
	bool again = uslub_topo.search_local;
	if (nr == 1 && !again)
		return NULL;
	struct uslub_node *me = &uslub_nodes[local];
	__atomic_fetch_add(&me->any_partial_calls, 1, __ATOMIC_RELAXED);
	/* Nodes this search has looked at, to count a repeat: the one thing the kernel's
	 * fix is about, and what a wrong order table would show (tests/test_numa_emu.c). */
	unsigned seen = 1u << local;
	_Static_assert(MAX_NODES <= 32, "a node set fits in seen");
	for (unsigned k = again ? 0 : 1; k < nr; k++) {
		unsigned node = k == 0 ? local : uslub_topo.order[local][k - 1];
		__atomic_fetch_add(&me->any_partial_tried, 1, __ATOMIC_RELAXED);
		if (seen & (1u << node))
			__atomic_fetch_add(&me->any_partial_again, 1, __ATOMIC_RELAXED);
		seen |= 1u << node;
		uint64_t found = 0;
		struct page_desc *s = get_partial_node(c, &c->node[node], t, cc, fl, &found);
		if (s) {
			if (node != local) {
				__atomic_fetch_add(&me->remote_slabs, 1, __ATOMIC_RELAXED);
				__atomic_fetch_add(&me->remote_objects, found, __ATOMIC_RELAXED);
			}
			return s;
		}
	}
	return NULL;
}

static struct page_desc *get_partial(struct uslub_cache *c, struct uslub_thread *t,
				     struct cache_cpu *cc, void **fl)
{
	uint64_t found = 0;
	struct page_desc *s = get_partial_node(c, &c->node[t->node], t, cc, fl, &found);
	if (s) {
		__atomic_fetch_add(&uslub_nodes[t->node].local_partial_hits, 1, __ATOMIC_RELAXED);
		return s;
	}
	return get_any_partial(c, t, cc, fl);
}

/* ___slab_alloc: the thread's freelist for this cache is empty. */
static void *alloc_refill(struct uslub_thread *t, unsigned cls)
{
	struct cache_cpu *cc = &t->cpu[cls];
	struct uslub_cache *c = &uslub_caches[cls];
	struct page_desc *s;
	void *fl, *object = cc->freelist;

	if (object) {
		/* Filled meanwhile: the thread was just set up, or a recursion refilled. */
		cc->freelist = get_next_checked(c, cc->slab, object);
		mark_allocated(object);
		uslub_stat(cc, ALLOC_FASTPATH);
		return object;
	}
	s = cc->slab;
	if (unlikely(c->debug) && s && s->local_free) {
		/* A debug cache keeps its free objects on the slab's local list, never on
		 * the thread freelist, and takes them one at a time. */
		object = s->local_free;
		s->local_free = get_next(c, object);
		s->local_count--;
		uslub_stat(cc, ALLOC_SLOWPATH);
		return object;
	}
	if (s) {
		fl = take_slab_freelist(s);
		if (fl) {
			uslub_stat(cc, ALLOC_REFILL);
			goto load;
		}
		cc->slab = NULL;
		uslub_stat(cc, DEACTIVATE_BYPASS);
		deactivate_slab(c, s, NULL, t);
	}
	while ((s = cc->partial)) {
		cc->partial = s->next;
		s->next = NULL;
		cc->nr_partial--;
		fl = take_slab_freelist(s);
		if (fl) {
			cc->slab = s;
			uslub_stat(cc, CPU_PARTIAL_ALLOC);
			goto load;
		}
		deactivate_slab(c, s, NULL, t);
	}
	/* Needing a new slab is when a migration is looked for: sched_getcpu is a vDSO
	 * call, and once per slab costs nothing next to the slab. */
	if (uslub_nr_nodes > 1 && !uslub_topo.round_robin) {
		unsigned node = uslub_node_current();
		if (node != t->node) {
			uslub_stat(cc, ALLOC_NODE_MISMATCH);
			t->node = node;
		}
	}
	s = get_partial(c, t, cc, &fl);
	if (s) {
		cc->slab = s;
		goto load;
	}
	unsigned order;
	s = allocate_slab(c, t, cc, &order);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	uslub_stat(cc, ALLOC_SLAB);
	fl = init_slab(c, s, order, t);
	cc->slab = s;
	uslub_note_in_use();
load:
	uslub_stat(cc, ALLOC_SLOWPATH);
	if (unlikely(c->debug)) {
		/* The rest waits on the slab's local list (empty here: each way to `load`
		 * took or found it so), counted once per load, not once per object. */
		uint16_t n = 0;
		s->local_free = get_next(c, fl);
		for (void *p = s->local_free; p && n < s->objects; p = get_next(c, p))
			n++;
		s->local_count = n;
		return fl;
	}
	cc->slab_bits = slab_bits(s);
	cc->freelist = get_next_checked(c, s, fl);
	mark_allocated(fl);
	return fl;
}

static void *alloc_class(unsigned cls)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* A safe point: no cache state is half-changed here, so the nested allocations of
	 * pthread_create are harmless. */
	if (unlikely(atomic_load_explicit(&uslub_replenish_pending, memory_order_relaxed)))
		uslub_replenish_start();
	if (likely(t->state == THREAD_LIVE))
		return alloc_refill(t, cls);
	if (t->state == THREAD_EMPTY) {
		t = uslub_thread_create();
		if (t)
			return alloc_refill(t, cls);
	}
	/* No state of our own (exiting thread, or none could be made): share one. */
	pthread_mutex_lock(&uslub_orphan_lock);
	void *object = alloc_refill(&uslub_orphan_thread, cls);
	pthread_mutex_unlock(&uslub_orphan_lock);
	return object;
}

/* malloc and uslub_slab_alloc_slow reach here by tail calls, so the return address is
 * the program's call site: what USLUB_DEBUG=U records. */
void *uslub_slab_alloc_class(unsigned cls, size_t size)
{
	void *object = alloc_class(cls);
	struct uslub_cache *c = &uslub_caches[cls];
	if (unlikely(c->debug) && object)
		uslub_debug_alloc(c, page_desc_of(object)->head, object, size,
				  __builtin_return_address(0));
	return object;
}

/* ---- free ------------------------------------------------------------------------- */

void *uslub_slab_object_start(struct page_desc *s, const void *p)
{
	const struct uslub_cache *c = &uslub_caches[s->cls];
	uintptr_t off = (uintptr_t)p - (uintptr_t)page_address(s);
	if (off >= (uintptr_t)s->objects * c->stride)
		return NULL;
	uintptr_t in_slot = off % c->stride;
	/* In a debug cache, red zones and metadata are no object's inside. */
	if (in_slot < c->offset)
		return NULL;
	return (char *)p - (in_slot - c->offset);
}

/* A slab this thread just froze takes back its objects at the top of the thread's sheaf,
 * as plain local frees. A thread freeing its own objects in order sends the first of a
 * slab into the sheaf and the next one here (the free fast path keeps two objects of one
 * page out of the sheaf); without this, the slab would be short of that object when its
 * partial list drains it, and every later free into it would take the compare-and-swap
 * path. Only the top is looked at: that is where such objects are, and it costs no walk. */
static void sheaf_return(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	struct cache_cpu *cc = &t->cpu[c->cls];
	uintptr_t base = (uintptr_t)page_address(s), bytes = USLUB_PAGE_SIZE << s->order;
	unsigned n = cc->sheaf_count;
	while (n && (uintptr_t)cc->sheaf[n - 1] - base < bytes) {
		void *p = cc->sheaf[--n];
		push_local(c, s, p);
		uslub_stat(cc, SHEAF_FLUSH);
	}
	cc->sheaf_count = (uint16_t)n;
}

/* __slab_free: onto the remote list with one CAS. A free that makes an unfrozen slab
 * empty, or that finds it full while no thread can take it, needs the node's lock. */
static void slab_free_remote(struct uslub_cache *c, struct page_desc *s, void *p,
			     struct uslub_thread *t)
{
	struct cache_node *n = node_of_slab(c, s);
	char *base = page_address(s);
	bool live = t->state == THREAD_LIVE;
	bool locked = false, freeze = false;
	uint64_t old, new, frozen;
	uint32_t prior, inuse;

	for (;;) {
		old = atomic_load_explicit(&s->word, memory_order_relaxed);
		prior = w_head(old);
		/* The mark caught every double free before here; an empty slab or p at the
		 * list's head means one raced with another free of p. */
		if (unlikely(prior == encode(p, base)) || unlikely(!w_inuse(old)))
			uslub_report_bad_free("double free", "free", p, c);
		set_next(c, p, decode(prior, base));
		mark_free_plain(c, p);
		inuse = w_inuse(old) - 1;
		frozen = old & W_FROZEN;
		new = w_make(encode(p, base), inuse, frozen);
		freeze = false;
		if (!frozen) {
			if (!prior && live) {
				new |= W_FROZEN;
				freeze = true;
			} else if ((inuse == 0 || !prior) && !locked) {
				pthread_mutex_lock(&n->list_lock);
				locked = true;
				continue;
			}
		}
		/* acq_rel: release publishes p's link; acquire makes a thread that freezes
		 * the slab here see what its previous owner wrote into the descriptor
		 * (local list, partial link) before letting it go. On x86 it is the same
		 * instruction. */
		if (atomic_compare_exchange_weak_explicit(&s->word, &old, new, memory_order_acq_rel,
							  memory_order_relaxed))
			break;
		stat_shared(t, c->cls, USLUB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	stat_shared(t, c->cls, USLUB_STAT_FREE_SLOWPATH);
	if (frozen || freeze) {
		if (locked)
			pthread_mutex_unlock(&n->list_lock);
		if (frozen) {
			stat_shared(t, c->cls, USLUB_STAT_FREE_FROZEN);
			return;
		}
		__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
		uslub_stat(&t->cpu[c->cls], CPU_PARTIAL_FREE);
		put_cpu_partial(c, s, t);
		sheaf_return(c, s, t);
		return;
	}
	if (!locked)
		return; /* a partial slab stays partial: no list changes */
	if (inuse == 0 && n->nr_partial >= c->min_partial) {
		if (s->flags & PF_ON_PARTIAL) {
			remove_partial(n, s);
			stat_shared(t, c->cls, USLUB_STAT_FREE_REMOVE_PARTIAL);
		}
		pthread_mutex_unlock(&n->list_lock);
		discard_slab(c, s, t);
		return;
	}
	if (!(s->flags & PF_ON_PARTIAL)) {
		add_partial(n, s, true);
		stat_shared(t, c->cls, USLUB_STAT_FREE_ADD_PARTIAL);
	}
	pthread_mutex_unlock(&n->list_lock);
}

/* free reaches here by a tail call: the return address is the program's call site. */
void uslub_slab_free_slow(void *p)
{
	if (!p)
		return;
	int saved = errno;
	struct page_desc *s = region_of(p) ? page_desc_of(p)->head : NULL;
	if (!s) {
		if (!uslub_huge_free(p))
			uslub_report_no_block("free", p);
		errno = saved;
		return;
	}
	if (s->kind == PAGE_LARGE) {
		uslub_large_free(s, p);
		errno = saved;
		return;
	}
	if (s->kind != PAGE_SLAB)
		uslub_report_no_block("free", p);
	struct uslub_cache *c = &uslub_caches[s->cls];
	if (uslub_slab_object_start(s, p) != p)
		uslub_report_bad_free("invalid pointer", "free", p, c);
	if (unlikely(c->debug))
		uslub_debug_free(c, s, p, __builtin_return_address(0));
	else if (is_marked_free(p))
		uslub_report_bad_free("double free", "free", p, c);
	struct uslub_thread *t = uslub_tls_thread;
	if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
		push_local(c, s, p);
		uslub_stat(&t->cpu[s->cls], FREE_FASTPATH);
	} else {
		slab_free_remote(c, s, p, t);
	}
	errno = saved;
}

__attribute__((noreturn)) void uslub_report_bad_free(const char *what, const char *func,
						     const void *p, const struct uslub_cache *c)
{
	if (c)
		uslub_message("uslub: %s(): %s %p (cache %s, object size %u)\n", func, what, p,
			      c->name, c->size);
	else
		uslub_message("uslub: %s(): %s %p (not a block of this allocator)\n", func, what,
			      p);
	if (c && c->debug) {
		/* A debug cache can say more: the object p points into, with its sites. */
		struct page_desc *s = page_desc_of(p)->head;
		uintptr_t off = (uintptr_t)p - (uintptr_t)page_address(s);
		if (off < (uintptr_t)s->objects * c->stride) {
			char *object = (char *)page_address(s) + off - off % c->stride + c->offset;
			uslub_debug_report(c, s, object, what, p);
		}
	}
	abort();
}

__attribute__((noreturn)) void uslub_report_bad_block(const char *what, const char *func,
						      const void *p, const char *kind, size_t bytes)
{
	uslub_message("uslub: %s(): %s %p (%s block of %zu bytes)\n", func, what, p, kind, bytes);
	abort();
}

void uslub_report_no_block(const char *func, const void *p)
{
	struct region *r = region_of(p);
	if (r) {
		/* Pages of the region's body that are free held a block once; the region's
		 * descriptors never did. */
		size_t page = ((uintptr_t)p & REGION_MASK) >> USLUB_PAGE_SHIFT;
		if (page >= FIRST_PAGE && !((uintptr_t)p & 15)) {
			uslub_message("uslub: %s(): double free %p (its pages are free: the block "
				      "was freed before)\n",
				      func, p);
			abort();
		}
	} else if (uslub_huge_was_freed(p)) {
		uslub_message("uslub: %s(): double free %p (huge block, already unmapped)\n", func,
			      p);
		abort();
	}
	uslub_report_bad_free("invalid pointer", func, p, NULL);
}

void uslub_double_free(void *p, struct page_desc *s)
{
	uslub_report_bad_free("double free", "free", p, &uslub_caches[s->cls]);
}

void uslub_freelist_corrupt(struct cache_cpu *cc, void *object)
{
	struct page_desc *s = cc->slab;
	uslub_report_corrupt("free pointer outside its slab", &uslub_caches[s->cls],
			     page_address(s), object);
}

__attribute__((noreturn)) void uslub_report_corrupt(const char *what, const struct uslub_cache *c,
						    const void *slab, const void *p)
{
	uslub_message("uslub: corrupted free list in cache %s (slab %p): %s, at %p; "
		      "an object was written after it was freed\n",
		      c->name, slab, what, p);
	abort();
}

/* ---- consistency ---------------------------------------------------------------- */

/* Objects on a free list of s, or -1 (with *why) when a link is not a free object of s
 * or the list is longer than the slab. */
static long free_list_length(struct uslub_cache *c, struct page_desc *s, void *head,
			     const char **why)
{
	long n = 0;
	for (void *p = head; p; p = get_next(c, p)) {
		if (uslub_slab_object_start(s, p) != p) {
			*why = "Freelist pointer outside the slab";
			return -1;
		}
		if (c->debug && !uslub_debug_is_free(c, p)) {
			*why = "Freelist holds an allocated object";
			return -1;
		}
		if (++n > s->objects) {
			*why = "Freelist cycle";
			return -1;
		}
	}
	return n;
}

bool uslub_slab_is_valid(struct page_desc *s, const char **why)
{
	if (s->kind != PAGE_SLAB || s->head != s || s->cls >= USLUB_NR_CLASSES) {
		*why = "Slab descriptor corrupted";
		return false;
	}
	struct uslub_cache *c = &uslub_caches[s->cls];
	if (s->objects != uslub_cache_objects(c, s->order)) {
		*why = "Slab object count wrong";
		return false;
	}
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
	if (w_inuse(w) > s->objects) {
		*why = "Slab inuse above its objects";
		return false;
	}
	/* Only the owner may walk the lists: anyone else's walk races with the owner
	 * taking and handing out their objects. */
	if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) != uslub_tls_thread)
		return true;
	long remote = free_list_length(c, s, decode(w_head(w), page_address(s)), why);
	if (remote < 0)
		return false;
	long local = free_list_length(c, s, s->local_free, why);
	if (local < 0)
		return false;
	if (local != s->local_count) {
		*why = "Local freelist count wrong";
		return false;
	}
	/* The word counts the remote list's objects as free, the local list's as held. */
	if (remote != (long)(s->objects - w_inuse(w))) {
		*why = "Slab inuse does not match its remote freelist";
		return false;
	}
	if (local > (long)w_inuse(w)) {
		*why = "Local freelist longer than the slab's inuse";
		return false;
	}
	return true;
}

/* ---- sheaves and thread teardown ------------------------------------------------ */

/* The thread's freelist of this cache is empty: the last object put in its sheaf, else
 * the slow path. */
void *uslub_sheaf_alloc(struct cache_cpu *cc, size_t size)
{
	unsigned n = cc->sheaf_count;
	if (likely(n)) {
		void *object = cc->sheaf[n - 1];
		cc->sheaf_count = (uint16_t)(n - 1);
		mark_allocated(object);
		uslub_stat(cc, ALLOC_FASTPATH);
		uslub_stat(cc, ALLOC_SHEAF);
		return object;
	}
	return uslub_slab_alloc_slow(size);
}

/* p is an object's start in slab s (the fast path checked), which this thread does not
 * hold, or p is its local list's head. Into the sheaf if there is room and p is not in the
 * page of the object put there last (two frees into one page in a row go the SLUB way,
 * freezing the slab: see sheaf_return), else the slow path. */
void uslub_sheaf_free(void *p, struct page_desc *s)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* A large block's descriptor may carry an old class: kind decides. */
	if (likely(__atomic_load_n(&s->kind, __ATOMIC_RELAXED) == PAGE_SLAB) &&
	    likely(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) != t)) {
		struct cache_cpu *cc = &t->cpu[s->cls];
		unsigned n = cc->sheaf_count;
		if (unlikely(is_marked_free(p)))
			uslub_double_free(p, s);
		if (likely(n < cc->sheaf_cap) &&
		    likely(!n || ((uintptr_t)cc->sheaf[n - 1] ^ (uintptr_t)p) >= USLUB_PAGE_SIZE)) {
			mark_free(p);
			cc->sheaf[n] = p;
			cc->sheaf_count = (uint16_t)(n + 1);
			uslub_stat(cc, FREE_FASTPATH);
			uslub_stat(cc, FREE_SHEAF);
			return;
		}
	}
	uslub_slab_free_slow(p);
}

/* The objects were counted as freed when they went into the sheaf, so sending them on
 * counts nothing again. */
void uslub_sheaves_flush(struct uslub_thread *t, bool final)
{
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		struct uslub_cache *c = &uslub_caches[i];
		if (final)
			cc->sheaf_cap = 0;
		while (cc->sheaf_count) {
			void *p = cc->sheaf[--cc->sheaf_count];
			struct page_desc *s = page_desc_of(p)->head;
			uslub_stat(cc, SHEAF_FLUSH);
			if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
				push_local(c, s, p);
			} else {
				slab_free_remote(c, s, p, t);
				uslub_stat_add(cc, FREE_SLOWPATH, (uint64_t)-1);
			}
		}
	}
}

void uslub_thread_flush(struct uslub_thread *t)
{
	uslub_sheaves_flush(t, true);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		struct uslub_cache *c = &uslub_caches[i];
		if (cc->slab) {
			struct page_desc *s = cc->slab;
			void *fl = cc->freelist;
			cc->slab = NULL;
			cc->freelist = NULL;
			uslub_stat(cc, CPUSLAB_FLUSH);
			deactivate_slab(c, s, fl, t);
		}
		unfreeze_partials(c, cc, t);
	}
	uslub_pcp_drain(t, 0);
}
