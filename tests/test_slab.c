/* Slab state transitions, watched through the descriptors: a thread's current slab is
 * frozen and named after it; a full slab is unfrozen on no list; a free into a full slab
 * freezes it onto the freeing thread's partial list; other threads' frees land on the
 * remote list; the thread partial list stays within cpu_partial_slabs, spilling to the
 * node list; an empty slab goes back to the page allocator once the node keeps
 * min_partial; an exiting thread lets go of every slab it held. */
#include "internal.h"
#include "unit.h"
#include "uslub.h"

#include <pthread.h>
#include <stdlib.h>

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
	unsigned cap = s->objects;
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
	EXPECT(s->kind == PAGE_SLAB && s->cls == cls, "a slab of kmalloc-64");
	EXPECT(s->owner == uslub_tls_thread && frozen(s), "current slab frozen for this thread");
	EXPECT(my_cpu()->slab == s, "it is the thread's current slab");
	EXPECT(uslub_slab_object_start(s, (char *)p + 8) == p, "interior pointer maps to start");
	uslub_free(p);

	struct page_desc *full;
	unsigned n;
	void **objs = fill_current_slab(&full, &n);
	EXPECT(n >= 1 && full->objects >= n, "filled %u objects", n);
	EXPECT(my_cpu()->slab != full, "a new current slab");
	EXPECT(!frozen(full) && full->owner == NULL, "full slab unfrozen and unowned");
	EXPECT(w_inuse(atomic_load(&full->word)) == full->objects, "all objects in use");
	EXPECT(w_head(atomic_load(&full->word)) == 0, "no free object");
	EXPECT(!(full->flags & PF_ON_PARTIAL), "a full slab is on no list");

	/* A free into the full slab freezes it for this thread (put_cpu_partial). */
	uint64_t cpf = stat_of(USLUB_STAT_CPU_PARTIAL_FREE);
	uslub_free(objs[0]);
	EXPECT(frozen(full) && full->owner == uslub_tls_thread, "refrozen for the freeing thread");
	EXPECT(on_thread_partial(full), "on the thread partial list");
	EXPECT(stat_of(USLUB_STAT_CPU_PARTIAL_FREE) == cpf + 1, "cpu_partial_free counted");
	/* The next free into it is local: no atomic, on the slab's local list. */
	uint64_t ff = stat_of(USLUB_STAT_FREE_FASTPATH);
	uslub_free(objs[1]);
	EXPECT(full->local_free == objs[1], "pushed on the local list");
	EXPECT(stat_of(USLUB_STAT_FREE_FASTPATH) == ff + 1, "free_fastpath counted");
	for (unsigned i = 2; i < n; i++)
		uslub_free(objs[i]);
	free(objs);
}

static void remote_frees(void)
{
	void *a = uslub_malloc(SIZE), *b = uslub_malloc(SIZE);
	struct page_desc *s = slab_of(a);
	EXPECT(slab_of(b) == s, "same slab");
	uint32_t inuse = w_inuse(atomic_load(&s->word));
	free_from_other_thread(a);
	uint64_t w = atomic_load(&s->word);
	EXPECT(w & W_FROZEN, "still frozen");
	EXPECT(decode(w_head(w), page_address(s)) == a, "object on the remote list");
	EXPECT(w_inuse(w) == inuse - 1, "inuse dropped by one");
	EXPECT(s->owner == uslub_tls_thread, "still ours");
	uslub_free(b);
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
		EXPECT(my_cpu()->nr_partial <= cache->cpu_partial_slabs, "partial list %u > %u",
		       my_cpu()->nr_partial, cache->cpu_partial_slabs);
	}
	EXPECT(stat_of(USLUB_STAT_CPU_PARTIAL_DRAIN) > drains, "the partial list was drained");
	unsigned on_node = 0;
	for (int i = 0; i < SLABS; i++)
		on_node += (slabs[i]->flags & PF_ON_PARTIAL) && !frozen(slabs[i]);
	EXPECT(on_node > 0, "drained slabs sit on the node partial list");
	EXPECT(cache->node[0].nr_partial >= on_node, "node count covers them");

	/* Empty them from another thread: unfrozen slabs go back to the page allocator
	 * once the node keeps min_partial. */
	uint64_t slabs_before = atomic_load(&cache->nr_slabs);
	for (int i = 0; i < SLABS; i++) {
		for (unsigned k = 1; k < counts[i]; k++)
			free_from_other_thread(objs[i][k]);
		free(objs[i]);
	}
	EXPECT(atomic_load(&cache->nr_slabs) < slabs_before, "empty slabs discarded: %lu -> %lu",
	       (unsigned long)slabs_before, (unsigned long)atomic_load(&cache->nr_slabs));
	EXPECT(cache->node[0].nr_partial >= cache->min_partial ||
		   cache->node[0].nr_partial <= (uint64_t)SLABS,
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
		EXPECT(s->kind == PAGE_SLAB, "object's slab still a slab");
	}
	EXPECT(held == 0, "%u slabs still name the exited thread", held);
	for (int i = 1; i < 2000; i += 2)
		uslub_free(h->objs[i]);
	free(h);
}

int main(void)
{
	uslub_free(uslub_malloc(1)); /* start-up and this thread's state */
	cls = uslub_size_to_class(SIZE);
	cache = &uslub_caches[cls];
	current_and_full();
	remote_frees();
	partial_bound_and_discard();
	thread_exit_flush();
	EXPECT(uslub_pages_check(0) == 0, "page allocator consistent at the end");
	return unit_summary("test_slab");
}
