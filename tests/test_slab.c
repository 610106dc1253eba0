/* Slab state transitions, watched through the descriptors: a thread's current slab is
 * frozen and named after it; a full slab is unfrozen on no list; a free into a full slab
 * freezes it onto the freeing thread's partial list; other threads' frees land on the
 * remote list; the thread partial list stays within cpu_partial_slabs, spilling to the
 * node list; an empty slab goes back to the page allocator once the node keeps
 * min_partial; an exiting thread lets go of every slab it held. Those run with the sheaves
 * closed; then the sheaves: frees into the thread's sheaf without touching the slab, a
 * full sheaf left in the barn and taken back by an empty one, a full barn sending sheaves
 * back to their slabs, and malloc_trim and thread exit flushing, each free counted once. */
#include "debug/check.h"
#include "thread/thread.h"
#include "slab/slab.h"
#include "test_util.h"
#include "uslub.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE 64

static unsigned cls;
static struct uslub_cache *cache;

static struct page_desc *slab_of(void *p)
{
	return page_desc_of(p)->head;
}

static bool frozen(struct page_desc *s)
{
	return atomic_load(&s->word) & W_FROZEN;
}

static struct cache_cpu *my_cpu(void)
{
	return &uslub_tls_thread->cpu[cls];
}

static uint64_t stat_of(enum uslub_stat_item item)
{
	return my_cpu()->stat[item];
}

static bool on_thread_partial(struct page_desc *s)
{
	for (struct page_desc *p = my_cpu()->partial; p; p = p->next)
		if (p == s)
			return true;
	return false;
}

/* Allocates until the current slab changes; returns the objects of the first one. */
static void **fill_current_slab(struct page_desc **slab_out, unsigned *n_out)
{
	void *first = uslub_malloc(SIZE);
	struct page_desc *s = slab_of(first);
	unsigned cap = uslub_slab_capacity(cache, s);
	void **objs = calloc(cap + 1, sizeof(void *));
	unsigned n = 0;
	objs[n++] = first;
	for (;;) {
		void *p = uslub_malloc(SIZE);
		if (slab_of(p) != s) {
			uslub_free(p);
			break;
		}
		objs[n++] = p;
	}
	*slab_out = s;
	*n_out = n;
	return objs;
}

static void *remote_free(void *arg)
{
	uslub_free(arg);
	return NULL;
}

static void free_from_other_thread(void *p)
{
	pthread_t t;
	pthread_create(&t, NULL, remote_free, p);
	pthread_join(t, NULL);
}

static void current_and_full(void)
{
	void *p = uslub_malloc(SIZE);
	struct page_desc *s = slab_of(p);
	CHECKF(s->kind == PAGE_SLAB && s->cls == cls, "a slab of kmalloc-64");
	CHECKF(s->owner == uslub_tls_thread && frozen(s), "current slab frozen for this thread");
	CHECKF(my_cpu()->slab == s, "it is the thread's current slab");
	CHECKF(uslub_slab_object_start(s, (char *)p + 8) == p, "interior pointer maps to start");
	uslub_free(p);

	struct page_desc *full;
	unsigned n;
	void **objs = fill_current_slab(&full, &n);
	CHECKF(n >= 1 && full->objects >= n, "filled %u objects", n);
	CHECKF(my_cpu()->slab != full, "a new current slab");
	CHECKF(!frozen(full) && full->owner == NULL, "full slab unfrozen and unowned");
	CHECKF(w_inuse(atomic_load(&full->word)) == full->objects, "all objects in use");
	CHECKF(w_head(atomic_load(&full->word)) == 0, "no free object");
	CHECKF(!(full->flags & PF_ON_PARTIAL), "a full slab is on no list");

	/* A free into the full slab freezes it for this thread (put_cpu_partial). */
	uint64_t cpf = stat_of(USLUB_STAT_CPU_PARTIAL_FREE);
	uslub_free(objs[0]);
	CHECKF(frozen(full) && full->owner == uslub_tls_thread, "refrozen for the freeing thread");
	CHECKF(on_thread_partial(full), "on the thread partial list");
	CHECKF(stat_of(USLUB_STAT_CPU_PARTIAL_FREE) == cpf + 1, "cpu_partial_free counted");
	/* The next free into it is local: no atomic, on the slab's local list. */
	uint64_t ff = stat_of(USLUB_STAT_FREE_FASTPATH);
	uslub_free(objs[1]);
	CHECKF(full->local_free == objs[1], "pushed on the local list");
	CHECKF(stat_of(USLUB_STAT_FREE_FASTPATH) == ff + 1, "free_fastpath counted");
	for (unsigned i = 2; i < n; i++)
		uslub_free(objs[i]);
	free(objs);
}

static void remote_frees(void)
{
	void *a = uslub_malloc(SIZE), *b = uslub_malloc(SIZE);
	struct page_desc *s = slab_of(a);
	CHECKF(slab_of(b) == s, "same slab");
	uint32_t inuse = w_inuse(atomic_load(&s->word));
	free_from_other_thread(a);
	uint64_t w = atomic_load(&s->word);
	CHECKF(w & W_FROZEN, "still frozen");
	CHECKF(decode(w_head(w), page_address(s)) == a, "object on the remote list");
	CHECKF(w_inuse(w) == inuse - 1, "inuse dropped by one");
	CHECKF(s->owner == uslub_tls_thread, "still ours");
	uslub_free(b);
}

/* A slab let go from the thread partial list with frees on both of its lists - the owner's
 * local list (k objects) and the remote list (r + 1: the free that froze it is a remote
 * one) - ends with one list of exactly those objects, whichever list is the shorter and so
 * the one walked. */
static void deactivate_both_lists(unsigned k, unsigned r)
{
	struct page_desc *s;
	unsigned n;
	void **objs = fill_current_slab(&s, &n);
	CHECKF(n > k + r + 1, "a slab of %u objects holds %u frees", n, k + r + 1);
	uslub_free(objs[0]);
	CHECKF(on_thread_partial(s), "frozen onto the thread partial list");
	for (unsigned i = 1; i <= k; i++)
		uslub_free(objs[i]);
	CHECKF(s->local_count == k, "%u frees on the local list", k);
	for (unsigned i = k + 1; i <= k + r; i++)
		free_from_other_thread(objs[i]);
	uslub_unfreeze_partials(cache, my_cpu(), uslub_tls_thread);
	uint64_t w = atomic_load(&s->word);
	CHECKF(!(w & W_FROZEN) && s->owner == NULL && !s->local_free, "let go, no local list");
	CHECKF(w_inuse(w) == n - (k + r + 1), "in use: %u of %u", w_inuse(w), n);
	unsigned found = 0, listed = 0;
	for (void *p = decode(w_head(w), page_address(s)); p && listed <= s->objects;
	     p = uslub_slab_next_free(cache, p)) {
		listed++;
		for (unsigned i = 0; i <= k + r; i++)
			found += objs[i] == p;
	}
	CHECKF(listed == k + r + 1 && found == k + r + 1,
	       "the slab's list holds the %u frees (%u listed, %u of them)", k + r + 1, listed,
	       found);
	for (unsigned i = k + r + 1; i < n; i++)
		uslub_free(objs[i]);
	free(objs);
}

static void partial_bound_and_discard(void)
{
	/* Full slabs, then one free into each: the thread partial list spills. */
	enum { SLABS = 40 };
	void **objs[SLABS];
	unsigned counts[SLABS];
	struct page_desc *slabs[SLABS];
	for (int i = 0; i < SLABS; i++)
		objs[i] = fill_current_slab(&slabs[i], &counts[i]);
	uint64_t drains = stat_of(USLUB_STAT_CPU_PARTIAL_DRAIN);
	for (int i = 0; i < SLABS; i++) {
		uslub_free(objs[i][0]);
		CHECKF(my_cpu()->nr_partial <= cache->cpu_partial_slabs, "partial list %u > %u",
		       my_cpu()->nr_partial, cache->cpu_partial_slabs);
	}
	CHECKF(stat_of(USLUB_STAT_CPU_PARTIAL_DRAIN) > drains, "the partial list was drained");
	unsigned on_node = 0;
	for (int i = 0; i < SLABS; i++)
		on_node += (slabs[i]->flags & PF_ON_PARTIAL) && !frozen(slabs[i]);
	CHECKF(on_node > 0, "drained slabs sit on the node partial list");
	CHECKF(cache_node_of(cache, 0)->nr_partial >= on_node, "node count covers them");

	/* Empty them from another thread: unfrozen slabs go back to the page allocator
	 * once the node keeps min_partial. */
	uint64_t slabs_before = atomic_load(&cache->nr_slabs);
	for (int i = 0; i < SLABS; i++) {
		for (unsigned k = 1; k < counts[i]; k++)
			free_from_other_thread(objs[i][k]);
		free(objs[i]);
	}
	CHECKF(atomic_load(&cache->nr_slabs) < slabs_before, "empty slabs discarded: %lu -> %lu",
	       (unsigned long)slabs_before, (unsigned long)atomic_load(&cache->nr_slabs));
	/* free's fast path reads the test of the pointer's own page: a discarded slab's pages
	 * must fail its test (test 0), a live slab's pass it on every page. */
	unsigned discarded = 0, live_ok = 0, live = 0;
	for (int i = 0; i < SLABS; i++) {
		struct page_desc *s = slabs[i];
		const struct page_test *e = page_test_of(s);
		bool gone = s->kind != PAGE_SLAB || s->head != s;
		for (size_t k = 0; k < (1UL << cache->order); k++) {
			if (gone) {
				CHECKF(e[k].cpu_off == 0 && e[k].objects == 0,
				       "page %zu of a discarded slab: test %u, objects %u", k,
				       e[k].cpu_off, e[k].objects);
			} else {
				live_ok += e[k].cpu_off == CPU_OFF(cache->cls) &&
					   e[k].start == (uint32_t)(uintptr_t)page_address(s) &&
					   e[k].objects == s->objects;
				live++;
			}
		}
		discarded += gone;
	}
	CHECKF(discarded > 0, "some of the slabs were discarded (%u)", discarded);
	CHECKF(live_ok == live, "every page of a live slab carries free's test (%u of %u)", live_ok,
	       live);
	CHECKF(cache_node_of(cache, 0)->nr_partial >= cache->min_partial ||
		   cache_node_of(cache, 0)->nr_partial <= (uint64_t)SLABS,
	       "node keeps its partials");
}

struct handoff {
	void *objs[2000];
	struct uslub_thread *self;
};

static void *allocate_and_exit(void *arg)
{
	struct handoff *h = arg;
	for (int i = 0; i < 2000; i++)
		h->objs[i] = uslub_malloc(SIZE);
	for (int i = 0; i < 2000; i += 2)
		uslub_free(h->objs[i]);
	h->self = uslub_tls_thread;
	return NULL;
}

static void thread_exit_flush(void)
{
	struct handoff *h = calloc(1, sizeof(*h));
	pthread_t t;
	pthread_create(&t, NULL, allocate_and_exit, h);
	pthread_join(t, NULL);
	unsigned held = 0;
	for (int i = 1; i < 2000; i += 2) {
		struct page_desc *s = slab_of(h->objs[i]);
		held += s->owner == h->self;
		CHECKF(s->kind == PAGE_SLAB, "object's slab still a slab");
	}
	CHECKF(held == 0, "%u slabs still name the exited thread", held);
	for (int i = 1; i < 2000; i += 2)
		uslub_free(h->objs[i]);
	free(h);
}

/* ---- sheaves --------------------------------------------------------------------- */

static uint32_t open_capacity[USLUB_NR_CLASSES];

/* New threads take their sheaf capacity from the caches; this one is set here. */
static void set_sheaves(bool open)
{
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		uslub_caches[i].sheaf_capacity = open ? open_capacity[i] : 0;
		uslub_tls_thread->cpu[i].sheaf_cap = (uint16_t)uslub_caches[i].sheaf_capacity;
	}
}

struct batch {
	size_t size;
	unsigned n;
	void *objs[4096];
};

static void *allocate_batch(void *arg)
{
	struct batch *b = arg;
	for (unsigned i = 0; i < b->n; i++)
		b->objs[i] = uslub_malloc(b->size);
	return NULL;
}

/* n objects of `size` allocated by a thread that then exits: their slabs are no one's. */
static struct batch *foreign_objects(size_t size, unsigned n)
{
	struct batch *b = calloc(1, sizeof(*b));
	b->size = size;
	b->n = n;
	pthread_t t;
	pthread_create(&t, NULL, allocate_batch, b);
	pthread_join(t, NULL);
	return b;
}

static uint64_t live_checked(void)
{
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, -1);
	CHECKF(errors == 0, "heap walk: %lu inconsistencies", (unsigned long)errors);
	return c.live_objects;
}

static void free_into_thread_sheaf(void *arg)
{
	struct batch *b = arg;
	uslub_free(uslub_malloc(16)); /* a thread gets its state, and sheaves, on a malloc */
	for (unsigned i = 0; i < b->n; i++)
		uslub_free(b->objs[i]);
	CHECKF(uslub_tls_thread->cpu[uslub_size_to_class(b->size)].sheaf_count > 0,
	       "the exiting thread's sheaf holds objects");
}

static void *free_and_exit(void *arg)
{
	free_into_thread_sheaf(arg);
	return NULL;
}

static struct barn *my_barn(unsigned k)
{
	struct uslub_thread *t = uslub_tls_thread;
	struct barn *b = uslub_barns[t->node * BARN_SHARDS + t->barn_shard];
	return b ? &b[k] : NULL;
}

static uint64_t cache_stat(unsigned k, enum uslub_stat_item item)
{
	uint64_t v = __atomic_load_n(&uslub_caches[k].stat[item], __ATOMIC_RELAXED);
	/* The barns count their own gets and puts (sheaf.c), as the dump adds them. */
	for (unsigned slot = 0; slot < NR_BARNS; slot++) {
		struct barn *b = uslub_barns[slot];
		if (b && item == USLUB_STAT_BARN_GET)
			v += b[k].gets;
		if (b && item == USLUB_STAT_BARN_PUT)
			v += b[k].puts;
	}
	return v;
}

static void *sheaf_caps_of_new_thread(void *arg)
{
	uint32_t *caps = arg;
	uslub_free(uslub_malloc(64));
	caps[0] = uslub_tls_thread->cpu[uslub_size_to_class(192)].sheaf_cap;
	caps[1] = uslub_tls_thread->cpu[uslub_size_to_class(64)].sheaf_cap;
	return NULL;
}

static void sheaves(void)
{
	/* kmalloc-192: a class this thread has not touched, so it holds no slab of it. */
	const size_t size = 192;
	unsigned k = uslub_size_to_class(size);
	if (uslub_caches[k].debug) {
		printf("  sheaves: skipped, a debug cache (USLUB_DEBUG, a sanitizer) has none\n");
		return;
	}
	struct cache_cpu *cc = &uslub_tls_thread->cpu[k];
	/* Opened at the class's first slow path, so an untouched class costs a thread no
	 * write (and no resident page): a new thread that allocates 64 B has kmalloc-192's
	 * closed and kmalloc-64's open. */
	pthread_t th;
	uint32_t caps[2] = {1, 0};
	CHECK(pthread_create(&th, NULL, sheaf_caps_of_new_thread, caps) == 0);
	CHECK(pthread_join(th, NULL) == 0);
	CHECKF(caps[0] == 0 && caps[1] == uslub_caches[uslub_size_to_class(64)].sheaf_capacity,
	       "a new thread's sheaves open as used (kmalloc-192 %u, kmalloc-64 %u)", caps[0],
	       caps[1]);
	uslub_sheaf_open(uslub_tls_thread, cc, k);
	unsigned cap = cc->sheaf_cap;
	CHECKF(cap > 0 && cap <= SHEAF_MAX && cap == uslub_caches[k].sheaf_capacity,
	       "kmalloc-192 sheaf opened, capacity %u", cap);
	CHECKF(cc->freelist == NULL && cc->sheaf_count == 0 && cc->slab == NULL,
	       "nothing cached for kmalloc-192");

	/* One object from each of cap + 5 slabs, which no thread holds. */
	struct batch *b = foreign_objects(size, 4096);
	void *pick[SHEAF_MAX + 5];
	unsigned npick = 0;
	for (unsigned i = 0; i < b->n && npick < cap + 5; i++)
		if (!npick || slab_of(b->objs[i]) != slab_of(pick[npick - 1]))
			pick[npick++] = b->objs[i];
	CHECKF(npick == cap + 5, "%u objects from different slabs", npick);
	uint64_t live0 = live_checked();
	struct page_desc *s0 = slab_of(pick[0]);
	uint32_t inuse0 = w_inuse(atomic_load(&s0->word));
	uint64_t ff = uslub_cc_stat(cc, USLUB_STAT_FREE_FASTPATH),
		 fsl = cc->stat[USLUB_STAT_FREE_SLOWPATH];
	uint64_t put = cache_stat(k, USLUB_STAT_BARN_PUT);
	for (unsigned i = 0; i < cap; i++)
		uslub_free(pick[i]);
	CHECKF(cc->sheaf_count == cap, "sheaf filled to its capacity (%u of %u)", cc->sheaf_count,
	       cap);
	CHECKF(cc->sheaf[cap - 1] == pick[cap - 1], "in the order freed");
	CHECKF(w_inuse(atomic_load(&s0->word)) == inuse0 && s0->owner == NULL,
	       "a sheaf free leaves its slab alone");
	CHECKF(uslub_cc_stat(cc, USLUB_STAT_FREE_FASTPATH) == ff + cap,
	       "sheaf frees are fast-path frees");
	/* The next free finds the sheaf full: its older half goes to the barn. */
	unsigned half = (cap + 1) / 2, kept = cap - half;
	for (unsigned i = cap; i < npick; i++)
		uslub_free(pick[i]);
	CHECKF(cc->sheaf_count == kept + 5 && cc->sheaf[0] == pick[half] &&
		   cc->sheaf[kept] == pick[cap],
	       "the newer half stayed, the frees went on top");
	CHECKF(my_barn(k) && my_barn(k)->count == half, "the older half is in the barn (%u)",
	       my_barn(k) ? my_barn(k)->count : 0);
	CHECKF(cache_stat(k, USLUB_STAT_BARN_PUT) == put + 1, "barn_put counted");
	CHECKF(cc->stat[USLUB_STAT_FREE_SLOWPATH] == fsl + 1, "one free took the slow path");
	CHECKF(w_inuse(atomic_load(&s0->word)) == inuse0, "the barn leaves the slab alone");
	CHECKF(live_checked() == live0 - cap - 5, "sheaf and barn objects are not live");

	/* Last in, first out; an empty sheaf takes half a sheaf from the barn, and no slab
	 * is looked at. */
	uint64_t af = cc->stat[USLUB_STAT_ALLOC_FASTPATH], as = cc->stat[USLUB_STAT_ALLOC_SLOWPATH];
	uint64_t get = cache_stat(k, USLUB_STAT_BARN_GET);
	void *got[SHEAF_MAX + 6];
	unsigned ngot = kept + 6;
	for (unsigned i = 0; i < ngot; i++)
		got[i] = uslub_malloc(size);
	CHECKF(got[0] == pick[cap + 4] && got[4] == pick[cap] && got[kept + 4] == pick[half],
	       "the last freed comes back first");
	CHECKF(got[kept + 5] == pick[half - 1], "then the barn's objects, the top first");
	CHECKF(cc->stat[USLUB_STAT_ALLOC_FASTPATH] == af + kept + 5 &&
		   cc->stat[USLUB_STAT_ALLOC_SLOWPATH] == as + 1,
	       "alloc_fastpath and alloc_slowpath counted");
	CHECKF(cache_stat(k, USLUB_STAT_BARN_GET) == get + 1 && my_barn(k)->count == 0,
	       "barn_get counted, the barn empty");
	CHECKF(cc->sheaf_count == half - 1, "the sheaf holds the rest (%u)", cc->sheaf_count);
	CHECKF(cc->slab == NULL, "no slab taken");
	for (unsigned i = 0; i < ngot; i++)
		uslub_free(got[i]);
	CHECKF(live_checked() == live0 - cap - 5, "all free again");

	/* The rest of the batch: the barn fills to its limit, and the sheaves that find it
	 * full go back to their slabs, sorted, one compare-and-swap per slab. */
	uint64_t flush = cc->stat[USLUB_STAT_SHEAF_FLUSH];
	unsigned freed = 0;
	for (unsigned i = 0; i < b->n; i++) {
		bool picked = false;
		for (unsigned j = 0; j < npick && !picked; j++)
			picked = b->objs[i] == pick[j];
		if (!picked) {
			uslub_free(b->objs[i]);
			freed++;
		}
	}
	/* Full: no room for another sheaf (moves are half or whole sheaves). */
	CHECKF(my_barn(k)->count + cap > my_barn(k)->limit && my_barn(k)->limit % cap == 0 &&
		   my_barn(k)->limit >= BARN_MIN_SHEAVES * cap,
	       "the barn is full (%u of %u)", my_barn(k)->count, my_barn(k)->limit);
	CHECKF(cache_stat(k, USLUB_STAT_BARN_PUT_FAIL) > 0, "barn_put_fail counted");
	CHECKF(cc->stat[USLUB_STAT_SHEAF_FLUSH] - flush ==
		   (uint64_t)freed + cap + 5 - cc->sheaf_count - my_barn(k)->count,
	       "every object not in the sheaf or the barn was flushed to its slab");
	CHECKF(live_checked() == live0 - cap - 5 - freed,
	       "flushed objects are free in their slabs");

	/* malloc_trim sends the sheaf and the barn back; nothing is counted as a free again. */
	fsl = cc->stat[USLUB_STAT_FREE_SLOWPATH];
	uint64_t barn_flush = cache_stat(k, USLUB_STAT_BARN_FLUSH);
	unsigned in_barn = my_barn(k)->count;
	uslub_malloc_trim(0);
	CHECKF(cc->sheaf_count == 0 && my_barn(k)->count == 0,
	       "malloc_trim emptied the sheaf and the barn");
	CHECKF(cache_stat(k, USLUB_STAT_BARN_FLUSH) == barn_flush + in_barn, "barn_flush counted");
	CHECKF(cc->stat[USLUB_STAT_FREE_SLOWPATH] == fsl, "flushed objects not counted as frees");
	CHECKF(live_checked() == live0 - cap - 5 - freed, "the batch is free in its slabs");
	free(b);

	/* Barn decay: what a barn held for a whole period without a thread taking it goes
	 * back to the slabs - after at most two periods, whatever the phase. */
	b = foreign_objects(size, 2 * cap);
	for (unsigned i = 0; i < 2 * cap; i++)
		uslub_free(b->objs[i]);
	CHECKF(my_barn(k)->count == cap, "a sheaf in the barn (%u)", my_barn(k)->count);
	barn_flush = cache_stat(k, USLUB_STAT_BARN_FLUSH);
	live0 = live_checked();
	for (unsigned round = 0; round < 3 && my_barn(k)->count; round++) {
		struct timespec pause = {1, 100 * 1000 * 1000};
		nanosleep(&pause, NULL);
		uslub_barns_decay();
	}
	CHECKF(my_barn(k)->count == 0, "the barn decayed (%u left)", my_barn(k)->count);
	CHECKF(cache_stat(k, USLUB_STAT_BARN_FLUSH) == barn_flush + cap, "barn_flush counted");
	CHECKF(live_checked() == live0, "decay frees nothing live");
	uslub_malloc_trim(0);
	free(b);

	/* An exiting thread's sheaf goes back to the slabs with it. */
	b = foreign_objects(size, 8);
	live0 = live_checked();
	pthread_t t;
	pthread_create(&t, NULL, free_and_exit, b);
	pthread_join(t, NULL);
	CHECKF(live_checked() == live0 - 8, "an exited thread's sheaf objects are free");
	for (unsigned i = 0; i < 8; i++) {
		struct page_desc *s = slab_of(b->objs[i]); /* NULL: the slab went back */
		CHECKF(s == NULL || s->owner == NULL, "no slab names the exited thread");
	}
	free(b);

	/* A large block is not a slab object, whatever class its descriptor once had. */
	void *big = uslub_malloc(64 << 10);
	uslub_free(big);
	unsigned found = 0;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		for (unsigned j = 0; j < uslub_tls_thread->cpu[i].sheaf_count; j++)
			found += uslub_tls_thread->cpu[i].sheaf[j] == big;
	CHECKF(found == 0, "a large block never enters a sheaf");
}

/* ---- idle threads ------------------------------------------------------------------ */

struct parked {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int phase; /* 1: parked, 2: woken, 3: done */
	struct uslub_thread *state;
	void *objs[600];
	bool ok;
};

static void wait_phase(struct parked *pk, int phase)
{
	pthread_mutex_lock(&pk->lock);
	while (pk->phase < phase)
		pthread_cond_wait(&pk->cond, &pk->lock);
	pthread_mutex_unlock(&pk->lock);
}

static void set_phase(struct parked *pk, int phase)
{
	pthread_mutex_lock(&pk->lock);
	pk->phase = phase;
	pthread_cond_broadcast(&pk->cond);
	pthread_mutex_unlock(&pk->lock);
}

static void *park(void *arg)
{
	struct parked *pk = arg;
	/* Enough of one cache to own slabs of it, the thread's page cache filled, and the
	 * objects written. */
	for (unsigned i = 0; i < 600; i++) {
		pk->objs[i] = uslub_malloc(SIZE);
		memset(pk->objs[i], (int)(i & 0xff), SIZE);
	}
	for (unsigned i = 0; i < 600; i += 2)
		uslub_free(pk->objs[i]);
	pk->state = uslub_tls_thread;
	set_phase(pk, 1);
	wait_phase(pk, 2);
	/* Woken after the drain: the objects are intact, and the thread allocates again. */
	pk->ok = true;
	for (unsigned i = 1; i < 600; i += 2)
		for (unsigned j = 0; j < SIZE; j++)
			pk->ok &= ((unsigned char *)pk->objs[i])[j] == (i & 0xff);
	for (unsigned i = 0; i < 600; i += 2)
		pk->objs[i] = uslub_malloc(SIZE);
	for (unsigned i = 0; i < 600; i++)
		uslub_free(pk->objs[i]);
	set_phase(pk, 3);
	return NULL;
}

static void idle_drain(void)
{
	struct parked *pk = calloc(1, sizeof(*pk));
	pthread_mutex_init(&pk->lock, NULL);
	pthread_cond_init(&pk->cond, NULL);
	pthread_t t;
	pthread_create(&t, NULL, park, pk);
	wait_phase(pk, 1);
	struct uslub_thread *st = pk->state;
	struct cache_cpu *cc = &st->cpu[cls];
	CHECKF(cc->slab != NULL, "the thread holds a slab of kmalloc-%d", SIZE);
	uint64_t drained = uslub_threads_drained;
	/* A thread is given back after two looks without a slow path in between. */
	uslub_threads_drain_idle();
	uslub_threads_drain_idle();
	CHECKF(cc->slab != NULL, "not after one idle period");
	uslub_threads_drain_idle();
	CHECKF(uslub_threads_drained == drained + 1, "drained once");
	CHECKF(cc->slab == NULL && cc->partial == NULL && cc->freelist == NULL,
	       "its slabs went back to the node");
	CHECKF(st->pcp_count == 0, "its page cache is empty (%u)", st->pcp_count);
	uslub_threads_drain_idle();
	CHECKF(uslub_threads_drained == drained + 1, "not drained twice");
	live_checked();
	set_phase(pk, 2);
	wait_phase(pk, 3);
	pthread_join(t, NULL);
	CHECKF(pk->ok, "the idle thread's objects survived the drain");
	live_checked();
	free(pk);
}

/* A sheaf of objects above SHEAF_SMALL opens short and grows as a random walk needs it:
 * a thread that only allocates (a producer) keeps SHEAF_START, one turn from allocating
 * to freeing grows it by SHEAF_GROW, and a working set replaced at random takes it to the
 * cache's capacity. */
struct sheaf_walk {
	unsigned after_allocs, after_frees, after_walk, capacity;
	bool open_short;
};

static void *walk_a_sheaf(void *arg)
{
	struct sheaf_walk *w = arg;
	enum { N = 200, LIVE = 64 };
	const size_t size = 1024;
	unsigned k = uslub_size_to_class(size);
	static void *p[N];
	for (unsigned i = 0; i < N; i++)
		p[i] = uslub_malloc(size);
	struct cache_cpu *cc = &uslub_tls_thread->cpu[k];
	w->capacity = uslub_caches[k].sheaf_capacity;
	w->open_short = uslub_sheaf_start(&uslub_caches[k]) == SHEAF_START;
	w->after_allocs = cc->sheaf_cap;
	for (unsigned i = 0; i < N; i++)
		uslub_free(p[i]);
	w->after_frees = cc->sheaf_cap;
	uint64_t rng = 12345;
	for (unsigned i = 0; i < LIVE; i++)
		p[i] = uslub_malloc(size);
	for (unsigned step = 0; step < 100000; step++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned i = (unsigned)(rng >> 33) % LIVE;
		if (p[i]) {
			uslub_free(p[i]);
			p[i] = NULL;
		} else {
			p[i] = uslub_malloc(size);
		}
	}
	w->after_walk = cc->sheaf_cap;
	for (unsigned i = 0; i < LIVE; i++)
		uslub_free(p[i]);
	return NULL;
}

static void sheaf_start(void)
{
	if (uslub_caches[uslub_size_to_class(1024)].debug) {
		printf(
		    "  sheaf_start: skipped, a debug cache (USLUB_DEBUG, a sanitizer) has none\n");
		return;
	}
	struct sheaf_walk w = {0};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, walk_a_sheaf, &w) == 0);
	CHECK(pthread_join(th, NULL) == 0);
	CHECKF(w.open_short && w.capacity > SHEAF_START,
	       "kmalloc-1k's sheaf opens short (%u of %u)", SHEAF_START, w.capacity);
	CHECKF(w.after_allocs == SHEAF_START,
	       "a thread that only allocated keeps its sheaf at %u (%u)", SHEAF_START,
	       w.after_allocs);
	CHECKF(w.after_frees == SHEAF_START + SHEAF_GROW,
	       "one turn from allocating to freeing grows it by %u (%u)", SHEAF_GROW,
	       w.after_frees);
	CHECKF(w.after_walk == w.capacity, "a random walk takes it to the capacity (%u of %u)",
	       w.after_walk, w.capacity);
}

/* A thread's first objects of a cache of a line or more come from its barn when the barn
 * holds some: objects other threads freed are used again before shared slabs give more,
 * so a barn that only a consumer fills (a parent freeing what its short-lived children
 * left) is emptied by the children's first allocations, not only by their refills. */
struct barn_early {
	unsigned shard, before, after;
	void *top, *got;
	bool same_shard;
};

static void *fill_barn(void *arg)
{
	struct batch *b = arg;
	for (unsigned i = 0; i < b->n; i++)
		uslub_free(b->objs[i]);
	return (void *)(uintptr_t)uslub_tls_thread->barn_shard;
}

static void *early_from_barn(void *arg)
{
	struct barn_early *e = arg;
	unsigned k = uslub_size_to_class(1024);
	uslub_free(uslub_malloc(16)); /* a state, with kmalloc-1k untouched */
	e->same_shard = uslub_tls_thread->barn_shard == e->shard;
	if (!e->same_shard)
		return NULL;
	struct barn *b = my_barn(k);
	e->before = b ? b->count : 0;
	e->top = b && b->count ? b->objects[b->count - 1] : NULL;
	e->got = uslub_malloc(1024);
	e->after = b ? b->count : 0;
	uslub_free(e->got);
	return NULL;
}

static void barn_early(void)
{
	if (uslub_caches[uslub_size_to_class(1024)].debug) {
		printf(
		    "  barn_early: skipped, a debug cache (USLUB_DEBUG, a sanitizer) has none\n");
		return;
	}
	/* A thread that only frees 100 objects of 1 KiB leaves most of them in its barn. */
	struct batch *b = foreign_objects(1024, 100);
	pthread_t th;
	void *shard;
	CHECK(pthread_create(&th, NULL, fill_barn, b) == 0);
	CHECK(pthread_join(th, &shard) == 0);
	struct barn_early e = {.shard = (unsigned)(uintptr_t)shard};
	for (unsigned tries = 0; tries < 2 * BARN_SHARDS && !e.same_shard; tries++) {
		CHECK(pthread_create(&th, NULL, early_from_barn, &e) == 0);
		CHECK(pthread_join(th, NULL) == 0);
	}
	CHECKF(e.same_shard && e.before > 0,
	       "a thread of the same barn found it holding objects (%u)", e.before);
	CHECKF(e.got == e.top && e.after == e.before - 1,
	       "its first object of the cache is the barn's top one (%p, top %p; %u -> %u)", e.got,
	       e.top, e.before, e.after);
	uslub_malloc_trim(0);
	free(b);
}

int main(void)
{
	uslub_free(uslub_malloc(1)); /* start-up and this thread's state */
	cls = uslub_size_to_class(SIZE);
	cache = &uslub_caches[cls];
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++)
		open_capacity[i] = uslub_caches[i].sheaf_capacity;
	set_sheaves(false);
	current_and_full();
	remote_frees();
	deactivate_both_lists(2, 6); /* the local list walked */
	deactivate_both_lists(6, 2); /* the remote list walked */
	partial_bound_and_discard();
	thread_exit_flush();
	set_sheaves(true);
	sheaves();
	sheaf_start();
	barn_early();
	idle_drain();
	CHECKF(uslub_pages_check(0) == 0, "page allocator consistent at the end");
	return tu_summary("test_slab");
}
