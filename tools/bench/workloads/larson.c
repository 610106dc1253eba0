/* larson: a server whose objects are freed by threads other than the ones that made them.
 *
 * After Larson and Krishnan's benchmark (as shipped with Hoard and mimalloc-bench): each of
 * THREADS workers holds a table of SLOTS live objects and, again and again, frees a random
 * one and puts a new one of random size (16 .. 1 KiB) in its place. Larson hands a table to
 * a new thread each round; here the tables rotate among the workers at a barrier, which
 * makes the same cross-thread frees without timing thread creation (thread_churn does that).
 * So after the first round nearly every free is of an object another thread allocated.
 *
 * Usage: larson [SCALE]   (rounds scale; 4 threads, 4000 slots each) */
#include "workload.h"

/* larson_sized: the same server written in C++ terms - operator new and the sized operator
 * delete (C++14), as a C++ program compiled with -fsized-deallocation calls them; the
 * allocator's own operators if it exports them, else libstdc++'s over malloc/free. */
#ifdef SIZED
void *_Znwm(size_t size);	    /* operator new(std::size_t) */
void _ZdlPvm(void *p, size_t size); /* operator delete(void *, std::size_t) */
#define OBJ_NEW(n)	 _Znwm(n)
#define OBJ_DELETE(p, n) _ZdlPvm(p, n)
#else
#define OBJ_NEW(n)	 wl_malloc(n)
#define OBJ_DELETE(p, n) free(p)
#endif

enum {
	THREADS = 4,
	SLOTS = 4000,
	ROUNDS = 120,
	OPS_PER_ROUND = 60000,
	MIN_SIZE = 16,
	MAX_SIZE = 1024,
};

struct slot {
	void *p;
	size_t size;
	uint64_t key;
};

struct worker {
	unsigned id;
	uint64_t rng, serial, remote_frees;
};

static struct slot tables[THREADS][SLOTS];
static struct worker workers[THREADS];
static pthread_barrier_t barrier;
static uint64_t rounds;

/* Which worker filled each table last: a free by anyone else is a remote free. */
static unsigned filled_by[THREADS];

static void *work(void *arg)
{
	struct worker *w = arg;
	for (uint64_t r = 0; r < rounds; r++) {
		unsigned t = (unsigned)((w->id + r) % THREADS);
		struct slot *table = tables[t];
		if (filled_by[t] != w->id)
			w->remote_frees += OPS_PER_ROUND;
		for (unsigned i = 0; i < OPS_PER_ROUND; i++) {
			struct slot *s = &table[wl_rand(&w->rng) % SLOTS];
			wl_check(s->p, s->size, s->key);
			OBJ_DELETE(s->p, s->size);
			s->size = wl_range(&w->rng, MIN_SIZE, MAX_SIZE);
			s->key = ((uint64_t)w->id << 48) | w->serial++;
			s->p = OBJ_NEW(s->size);
			wl_check_aligned(s->p, s->size);
			wl_fill(s->p, s->size, s->key);
		}
		pthread_barrier_wait(&barrier);
		filled_by[t] = w->id;
		pthread_barrier_wait(&barrier);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	rounds = wl_scaled(ROUNDS, wl_scale(argc, argv));
	uint64_t rng = wl_seed(0);
	for (unsigned t = 0; t < THREADS; t++) {
		filled_by[t] = t;
		for (unsigned i = 0; i < SLOTS; i++) {
			struct slot *s = &tables[t][i];
			s->size = wl_range(&rng, MIN_SIZE, MAX_SIZE);
			s->key = ((uint64_t)THREADS << 48) | ((uint64_t)t * SLOTS + i);
			s->p = OBJ_NEW(s->size);
			wl_fill(s->p, s->size, s->key);
		}
	}
	pthread_barrier_init(&barrier, NULL, THREADS);
	pthread_t tid[THREADS];
	for (unsigned t = 0; t < THREADS; t++) {
		workers[t] = (struct worker){.id = t, .rng = wl_seed(t + 1)};
		tid[t] = wl_spawn(work, &workers[t]);
	}
	uint64_t ops = 0, remote = 0;
	for (unsigned t = 0; t < THREADS; t++) {
		wl_join(tid[t]);
		ops += workers[t].serial;
		remote += workers[t].remote_frees;
	}
	for (unsigned t = 0; t < THREADS; t++)
		for (unsigned i = 0; i < SLOTS; i++) {
			wl_check(tables[t][i].p, tables[t][i].size, tables[t][i].key);
			OBJ_DELETE(tables[t][i].p, tables[t][i].size);
		}
	if (ops != rounds * THREADS * OPS_PER_ROUND)
		wl_fail("%" PRIu64 " operations, expected %" PRIu64, ops,
			rounds * THREADS * OPS_PER_ROUND);
	return wl_done("%" PRIu64 " replacements, about %" PRIu64
		       " by a thread that did not fill the table",
		       ops, remote);
}
