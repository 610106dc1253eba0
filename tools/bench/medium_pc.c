/* medium_pc: producers and consumers of medium blocks. Each producer allocates messages of
 * a size uniform in [MIN, MAX) bytes (8-64 KiB by default), writes their first and last
 * bytes and 64 more, and passes them through a ring of 256 to its consumer, which checks
 * and frees them: every medium block is freed by a thread other than the one that made
 * it (network buffers, decoded frames, a work queue of documents). The rings spin with
 * sched_yield, so the figure is the allocator's and not a mutex's. How full a ring runs
 * depends on how the threads are scheduled, and so does the peak; LOCKSTEP 1 makes it
 * the same in every run: the producer fills the whole ring, the consumer empties it, and
 * only then does the producer go on. RING sets the ring's length (256 by default): in
 * lockstep, the size of each wave a producer builds and its consumer frees whole.
 *
 * Usage: medium_pc [MESSAGES [MIN MAX [PAIRS [LOCKSTEP [RING]]]]]   (defaults 1000000 8192
 *        65536 1 0 256; MESSAGES per producer) */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PAIRS = 8, MAX_RING = 1 << 20 };

static void *(*volatile alloc)(size_t) = malloc;
static void (*volatile release)(void *) = free;

static long messages = 1000000;
static int lockstep;
static size_t min_size = 8192, max_size = 65536;
static unsigned long ring_len = 256;

struct ring {
	_Alignas(64) atomic_ulong head;
	_Alignas(64) atomic_ulong tail;
	_Alignas(64) unsigned char **slot;
};
static struct ring rings[MAX_PAIRS];

static void put(struct ring *r, unsigned char *m)
{
	unsigned long t = atomic_load(&r->tail);
	/* In lockstep, a new round waits for the ring to be empty. */
	while (t - atomic_load(&r->head) >= ring_len ||
	       (lockstep && t % ring_len == 0 && atomic_load(&r->head) != t))
		sched_yield();
	r->slot[t % ring_len] = m;
	atomic_store(&r->tail, t + 1);
}

static unsigned char *get(struct ring *r)
{
	unsigned long h = atomic_load(&r->head);
	/* In lockstep, a round is taken once the ring is full (or the last one is in). */
	while (atomic_load(&r->tail) == h ||
	       (lockstep && h % ring_len == 0 && atomic_load(&r->tail) < h + ring_len &&
		atomic_load(&r->tail) < (unsigned long)messages))
		sched_yield();
	unsigned char *m = r->slot[h % ring_len];
	atomic_store(&r->head, h + 1);
	return m;
}

static void *producer(void *arg)
{
	struct ring *r = arg;
	uint64_t rng = (uint64_t)(r - rings) + 1;
	for (long k = 0; k < messages; k++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		size_t n = min_size + (size_t)(rng >> 33) % (max_size - min_size);
		unsigned char *m = alloc(n);
		if (!m) {
			fprintf(stderr, "medium_pc: out of memory\n");
			exit(1);
		}
		memcpy(m, &n, sizeof(n));
		memset(m + sizeof(n), (int)(k & 0xff), 64);
		m[n - 1] = (unsigned char)k;
		put(r, m);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct ring *r = arg;
	for (long k = 0; k < messages; k++) {
		unsigned char *m = get(r);
		size_t n;
		memcpy(&n, m, sizeof(n));
		if (n < min_size || n >= max_size || m[n - 1] != (unsigned char)k ||
		    m[sizeof(n)] != (unsigned char)k) {
			fprintf(stderr, "medium_pc: message %ld overwritten\n", k);
			exit(2);
		}
		release(m);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int pairs = 1;
	if (argc > 1)
		messages = atol(argv[1]);
	if (argc > 3) {
		min_size = (size_t)atol(argv[2]);
		max_size = (size_t)atol(argv[3]);
	}
	if (argc > 4)
		pairs = atoi(argv[4]);
	if (argc > 5)
		lockstep = atoi(argv[5]);
	if (argc > 6)
		ring_len = strtoul(argv[6], NULL, 10);
	if (messages < 1 || min_size < 2 * sizeof(size_t) + 64 || max_size <= min_size ||
	    pairs < 1 || pairs > MAX_PAIRS || ring_len < 1 || ring_len > MAX_RING) {
		fprintf(stderr, "usage: medium_pc [MESSAGES [MIN MAX [PAIRS [LOCKSTEP [RING]]]]] "
				"(MIN >= 80, PAIRS 1-8, LOCKSTEP 0 or 1, RING 1-1048576)\n");
		return 2;
	}
	for (int i = 0; i < pairs; i++)
		if (!(rings[i].slot = calloc(ring_len, sizeof(*rings[i].slot)))) {
			fprintf(stderr, "medium_pc: out of memory\n");
			return 1;
		}
	pthread_t p[MAX_PAIRS], c[MAX_PAIRS];
	for (int i = 0; i < pairs; i++) {
		pthread_create(&c[i], NULL, consumer, &rings[i]);
		pthread_create(&p[i], NULL, producer, &rings[i]);
	}
	for (int i = 0; i < pairs; i++) {
		pthread_join(p[i], NULL);
		pthread_join(c[i], NULL);
	}
	printf("medium_pc: ok: %d pairs, %ld messages each of %zu-%zu bytes%s\n", pairs, messages,
	       min_size, max_size, lockstep ? ", in lockstep" : "");
	return 0;
}
