/* The kernel change's own table, in user space: how many nodes get_any_partial looks at
 * per call, with the local node skipped (the fix) and without the skip, on one node and on
 * simulated nodes (USLUB_NUMA selects). Four threads in a ring allocate objects and hand
 * them to the next thread, which frees them: partial lists fill on one side and drain on
 * the other, so the slow path keeps searching. Prints one line: calls, nodes tried, ratio.
 *
 *   USLUB_NUMA=fake:4 build/tools/numa/uslub-partial-search
 *   USLUB_NUMA=fake:4,noskip build/tools/numa/uslub-partial-search */
#include "internal.h"
#include "uslub.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define ROUNDS	4000
#define BATCH	64
#define RING	(BATCH * 8)

struct inbox {
	pthread_mutex_t lock;
	void *slot[RING];
	unsigned head, tail;
};

static struct inbox boxes[THREADS];

static void *worker(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg, next = (me + 1) % THREADS;
	unsigned seed = me * 2654435761u + 1;
	for (int r = 0; r < ROUNDS; r++) {
		void *mine[BATCH];
		for (int i = 0; i < BATCH; i++) {
			seed = seed * 1103515245 + 12345;
			mine[i] = uslub_malloc(64 + (seed >> 16) % 448);
		}
		pthread_mutex_lock(&boxes[next].lock);
		for (int i = 0; i < BATCH; i++) {
			if (boxes[next].tail - boxes[next].head < RING)
				boxes[next].slot[boxes[next].tail++ % RING] = mine[i];
			else
				uslub_free(mine[i]);
		}
		pthread_mutex_unlock(&boxes[next].lock);
		pthread_mutex_lock(&boxes[me].lock);
		while (boxes[me].head != boxes[me].tail)
			uslub_free(boxes[me].slot[boxes[me].head++ % RING]);
		pthread_mutex_unlock(&boxes[me].lock);
	}
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++)
		pthread_mutex_init(&boxes[i].lock, NULL);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < THREADS; i++)
		while (boxes[i].head != boxes[i].tail)
			uslub_free(boxes[i].slot[boxes[i].head++ % RING]);
	uint64_t calls = 0, tried = 0, remote = 0;
	for (unsigned n = 0; n < uslub_nr_nodes; n++) {
		calls += uslub_nodes[n].any_partial_calls;
		tried += uslub_nodes[n].any_partial_tried;
		remote += uslub_nodes[n].remote_slabs;
	}
	printf("nodes %u calls %lu tried %lu ratio 1:%.2f remote_slabs %lu\n", uslub_nr_nodes,
	       (unsigned long)calls, (unsigned long)tried,
	       calls ? (double)tried / (double)calls : 0.0, (unsigned long)remote);
	return 0;
}
