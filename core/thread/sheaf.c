/* The sheaf's slow paths (slab.c, section 6): per thread and cache, the array of free
 * objects that malloc pops and free pushes. Everything here is off the fast path: a sheaf
 * that ran empty or full, refilled from the barn (barn.c) or the thread's slabs, emptied
 * into the barn or back to its slabs. */
#include "thread/thread.h"
#include "hooks.h"
#include "slab/slab.h"

#include <string.h>

/* ---- the barn, seen from the sheaf ---------------------------------------------- */

/* The barns of the thread's node, its own first (thread.h, BARN_SHARDS). */
static unsigned barn_slot(const struct uslub_thread *t)
{
	return t->node * BARN_SHARDS + t->barn_shard;
}

/* barn_put: the n objects of a full sheaf into the thread's own barn, all or none. */
static bool barn_put(struct uslub_cache *c, struct uslub_thread *t, void **objects, unsigned n)
{
	unsigned slot = barn_slot(t);
	struct barn *b = __atomic_load_n(&uslub_barns[slot], __ATOMIC_ACQUIRE);
	if (unlikely(!b))
		b = uslub_barns_make(slot);
	bool done = false;
	if (b) {
		b += c->cls;
		/* An object cache's barn has its slots from its first put on. */
		if (unlikely(!__atomic_load_n(&b->limit, __ATOMIC_RELAXED)) &&
		    !uslub_barn_grow(c, slot, b))
			b = NULL;
		if (b && __atomic_load_n(&b->count, __ATOMIC_RELAXED) + n <=
			     __atomic_load_n(&b->limit, __ATOMIC_RELAXED)) {
			uslub_barn_lock(b);
			if (b->count + n <= b->limit) {
				/* Out, as the sheaf's moves (medium_sheaf.c, msheaf_spill). */
				USLUB_OUT_VOID(
				    memcpy(&b->objects[b->count], objects, n * sizeof(void *)));
				__atomic_store_n(&b->count, b->count + n, __ATOMIC_RELAXED);
				uslub_own_store(b->puts, b->puts + 1);
				done = true;
			}
			uslub_barn_unlock(b);
		}
	}
	if (!done)
		__atomic_fetch_add(&c->stat[USLUB_STAT_BARN_PUT_FAIL], 1, __ATOMIC_RELAXED);
	return done;
}

/* Up to `want` objects from cache cls's barn of `barns` (a slot's, or NULL) into dst;
 * how many. */
static inline unsigned barn_take(struct barn *barns, unsigned cls, void **dst, unsigned want)
{
	if (!barns || !__atomic_load_n(&barns[cls].count, __ATOMIC_RELAXED))
		return 0;
	struct barn *b = &barns[cls];
	uslub_barn_lock(b);
	unsigned n = b->count < want ? b->count : want;
	memcpy(dst, &b->objects[b->count - n], n * sizeof(void *));
	__atomic_store_n(&b->count, b->count - n, __ATOMIC_RELAXED);
	if (b->count < b->low)
		b->low = b->count;
	if (n)
		uslub_own_store(b->gets, b->gets + 1);
	uslub_barn_unlock(b);
	return n;
}

/* ... from the node's other barns. Waited for: a producer's own barn is always empty,
 * and with a trylock it went to its slabs whenever its consumer was putting, 1,679 times
 * in prodcons1, while the consumer's barn overflowed into slabs of its own (peak 7.5 MiB
 * against 4.9; tools/bench/results/sheaves-barns.md). */
static noinline unsigned barn_get_other(struct uslub_cache *c, struct uslub_thread *t, void **dst,
					unsigned want)
{
	unsigned base = t->node * BARN_SHARDS, n = 0;
	for (unsigned k = 1; k < BARN_SHARDS && !n; k++)
		n = barn_take(
		    __atomic_load_n(&uslub_barns[base + (t->barn_shard + k) % BARN_SHARDS],
				    __ATOMIC_ACQUIRE),
		    c->cls, dst, want);
	return n;
}

/* barn_get: up to `want` objects from the thread's own barn; how many. The others wait
 * until the thread's own slabs have nothing left either (uslub_sheaf_refill). */
static unsigned barn_get(struct uslub_cache *c, struct uslub_thread *t, void **dst, unsigned want)
{
	return barn_take(__atomic_load_n(&uslub_barns[barn_slot(t)], __ATOMIC_ACQUIRE), c->cls, dst,
			 want);
}

/* The sheaves' slow paths run every few operations for the largest objects, too often
 * for a clock read each time: the barns' clock is looked at once every BARN_TICKS of a
 * thread's slow paths, counted in the thread. The time-stamp counter this used before
 * cost 11 ns a read on this VM (a coarse clock read 3.7), a third of the slow paths'
 * time at 4-8 KiB (tools/bench/results/sheaves-barns.md). */
#define BARN_TICKS 64

static inline void barns_decay_soon(struct uslub_thread *t)
{
	if (unlikely(++t->barn_ticks >= BARN_TICKS)) {
		t->barn_ticks = 0;
		uslub_barns_decay();
	}
}

/* How many objects a sheaf's slow path moves, in or out. A program whose allocations and
 * frees of a cache alternate - a working set replaced at random - walks its sheaf up and
 * down at random; moving half a sheaf leaves it in the middle, and such a walk takes
 * about (cap/2)^2 operations to reach either end again, against about cap from the end a
 * whole-sheaf move leaves it at. A program that allocates or frees a run of them - a
 * batch, a producer, a consumer - meets the same end twice in a row, and then moves
 * whole sheaves (tools/bench/results/). */
enum { SHEAF_REFILLED = 1, SHEAF_SPILLED = 2 };

/* A slow path at one end of the sheaf: whether the last one was at the same end. Past
 * the other end last time, a sheaf that opened short grows (thread.h, uslub_sheaf_start). */
static bool sheaf_turn(struct cache_cpu *cc, const struct uslub_cache *c, unsigned what)
{
	bool again = cc->last_move == what;
	if (!again && cc->last_move && cc->sheaf_cap < c->sheaf_capacity) {
		unsigned cap = cc->sheaf_cap + SHEAF_GROW;
		cc->sheaf_cap = (uint16_t)(cap < c->sheaf_capacity ? cap : c->sheaf_capacity);
	}
	cc->last_move = (uint8_t)what;
	return again;
}

/* A thread's first objects of a cache come from slabs the node shares before it takes a
 * slab of its own: a thread that allocates a dozen small blocks of different sizes then
 * costs a dozen objects, not a slab per cache (the kernel's per-CPU slab has no such
 * cost: a CPU is never idle for long with one; a thread may be). The first
 * EARLY_OBJECTS (thread.h) come one at a time with the sheaf closed, so that they cost
 * no page of the thread's cpu[] either (uslub_alloc_early); the sheaf then opens, and
 * its first refill takes SHARED_REFILL more the same way: seven in all, as the refills
 * of 1, 2 and 4 took before there were early objects. */
#define SHARED_REFILLS 1
#define SHARED_REFILL  4
/* A cache line (x86-64, most arm64 cores): objects below it share lines (uslub_sheaf_overflow). */
#define LINE_BYTES 64

/* Up to `want` free objects off the remote list of s, an unfrozen slab on the node's
 * partial list, under the node's list_lock: only list_lock holders take from such a list
 * (frees only push onto it), so the walk's snapshot stays valid until the compare-and-swap
 * that detaches it, which a concurrent push makes retry. A take that would leave the list
 * empty while the slab has untouched objects first carves a step of them onto it (slab.c,
 * section 9). Returns how many, in dst. */
static unsigned take_shared(struct uslub_cache *c, struct cache_node *n, struct page_desc *s,
			    void **dst, unsigned want)
{
	char *base = page_address(s);
	uint64_t old = atomic_load_explicit(&s->word, memory_order_acquire);
	for (;;) {
		void *p = decode(w_head(old), base);
		unsigned k = 0;
		while (p && k < want) {
			dst[k++] = p;
			p = get_next_checked(c, s, p);
		}
		if (!p && s->objects < uslub_slab_capacity(c, s)) {
			/* Pushed like a chain of frees: carved and listed, so inuse stays. */
			void *tail;
			unsigned count;
			void *head = uslub_slab_carve(c, s, &tail, &count);
			do
				set_next(c, tail, decode(w_head(old), base));
			while (!atomic_compare_exchange_weak_explicit(
			    &s->word, &old,
			    w_make(encode(head, base), w_inuse(old), old & W_FROZEN),
			    memory_order_acq_rel, memory_order_acquire));
			old = atomic_load_explicit(&s->word, memory_order_acquire);
			continue;
		}
		if (!k)
			break;
		/* A take that empties the list makes the slab full: off the list first. The
		 * next free sees the empty list and freezes the slab onto its thread's
		 * partial list without list_lock, through the link that shares the list's
		 * room, so the slab must not be on the node's list by then. */
		if (!p)
			remove_partial(n, s);
		uint64_t new = w_make(encode(p, base), w_inuse(old) + k, 0);
		/* acq_rel: the release orders the list's unlinking before the word that lets
		 * a free freeze the slab and write the link (the same instruction on x86). */
		if (atomic_compare_exchange_weak_explicit(&s->word, &old, new, memory_order_acq_rel,
							  memory_order_acquire))
			return k;
		if (!p)
			add_partial(n, s, false); /* back where it was: the list's first */
	}
	remove_partial(n, s); /* nothing free on it: not a partial slab */
	return 0;
}

/* A refill for a thread that holds no slab of the cache: from the first slab of the
 * node's partial list, or a new slab that goes onto that list with what the thread does
 * not take. With several nodes, other nodes' partial slabs come before a new slab, as the
 * ordinary refill searches them (get_any_partial). NULL when there is no memory. */
static void *refill_shared(struct uslub_thread *t, struct uslub_cache *c, struct cache_cpu *cc,
			   unsigned want)
{
	struct cache_node *n = cache_node_of(c, t->node);
	unsigned k = 0;
	if (__atomic_load_n(&n->nr_partial, __ATOMIC_RELAXED)) {
		uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
		if (n->nr_partial) {
			struct page_desc *s =
			    cds_list_first_entry(&n->partial, struct page_desc, list);
			k = take_shared(c, n, s, cc->sheaf, want);
		}
		pthread_mutex_unlock(&n->list_lock);
		if (k)
			uslub_stat(cc, ALLOC_FROM_PARTIAL);
	}
	if (!k && uslub_nr_nodes > 1)
		return uslub_alloc_refill(t, c->cls); /* other nodes first: get_any_partial */
	if (!k) {
		void *fl;
		struct page_desc *s = uslub_new_slab(c, t, cc, &fl);
		if (!s)
			return NULL;
		while (fl && k < want) {
			cc->sheaf[k++] = fl;
			fl = get_next_checked(c, s, fl);
		}
		/* The rest is the node's, as the local list of a slab let go at once. */
		s->local_free = fl;
		s->local_count = (uint16_t)(s->objects - k);
		uslub_deactivate_slab(c, s, NULL, t);
	}
	void *object = cc->sheaf[k - 1];
	sheaf_set_count(cc, k - 1);
	mark_allocated(object);
	uslub_stat(cc, ALLOC_SLOWPATH);
	return object;
}

/* One object off the first slab of the node's partial list, for a thread whose sheaf of
 * cls is closed, or off a new slab that then goes onto that list: nothing of cpu[cls] is
 * read or written, and the counters go to the cache. A parked thread that holds a dozen
 * small blocks then has written only its state's own fields, one page
 * (tools/bench/results/parked-threads.md). The object's free, by the thread itself,
 * opens the sheaf (uslub_sheaf_overflow). With several nodes, the sheaf's refill
 * searches the others before a new slab is made (get_any_partial): NULL then.
 *
 * Objects of a line or more come from the thread's barn first when it holds any: what
 * other threads freed is used before the slabs give more. A barn only a consumer fills -
 * a parent freeing what its short-lived children left - was otherwise emptied only by
 * the children's refills, and children served by early objects alone never refill
 * (thread_churn: 1,045 objects of 2.5 KiB in one barn, 12.4 MiB at peak against 5.2, once
 * sheaves opened short; tools/bench/results/sheaf-start.md). Under a line, a barn's
 * object may share its line with another thread's (uslub_sheaf_overflow). */
void *uslub_alloc_early(struct uslub_thread *t, unsigned cls)
{
	struct uslub_cache *c = &uslub_caches[cls];
	struct cache_node *n = cache_node_of(c, t->node);
	void *object = NULL;
	if (c->stride >= LINE_BYTES && barn_get(c, t, &object, 1))
		goto done;
	if (__atomic_load_n(&n->nr_partial, __ATOMIC_RELAXED)) {
		uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
		if (n->nr_partial)
			take_shared(c, n, cds_list_first_entry(&n->partial, struct page_desc, list),
				    &object, 1);
		pthread_mutex_unlock(&n->list_lock);
		if (object)
			stat_cache(c, ALLOC_FROM_PARTIAL);
	}
	if (!object && uslub_nr_nodes == 1) {
		/* The page cache is the slow-path lock's (thread.c, idle drain). */
		bool in = uslub_slow_enter(t);
		void *fl;
		struct page_desc *s = uslub_new_slab(c, t, NULL, &fl);
		if (s) {
			object = fl;
			/* The rest is the node's, as refill_shared leaves it. */
			s->local_free = get_next_checked(c, s, fl);
			s->local_count = (uint16_t)(s->objects - 1);
			uslub_deactivate_shared(c, s, t);
		}
		uslub_slow_exit(t, in);
	}
	if (!object)
		return NULL;
done:
	t->early[cls]++;
	mark_allocated(object);
	stat_cache(c, ALLOC_SLOWPATH);
	return object;
}

/* The next step of the untouched objects of s, the thread's current slab, while its own
 * lists are empty; else NULL. */
static void *carve_more(struct uslub_cache *c, struct page_desc *s)
{
	if (s->local_free || s->objects == uslub_slab_capacity(c, s) ||
	    w_head(atomic_load_explicit(&s->word, memory_order_relaxed)))
		return NULL;
	unsigned n;
	return uslub_slab_extend(c, s, &n);
}

/* A refill's walk of free lists, several side by side: the current slab's freelist and
 * the local lists of the first partial slabs the thread holds. A free list of objects
 * freed long ago is cold, and one list walked alone waits for each link before it can
 * ask for the next: a refill of 30 objects then costs 30 misses in a row, with no work
 * of the program to hide them (the allocator before sheaves popped one link per malloc,
 * and the program's own work overlapped each miss). Walked side by side, the lists'
 * misses overlap each other. WALK_LISTS: four misses in flight, what a core's fill
 * buffers take with room to spare. */
#define WALK_LISTS 4
struct walk {
	void *p[WALK_LISTS];
	uintptr_t bits[WALK_LISTS];
	struct page_desc *slab[WALK_LISTS];
	unsigned taken[WALK_LISTS];
	unsigned lists;
};

static void walk_start(struct walk *w, struct cache_cpu *cc, struct uslub_cache *c)
{
	w->p[0] = cc->freelist;
	w->bits[0] = cc->slab ? slab_bits(cc->slab) : 0;
	w->slab[0] = cc->slab;
	w->taken[0] = 0;
	w->lists = 1;
	unsigned looked = 0;
	for (struct page_desc *s = cc->partial; s && w->lists < WALK_LISTS; s = s->next) {
		if (++looked > c->cpu_partial_slabs)
			break; /* bounded: a corrupted chain is not followed forever */
		if (!s->local_free)
			continue;
		w->p[w->lists] = s->local_free;
		w->bits[w->lists] = slab_bits(s);
		w->slab[w->lists] = s;
		w->taken[w->lists] = 0;
		w->lists++;
	}
}

/* Up to `room` objects below `top`: one list to its end, else one from each in turn. */
static inline unsigned walk_step(struct walk *w, struct cache_cpu *cc, void **top, unsigned room)
{
	unsigned got = 0;
	if (w->lists == 1) {
		void *q = w->p[0];
		uintptr_t bits = w->bits[0];
		while (q && got < room) {
			if (unlikely(((uintptr_t)q ^ bits) >> (bits & 63)))
				uslub_freelist_corrupt(cc, q);
			*--top = q;
			got++;
			q = link_get(q);
		}
		w->p[0] = q;
		return got;
	}
	for (unsigned i = 0; i < w->lists && got < room; i++) {
		void *q = w->p[i];
		if (!q)
			continue;
		if (unlikely(((uintptr_t)q ^ w->bits[i]) >> (w->bits[i] & 63)))
			uslub_freelist_corrupt(cc, q);
		*--top = q;
		got++;
		w->taken[i]++;
		w->p[i] = link_get(q);
	}
	return got;
}

/* The partial slabs' lists keep what was not taken; the current slab's is returned. */
static void *walk_end(struct walk *w)
{
	for (unsigned i = 1; i < w->lists; i++) {
		w->slab[i]->local_free = w->p[i];
		w->slab[i]->local_count = (uint16_t)(w->slab[i]->local_count - w->taken[i]);
	}
	return w->p[0];
}

/* n objects just put in cc's sheaf from a barn: the top one handed out, counted as a slow
 * allocation (the rest are counted as they are popped). */
static void *sheaf_hand_top(struct cache_cpu *cc, unsigned n)
{
	void *object = cc->sheaf[n - 1];
	sheaf_set_count(cc, n - 1);
	mark_allocated(object);
	uslub_stat(cc, ALLOC_SLOWPATH);
	return object;
}

/* The thread's sheaf of cls is empty: a full sheaf from the thread's own barn, without the
 * thread's slow-path lock (the idle drain never touches sheaves or barns), or NULL with
 * the sheaf's share to take from the slab layer in *half. The object returned is counted
 * as a slow allocation; the sheaf's are counted as they are popped. */
void *uslub_sheaf_refill_barn(struct uslub_thread *t, unsigned cls, unsigned *half)
{
	struct cache_cpu *cc = &t->cpu[cls];
	atomic_store_explicit(&t->active, true, memory_order_relaxed);
	barns_decay_soon(t);
	struct uslub_cache *c = &uslub_caches[cls];
	bool again = sheaf_turn(cc, c, SHEAF_REFILLED);
	*half = again ? cc->sheaf_cap : (cc->sheaf_cap + 1) / 2;
	unsigned n = barn_get(c, t, cc->sheaf, *half);
	if (!n) {
		uslub_stat(cc, BARN_GET_FAIL);
		return NULL;
	}
	return sheaf_hand_top(cc, n);
}

/* Whether the thread's slabs of c still hold free objects: its slab's lists or untouched
 * objects, or a partial slab. Until they are spent a thread refills from them, not from
 * the node's other barns, which hold other threads' frees: objects of two threads mixed
 * in one cache line made every read of a block a miss when both ran (glibc_thread2, 16 B
 * blocks: 1.7x one thread's time, tools/bench/results/sheaves-barns.md). */
static bool own_stock(struct uslub_cache *c, struct cache_cpu *cc)
{
	struct page_desc *s = cc->slab;
	if (cc->partial)
		return true;
	return s && (s->local_free || s->objects < uslub_slab_capacity(c, s) ||
		     w_head(atomic_load_explicit(&s->word, memory_order_relaxed)));
}

/* ... else the thread's slab layer, whose freelist then fills `half` of the sheaf. Under
 * the slow-path lock. */
void *uslub_sheaf_refill(struct uslub_thread *t, unsigned cls, unsigned half)
{
	struct cache_cpu *cc = &t->cpu[cls];
	struct uslub_cache *c = &uslub_caches[cls];
	unsigned cap = cc->sheaf_cap, n;
	void *object;

	if (!cc->slab && !cc->freelist && cc->shared_refills < SHARED_REFILLS) {
		unsigned want = SHARED_REFILL << cc->shared_refills++;
		return refill_shared(t, c, cc, want < cap ? want : cap);
	}
	if (cc->freelist) {
		object = cc->freelist;
		cc->freelist = get_next_checked(c, cc->slab, object);
		mark_allocated(object);
		uslub_stat(cc, ALLOC_SLOWPATH);
	} else {
		if (!own_stock(c, cc) && (n = barn_get_other(c, t, cc->sheaf, half)))
			return sheaf_hand_top(cc, n);
		object = uslub_alloc_refill(t, cls);
		if (!object)
			return NULL;
	}
	/* The slab's objects keep their marks: they are free until popped. Each is checked
	 * to lie in its slab before its free pointer is read (slab.c, section 7). */
	struct walk w;
	walk_start(&w, cc, c);
	/* Filled from the top down, since malloc pops from the top: the objects go out in
	 * the freelist's order, which in a fresh slab is address order, so objects allocated
	 * one after another lie one after another, as a program that walks them in that
	 * order wants (its prefetchers do). */
	void **top = cc->sheaf + half;
	n = 0;
	while (n < half) {
		unsigned got = walk_step(&w, cc, top, half - n);
		if (!got) {
			/* A freelist that ends before the sheaf is full goes on into the slab's
			 * untouched objects, a step at a time (slab.c, section 9): carving
			 * touches what the sheaf asks for, and the sheaf's slow paths stay as
			 * rare as with whole slabs threaded at once. Frees waiting on the
			 * slab's own lists come first, at the next refill. */
			if (!(w.p[0] = carve_more(c, cc->slab)))
				break;
			continue;
		}
		top -= got;
		n += got;
	}
	void *p = walk_end(&w);
	cc->freelist = p;
	if (n < half) /* the slab ran out: what was taken moves down to the bottom */
		memmove(cc->sheaf, top, n * sizeof(void *));
	sheaf_set_count(cc, n);
	if (n)
		uslub_stat(cc, SHEAF_REFILL);
	return object;
}

/* free found the thread's sheaf of p's cache full, or not open yet (its first free of
 * the class, a thread without state: free_slow sends those here). p is an object's start
 * in a slab and not marked free (the fast path or free_slow checked both). A full sheaf
 * goes to the barn whole, or when the barn is full back to its slabs; p then starts the
 * empty sheaf. */
void uslub_sheaf_overflow(void *p, struct cache_cpu *cc)
{
	struct uslub_thread *t = uslub_tls_thread;
	uintptr_t off = (uintptr_t)cc - (uintptr_t)t;
	if (unlikely(off >= offsetof(struct uslub_thread, mcpu))) {
		uslub_msheaf_overflow(p, cc);
		return;
	}
	unsigned cls = (unsigned)(off / CPU_BYTES);
	struct uslub_cache *c = &uslub_caches[cls];
	/* A thread that frees before it ever allocates (a consumer) gets its state here, so
	 * its frees have a sheaf too instead of a compare-and-swap each. */
	if (unlikely(t->state == THREAD_EMPTY) && !c->debug && c->sheaf_capacity) {
		struct uslub_thread *made = uslub_thread_create();
		if (made) {
			t = made;
			cc = &t->cpu[cls];
		}
	}
	unsigned n = cc->sheaf_count;
	/* An object of less than a cache line from a slab the thread does not hold, freed
	 * while its sheaf is closed - an early object, from a slab every thread takes from,
	 * or one another thread made and handed over - goes back to its slab, not into the
	 * sheaf: a sheaf hands back what it was given last, so a thread that allocates and
	 * frees one object in a loop kept that object for good, in a cache line with other
	 * threads' (false_sharing: 3-17 s instead of 0.8 in one run of 6 to 24,
	 * tools/bench/results/false-sharing.md). The sheaf stays closed for as many such
	 * frees as a thread has early objects, which a thread that frees a few blocks and
	 * parks uses up no further; the next opens it, and its first refill then takes a
	 * slab of the thread's own instead of more shared objects (a slab each for every
	 * small class a thread had freed in, at once, cost such a thread 48 KiB instead of
	 * 35). Objects of a line or more begin in lines of their own. The owner is another
	 * thread's to change (a slab it lets go): a stale read only sends an object one way
	 * or the other. */
	if (!cc->sheaf_cap && c->stride < LINE_BYTES && t->state == THREAD_LIVE) {
		struct page_desc *s = page_desc_of(p)->head;
		if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) != t) {
			if (t->early[cls] < EARLY_OBJECTS) {
				/* The last: the next malloc opens the sheaf. */
				if (++t->early[cls] == EARLY_OBJECTS)
					cc->shared_refills = SHARED_REFILLS;
			} else {
				uslub_sheaf_open(t, cc, cls);
				cc->shared_refills = SHARED_REFILLS;
			}
			uslub_slab_object_free(c, s, p, t);
			return;
		}
	}
	uslub_sheaf_open(t, cc, cls);
	if (!cc->sheaf_cap) {
		uslub_slab_object_free(c, page_desc_of(p)->head, p, uslub_tls_thread);
		return;
	}
	/* A full sheaf meets its end: it may grow (sheaf_turn). */
	bool again = n >= cc->sheaf_cap && sheaf_turn(cc, c, SHEAF_SPILLED);
	if (n < cc->sheaf_cap) {
		/* Just opened (empty), or grown: a push, counted as the fast path's are
		 * (types.h, uslub_cc_stat). */
		mark_free(p);
		cc->sheaf[n] = p;
		uslub_own_store(cc->sheaf_count, (uint16_t)(n + 1));
		return;
	}
	/* The older objects go; the newer stay for the next allocations. */
	unsigned half = again ? n : (n + 1) / 2;
	barns_decay_soon(t);
	if (!barn_put(c, t, cc->sheaf, half)) {
		bool in = uslub_slow_enter(t);
		uslub_flush_objects(c, t, cc->sheaf, half);
		uslub_slow_exit(t, in);
		uslub_stat_add(cc, SHEAF_FLUSH, half);
	}
	/* Not a whole sheaf: the newer rest moves down (no call otherwise), out (medium_sheaf.c's
	 * msheaf_spill says why). */
	if (n > half)
		USLUB_OUT_VOID(memmove(cc->sheaf, cc->sheaf + half, (n - half) * sizeof(void *)));
	mark_free(p);
	cc->sheaf[n - half] = p;
	sheaf_set_count(cc, n - half + 1);
	uslub_stat(cc, FREE_SLOWPATH);
	/* A safe point, as the allocation slow path's: the flush may have freed the pages
	 * that make the background thread worth starting, and a program that frees a spike
	 * then runs on its sheaves alone would reach no other slow path. free reaches here by
	 * a tail call, so the return address is free's caller (hooks.h: not the loader). */
	uslub_safe_point_free(__builtin_return_address(0));
}

/* The objects were counted as freed when they went into the sheaf, so sending them on
 * counts nothing again. `final` also closes the sheaves (thread exit). */
void uslub_sheaves_flush(struct uslub_thread *t, bool final)
{
	for (unsigned i = 0, nr = uslub_caches_in_use(); i < nr; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		/* Written only where set: a state's untouched pages stay so (thread.c). */
		if (final && cc->sheaf_cap)
			cc->sheaf_cap = 0;
		if (cc->sheaf_count) {
			uslub_flush_objects(&uslub_caches[i], t, cc->sheaf, cc->sheaf_count);
			uslub_stat_add(cc, SHEAF_FLUSH, cc->sheaf_count);
			sheaf_set_count(cc, 0);
		}
	}
	uslub_msheaves_flush(t, final);
}
