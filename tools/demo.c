/* uslub-demo: the built-in workload of `tools/uslub run`.
 *
 * A handful of threads allocate and free a mix of sizes through the ordinary malloc family,
 * so under LD_PRELOAD=libuslub.so it exercises the small caches (kmalloc-16 .. kmalloc-8k),
 * large blocks, realloc growth and frees from a thread other than the allocating one.
 *
 * Every block is filled with a pattern derived from its address and size, and the pattern
 * is checked before the block is freed (and before realloc's copy is trusted), so an
 * allocator that hands out one object twice, or lets a free corrupt a live neighbour, is
 * caught rather than just timed.
 *
 * Usage: uslub-demo [THREADS [OPS_PER_THREAD]]   (defaults: 4 threads, 150000 operations)
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_THREADS 4
#define DEFAULT_OPS	150000
#define SLOTS		256 /* live objects a thread keeps at a time */
#define BATCH		64  /* objects handed over per lock of the peer's queue */
#define SMALL_MIN	16
#define SMALL_MAX	8192
#define LARGE_MIN	(16u << 10)
#define LARGE_MAX	(1u << 20)

struct object {
	unsigned char *p;
	size_t size;
};

/* A batch of objects on its way to another thread, which frees them. */
struct batch {
	struct batch *next;
	size_t n;
	struct object obj[BATCH];
};

struct queue {
	pthread_mutex_t lock;
	struct batch *head;
};

struct worker {
	pthread_t tid;
	unsigned idx;
	uint64_t rng;
	struct object slot[SLOTS];
	struct batch *outgoing; /* being filled for the next thread */
	uint64_t allocs;
	uint64_t remote_frees; /* objects this thread freed that another thread allocated */
};

static unsigned nthreads = DEFAULT_THREADS;
static unsigned long ops_per_thread = DEFAULT_OPS;
static struct queue *queues;
static pthread_barrier_t done_producing;

static void die(const char *what, const void *p, size_t size, size_t off)
{
	fprintf(stderr, "uslub-demo: %s: block %p size %zu, first bad byte at offset %zu\n", what,
		p, size, off);
	exit(1);
}

static void *xalloc(void *p, size_t size)
{
	if (!p) {
		fprintf(stderr, "uslub-demo: out of memory allocating %zu bytes: %s\n", size,
			strerror(errno));
		exit(1);
	}
	return p;
}

/* xorshift64*: cheap, deterministic per thread. */
static uint64_t rnd(struct worker *w)
{
	w->rng ^= w->rng >> 12;
	w->rng ^= w->rng << 25;
	w->rng ^= w->rng >> 27;
	return w->rng * 0x2545F4914F6CDD1DULL;
}

/* The pattern of a block depends on where it lives and how big it is. */
static uint64_t pattern_seed(uintptr_t addr, size_t size)
{
	uint64_t x = (uint64_t)addr ^ ((uint64_t)size << 40);

	x ^= x >> 33;
	x *= 0xFF51AFD7ED558CCDULL;
	x ^= x >> 33;
	return x | 1;
}

static uint64_t pattern_word(uint64_t seed, size_t i)
{
	return seed + i * 0x9E3779B97F4A7C15ULL;
}

/* Byte i of a block's pattern is byte i % 8 of word i / 8. */
static void fill(unsigned char *p, size_t size)
{
	uint64_t seed = pattern_seed((uintptr_t)p, size);
	size_t i;

	for (i = 0; i + 8 <= size; i += 8) {
		uint64_t v = pattern_word(seed, i / 8);
		memcpy(p + i, &v, 8);
	}
	if (i < size) {
		uint64_t v = pattern_word(seed, i / 8);
		memcpy(p + i, &v, size - i);
	}
}

/* Check that data holds the pattern of a block of this size whose seed was seed. */
static void check(const unsigned char *data, uint64_t seed, size_t size, const char *what)
{
	size_t i;

	for (i = 0; i + 8 <= size; i += 8) {
		uint64_t v;

		memcpy(&v, data + i, 8);
		if (v != pattern_word(seed, i / 8))
			break;
	}
	for (; i < size; i++) {
		uint64_t v = pattern_word(seed, i / 8);

		if (data[i] != ((const unsigned char *)&v)[i % 8])
			die(what, data, size, i);
	}
}

/* Mostly small sizes, skewed toward the small end; now and then a large block. */
static size_t pick_size(struct worker *w)
{
	uint64_t r = rnd(w);

	if (r % 64 == 0) {
		/* LARGE_MIN .. LARGE_MAX, about uniform in the logarithm */
		size_t base = (size_t)LARGE_MIN << (unsigned)(r >> 8) % 6;
		return base + (size_t)(r >> 16) % (base + 1);
	}
	unsigned a = (unsigned)(r >> 8) % 10, b = (unsigned)(r >> 16) % 10;
	/* the smaller of two draws, so the small classes are the most likely */
	size_t base = (size_t)SMALL_MIN << (a < b ? a : b);
	size_t size = base + (size_t)(r >> 24) % base;
	return size > SMALL_MAX ? SMALL_MAX : size;
}

static void free_checked(struct object o)
{
	check(o.p, pattern_seed((uintptr_t)o.p, o.size), o.size, "pattern broken before free");
	free(o.p);
}

static void push_batch(struct worker *w)
{
	struct batch *b = w->outgoing;
	struct queue *q = &queues[(w->idx + 1) % nthreads];

	if (!b || !b->n)
		return;
	pthread_mutex_lock(&q->lock);
	b->next = q->head;
	q->head = b;
	pthread_mutex_unlock(&q->lock);
	w->outgoing = NULL;
}

static void hand_over(struct worker *w, struct object o)
{
	if (!w->outgoing) {
		w->outgoing = xalloc(malloc(sizeof(*w->outgoing)), sizeof(*w->outgoing));
		w->outgoing->n = 0;
	}
	w->outgoing->obj[w->outgoing->n++] = o;
	if (w->outgoing->n == BATCH)
		push_batch(w);
}

/* Free what other threads handed to this one; the batches themselves are remote too. */
static void drain(struct worker *w)
{
	struct queue *q = &queues[w->idx];
	struct batch *b;

	pthread_mutex_lock(&q->lock);
	b = q->head;
	q->head = NULL;
	pthread_mutex_unlock(&q->lock);

	while (b) {
		struct batch *next = b->next;
		for (size_t i = 0; i < b->n; i++)
			free_checked(b->obj[i]);
		w->remote_frees += b->n + 1;
		free(b);
		b = next;
	}
}

static struct object alloc_object(struct worker *w)
{
	struct object o = {.size = pick_size(w)};

	if (rnd(w) % 16 == 0) {
		o.p = xalloc(calloc(1, o.size), o.size);
		for (size_t i = 0; i < o.size; i++)
			if (o.p[i])
				die("calloc returned non-zero memory", o.p, o.size, i);
	} else {
		o.p = xalloc(malloc(o.size), o.size);
	}
	w->allocs++;
	fill(o.p, o.size);
	return o;
}

/* Grow by 1.25x to 2x; the old contents must arrive intact at the new address. */
static void grow_object(struct worker *w, struct object *o)
{
	size_t size = o->size + o->size / 4 + (size_t)rnd(w) % (o->size * 3 / 4 + 1);
	uint64_t old_seed = pattern_seed((uintptr_t)o->p, o->size);
	unsigned char *p;

	if (size > LARGE_MAX)
		size = LARGE_MAX;
	if (size <= o->size)
		return;
	check(o->p, old_seed, o->size, "pattern broken before realloc");
	p = xalloc(realloc(o->p, size), size);
	check(p, old_seed, o->size, "realloc lost the old contents");
	w->allocs++;
	o->p = p;
	o->size = size;
	fill(o->p, o->size);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned long op = 0; op < ops_per_thread; op++) {
		struct object *s = &w->slot[rnd(w) % SLOTS];
		uint64_t r = rnd(w);

		if (s->p && r % 16 == 0) {
			grow_object(w, s);
			continue;
		}
		if (s->p) {
			if (r & 0x100 && nthreads > 1)
				hand_over(w, *s);
			else
				free_checked(*s);
		}
		*s = alloc_object(w);
		if (op % 256 == 0)
			drain(w);
	}
	push_batch(w);

	/* Everything handed over is in a queue now: drain ours a last time. */
	pthread_barrier_wait(&done_producing);
	drain(w);
	for (size_t i = 0; i < SLOTS; i++)
		if (w->slot[i].p)
			free_checked(w->slot[i]);
	return NULL;
}

static unsigned long parse_arg(const char *s, unsigned long max, const char *name)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v == 0 || v > max) {
		fprintf(stderr, "uslub-demo: bad %s '%s' (1..%lu)\n", name, s, max);
		fprintf(stderr, "usage: uslub-demo [THREADS [OPS_PER_THREAD]]\n");
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct worker *workers;
	uint64_t allocs = 0, remote_frees = 0;
	int err;

	if (argc > 3) {
		fprintf(stderr, "usage: uslub-demo [THREADS [OPS_PER_THREAD]]\n");
		return 2;
	}
	if (argc > 1)
		nthreads = (unsigned)parse_arg(argv[1], 1024, "thread count");
	if (argc > 2)
		ops_per_thread = parse_arg(argv[2], 1000000000UL, "operation count");

	queues = xalloc(calloc(nthreads, sizeof(*queues)), nthreads * sizeof(*queues));
	workers = xalloc(calloc(nthreads, sizeof(*workers)), nthreads * sizeof(*workers));
	pthread_barrier_init(&done_producing, NULL, nthreads);

	for (unsigned i = 0; i < nthreads; i++) {
		pthread_mutex_init(&queues[i].lock, NULL);
		workers[i].idx = i;
		workers[i].rng = 0x9E3779B97F4A7C15ULL * (i + 1);
	}
	for (unsigned i = 0; i < nthreads; i++) {
		err = pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]);
		if (err) {
			fprintf(stderr, "uslub-demo: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(workers[i].tid, NULL);
		allocs += workers[i].allocs;
		remote_frees += workers[i].remote_frees;
	}

	for (unsigned i = 0; i < nthreads; i++)
		pthread_mutex_destroy(&queues[i].lock);
	pthread_barrier_destroy(&done_producing);
	free(workers);
	free(queues);

	printf("uslub-demo: %u threads, %" PRIu64 " allocations, %" PRIu64
	       " cross-thread frees, all patterns intact\n",
	       nthreads, allocs, remote_frees);
	return 0;
}
