/* prodcons: producer/consumer queues; every message is freed by a thread other than the
 * one that allocated it.
 *
 * PAIRS producers each feed one consumer through a bounded single-producer, single-
 * consumer ring (two atomic indexes, no lock, so the allocator and not a mutex is what
 * the queue's users wait on). A message is 16 B .. 4 KiB, filled by the producer; the
 * consumer checks it and frees it. Both sides sum the message keys, and the sums must
 * agree: a lost or duplicated message fails the run.
 *
 * Usage: prodcons [SCALE]   (messages per producer scale; 2 producers, 2 consumers)
 *        prodcons1 [SCALE]  (the same with 1 producer and 1 consumer) */
#include <sched.h>
#include <stdatomic.h>

#include "workload.h"

/* prodcons1 is built with PAIRS 1: one thread allocates, one frees. */
#ifndef PAIRS
#define PAIRS 2
#endif

enum {
	MESSAGES = 8000000,
	RING = 1024, /* a power of two */
	MIN_SIZE = 16,
	MAX_SIZE = 4096,
};

struct msg {
	size_t size;
	uint64_t key;
	unsigned char body[];
};

struct queue {
	_Alignas(64) atomic_ulong head; /* next to take; written by the consumer */
	_Alignas(64) atomic_ulong tail; /* next to fill; written by the producer */
	_Alignas(64) struct msg *slot[RING];
	uint64_t produced_sum, consumed_sum;
	unsigned id;
};

static struct queue queues[PAIRS];
static uint64_t messages;

static void *produce(void *arg)
{
	struct queue *q = arg;
	uint64_t rng = wl_seed(q->id), sum = 0;
	for (uint64_t i = 0; i < messages; i++) {
		size_t size = wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
		struct msg *m = wl_malloc(sizeof(*m) + size);
		m->size = size;
		m->key = ((uint64_t)q->id << 48) | i;
		wl_fill(m->body, size, m->key);
		sum += m->key;
		unsigned long t = atomic_load_explicit(&q->tail, memory_order_relaxed);
		while (t - atomic_load_explicit(&q->head, memory_order_acquire) == RING)
			sched_yield();
		q->slot[t % RING] = m;
		atomic_store_explicit(&q->tail, t + 1, memory_order_release);
	}
	q->produced_sum = sum;
	return NULL;
}

static void *consume(void *arg)
{
	struct queue *q = arg;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < messages; i++) {
		unsigned long h = atomic_load_explicit(&q->head, memory_order_relaxed);
		while (atomic_load_explicit(&q->tail, memory_order_acquire) == h)
			sched_yield();
		struct msg *m = q->slot[h % RING];
		atomic_store_explicit(&q->head, h + 1, memory_order_release);
		wl_check(m->body, m->size, m->key);
		sum += m->key;
		free(m);
	}
	q->consumed_sum = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	messages = wl_scaled(MESSAGES, wl_scale(argc, argv));
	pthread_t p[PAIRS], c[PAIRS];
	for (unsigned i = 0; i < PAIRS; i++) {
		queues[i].id = i;
		c[i] = wl_spawn(consume, &queues[i]);
		p[i] = wl_spawn(produce, &queues[i]);
	}
	for (unsigned i = 0; i < PAIRS; i++) {
		wl_join(p[i]);
		wl_join(c[i]);
		if (queues[i].produced_sum != queues[i].consumed_sum)
			wl_fail("queue %u: keys sent sum to %" PRIu64 ", received %" PRIu64, i,
				queues[i].produced_sum, queues[i].consumed_sum);
	}
	return wl_done("%" PRIu64 " messages through %d queues", messages * PAIRS, PAIRS);
}
