/* Whose frees a thread reuses. Two threads of one node have barns of their own (thread.h,
 * BARN_SHARDS). A thread whose slab of a cache still has free objects refills its sheaf
 * from them, not from the other thread's barn: objects of two threads mixed in one cache
 * line make every touch of one a cache-line transfer while both run. A thread with nothing
 * of its own left (a producer whose consumer frees) takes the other barn's objects before
 * it makes a new slab.
 *
 * Thread B takes a slab of kmalloc-96; thread A allocates and frees 240 objects, which end
 * in its sheaf and its barn; B then allocates what its slab still holds (none of A's), and
 * on past it (A's, from A's barn, and no new slab). */
#include "thread/thread.h"
#include "slab/slab.h"
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#define SIZE	 96
#define A_FREES	 240
#define B_BEYOND 200

static unsigned cls;
static void *a_objects[A_FREES];
static unsigned a_shard, b_shard;
static sem_t a_go, a_done;

static bool freed_by_a(void *p)
{
	for (unsigned i = 0; i < A_FREES; i++)
		if (a_objects[i] == p)
			return true;
	return false;
}

static struct barn *barn_of_shard(unsigned shard)
{
	struct barn *b = uslub_barns[uslub_tls_thread->node * BARN_SHARDS + shard];
	return b ? &b[cls] : NULL;
}

static void *thread_a(void *arg)
{
	(void)arg;
	sem_wait(&a_go);
	for (unsigned i = 0; i < A_FREES; i++)
		a_objects[i] = uslub_malloc(SIZE);
	a_shard = uslub_tls_thread->barn_shard;
	for (unsigned i = 0; i < A_FREES; i++)
		uslub_free(a_objects[i]);
	sem_post(&a_done);
	return NULL;
}

static void *thread_b(void *arg)
{
	(void)arg;
	struct cache_cpu *cc = NULL;
	void *held[512];
	unsigned n = 0;
	/* Early objects, then the sheaf's first refills, until B holds a slab of its own. */
	while (n < 64) {
		held[n++] = uslub_malloc(SIZE);
		cc = &uslub_tls_thread->cpu[cls];
		if (cc->slab)
			break;
	}
	CHECKF(cc && cc->slab, "thread B holds a slab of kmalloc-96 after %u objects", n);
	b_shard = uslub_tls_thread->barn_shard;
	struct page_desc *s = cc->slab;
	unsigned left = uslub_slab_capacity(&uslub_caches[cls], s) - s->objects;
	/* A's frees wait in A's barn while B still has objects of its own. */
	sem_post(&a_go);
	sem_wait(&a_done);
	CHECKF(a_shard != b_shard, "A and B have barns of their own (shards %u, %u)", a_shard,
	       b_shard);
	struct barn *a_barn = barn_of_shard(a_shard);
	unsigned in_a_barn = a_barn ? a_barn->count : 0;
	CHECKF(in_a_barn > 0, "A's frees reached its barn (%u)", in_a_barn);
	if (!in_a_barn)
		return NULL; /* nothing below can be asked */
	/* B's own: its sheaf, the slab's objects on B's freelist, and those never carved. */
	unsigned own = cc->sheaf_count + left, mixed = 0;
	for (void *p = cc->freelist; p && own < 512; p = link_get(p))
		own++;
	for (unsigned i = 0; i < own && n < 512; i++) {
		held[n] = uslub_malloc(SIZE);
		mixed += freed_by_a(held[n++]);
	}
	CHECKF(mixed == 0, "B's next %u objects come from its own slab, none of A's (%u were A's)",
	       own, mixed);
	CHECKF(a_barn->count == in_a_barn, "A's barn untouched (%u of %u)", a_barn->count,
	       in_a_barn);
	/* B's slab is spent: A's barn before a new slab. */
	uint64_t slabs = cc->stat[USLUB_STAT_ALLOC_SLAB];
	unsigned from_a = 0, beyond = 0;
	for (; beyond < B_BEYOND && n < 512; beyond++) {
		held[n] = uslub_malloc(SIZE);
		from_a += freed_by_a(held[n++]);
	}
	CHECKF(from_a > 0 && a_barn->count < in_a_barn,
	       "then A's frees, out of A's barn (%u of %u objects; barn %u -> %u)", from_a, beyond,
	       in_a_barn, a_barn->count);
	CHECKF(cc->stat[USLUB_STAT_ALLOC_SLAB] == slabs || a_barn->count == 0,
	       "no new slab while A's barn had objects (%" PRIu64 " new)",
	       cc->stat[USLUB_STAT_ALLOC_SLAB] - slabs);
	while (n)
		uslub_free(held[--n]);
	return NULL;
}

int main(void)
{
	uslub_free(uslub_malloc(1)); /* start-up and this thread's state */
	cls = uslub_size_to_class(SIZE);
	if (uslub_caches[cls].debug || !uslub_caches[cls].sheaf_capacity) {
		printf("test_barn_owner: skipped, a debug cache (USLUB_DEBUG, a sanitizer) or "
		       "USLUB_SHEAVES=0 has no sheaves\n");
		return 0;
	}
	sem_init(&a_go, 0, 0);
	sem_init(&a_done, 0, 0);
	pthread_t a, b;
	/* Both on this thread's CPU, so on one node: the other barns a thread looks in are
	 * its node's. They take turns (the semaphores), so one CPU is enough. */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	cpu_set_t one;
	CPU_ZERO(&one);
	int cpu = sched_getcpu();
	CPU_SET(cpu < 0 ? 0 : cpu, &one);
	pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
	/* Checked once both are joined: the check counters are the test's, not atomic. */
	int made_b = pthread_create(&b, &attr, thread_b, NULL);
	int made_a = made_b ? -1 : pthread_create(&a, &attr, thread_a, NULL);
	pthread_attr_destroy(&attr);
	if (!made_a)
		pthread_join(a, NULL);
	else if (!made_b)
		sem_post(&a_done); /* B must not wait for A for ever: its checks then fail */
	if (!made_b)
		pthread_join(b, NULL);
	CHECKF(made_a == 0 && made_b == 0, "threads made (%d, %d)", made_a, made_b);
	return tu_summary("test_barn_owner");
}
