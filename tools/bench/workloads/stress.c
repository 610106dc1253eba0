/* stress: the test suite's stress pattern, for any allocator.
 *
 * tests/test_stress.c checks uslub's own counters, so it runs only under uslub; this is
 * the same shape with nothing but the malloc family. THREADS workers each keep a table
 * of SLOTS objects; each operation picks a slot: an empty one gets a new object, a full
 * one is checked and then freed, grown or shrunk with realloc, or sent to the next
 * worker's inbox (a ring behind a mutex), whose owner checks and frees it. Sizes are
 * 1 B .. 16 KiB, mostly small, with one in 512 between 64 KiB and 2 MiB.
 *
 * Usage: stress [SCALE]   (operations per thread scale; 4 threads) */
#include "workload.h"

enum {
	THREADS = 4,
	SLOTS = 512,
	OPS = 3000000,
	RING = 4096,
	DRAIN_EVERY = 64,
};

struct obj {
	void *p;
	size_t size;
	uint64_t key;
};

struct worker {
	unsigned id;
	uint64_t rng, serial, sent, received;
	pthread_mutex_t lock;
	unsigned head, count;
	struct obj inbox[RING];
	struct obj taken[RING];
	struct obj slot[SLOTS];
};

static struct worker workers[THREADS];
static uint64_t ops;
static pthread_barrier_t barrier;

static size_t pick_size(uint64_t *rng)
{
	uint64_t r = wl_rand(rng);
	if (r % 512 == 0)
		return wl_log_range(rng, 64 * WL_KIB, 2 * WL_MIB);
	if (r % 8 == 1)
		return wl_log_range(rng, 1024, 16 * WL_KIB);
	return wl_range(rng, 1, 1024);
}

static void drain(struct worker *w)
{
	pthread_mutex_lock(&w->lock);
	unsigned n = w->count;
	for (unsigned i = 0; i < n; i++)
		w->taken[i] = w->inbox[(w->head + i) % RING];
	w->head = (w->head + n) % RING;
	w->count = 0;
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < n; i++) {
		wl_check(w->taken[i].p, w->taken[i].size, w->taken[i].key);
		free(w->taken[i].p);
	}
	w->received += n;
}

/* Returns 0 when the peer's inbox is full; the sender then frees the object itself. */
static int send(struct worker *to, struct obj o)
{
	pthread_mutex_lock(&to->lock);
	int ok = to->count < RING;
	if (ok)
		to->inbox[(to->head + to->count++) % RING] = o;
	pthread_mutex_unlock(&to->lock);
	return ok;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct worker *next = &workers[(w->id + 1) % THREADS];
	for (uint64_t i = 0; i < ops; i++) {
		if (i % DRAIN_EVERY == 0)
			drain(w);
		struct obj *s = &w->slot[wl_rand(&w->rng) % SLOTS];
		if (s->p == NULL) {
			s->size = pick_size(&w->rng);
			s->key = ((uint64_t)w->id << 48) | w->serial++;
			s->p = wl_malloc(s->size);
			wl_check_aligned(s->p, s->size);
			wl_fill(s->p, s->size, s->key);
			continue;
		}
		wl_check(s->p, s->size, s->key);
		switch (wl_rand(&w->rng) % 4) {
		case 0:
			free(s->p);
			s->p = NULL;
			break;
		case 1: {
			/* realloc must carry the kept bytes over: compare both ends of them */
			size_t n = pick_size(&w->rng);
			size_t kept = n < s->size ? n : s->size;
			size_t tail = kept < 8 ? 0 : kept - 8;
			unsigned char head[8], end[8];
			memcpy(head, s->p, kept < 8 ? kept : 8);
			memcpy(end, (unsigned char *)s->p + tail, kept - tail);
			s->p = wl_realloc(s->p, n);
			if (memcmp(head, s->p, kept < 8 ? kept : 8) != 0 ||
			    memcmp(end, (unsigned char *)s->p + tail, kept - tail) != 0)
				wl_fail("realloc(%zu -> %zu) lost the contents", s->size, n);
			wl_check_aligned(s->p, n);
			s->size = n;
			s->key = ((uint64_t)w->id << 48) | w->serial++;
			wl_fill(s->p, s->size, s->key);
			break;
		}
		default:
			if (send(next, *s))
				w->sent++;
			else
				free(s->p);
			s->p = NULL;
		}
	}
	pthread_barrier_wait(&barrier);
	drain(w);
	for (unsigned i = 0; i < SLOTS; i++)
		if (w->slot[i].p != NULL) {
			wl_check(w->slot[i].p, w->slot[i].size, w->slot[i].key);
			free(w->slot[i].p);
		}
	return NULL;
}

int main(int argc, char **argv)
{
	ops = wl_scaled(OPS, wl_scale(argc, argv));
	pthread_barrier_init(&barrier, NULL, THREADS);
	pthread_t tid[THREADS];
	for (unsigned t = 0; t < THREADS; t++) {
		workers[t].id = t;
		workers[t].rng = wl_seed(t);
		pthread_mutex_init(&workers[t].lock, NULL);
	}
	for (unsigned t = 0; t < THREADS; t++)
		tid[t] = wl_spawn(work, &workers[t]);
	uint64_t sent = 0, received = 0, allocs = 0;
	for (unsigned t = 0; t < THREADS; t++) {
		wl_join(tid[t]);
		sent += workers[t].sent;
		received += workers[t].received;
		allocs += workers[t].serial;
	}
	if (sent != received)
		wl_fail("%" PRIu64 " objects sent, %" PRIu64 " received", sent, received);
	return wl_done("%" PRIu64 " allocations or reallocations, %" PRIu64
		       " freed by another thread",
		       allocs, received);
}
