/* The kernel change's own table, in user space: how many nodes get_any_partial looks at
 * per call, with the local node skipped (the fix) and without the skip, on one node and on
 * simulated nodes (USLUB_NUMA selects). Four threads in a ring allocate objects and hand
 * them to the next thread, which frees them: partial lists fill on one side and drain on
 * the other, so the slow path keeps searching. Prints one line: calls, nodes tried, ratio,
 * nodes tried again within one search (0 with the fix), remote slabs taken.
 *
 * On several real nodes (libnuma's, or an emulated machine: tests/numa_emu.h) thread i
 * runs on node i % nodes, pinned to that node's CPUs; simulated nodes place threads in
 * turn by themselves.
 *
 *   USLUB_NUMA=fake:4 build/tools/numa/uslub-partial-search
 *   USLUB_NUMA=fake:4,noskip build/tools/numa/uslub-partial-search
 *   LD_PRELOAD=build/tests/libnumaemu.so NUMA_EMU=4 build/tools/numa/uslub-partial-search */
#include "thread/thread.h"
#include "page/node.h"
#include "uslub.h"

#include <numa.h>
#include <pthread.h>
#include <sched.h>
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

/* Every CPU of the node, as libnuma reports them: the thread's state, made at its first
 * allocation, takes the node it runs on then. */
static void pin_to_node(unsigned node)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	int cpus = numa_num_configured_cpus();
	for (int c = 0; c < cpus && c < CPU_SETSIZE; c++)
		if (numa_node_of_cpu(c) == (int)node)
			CPU_SET(c, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		perror("uslub-partial-search: sched_setaffinity");
}

static void *worker(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg, next = (me + 1) % THREADS;
	if (uslub_topo.real_multi)
		pin_to_node(me % uslub_nr_nodes);
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
	uint64_t calls = 0, tried = 0, again = 0, remote = 0;
	for (unsigned n = 0; n < uslub_nr_nodes; n++) {
		calls += uslub_nodes[n].any_partial_calls;
		tried += uslub_nodes[n].any_partial_tried;
		again += uslub_nodes[n].any_partial_again;
		remote += uslub_nodes[n].remote_slabs;
	}
	printf("nodes %u calls %lu tried %lu ratio 1:%.2f again %lu remote_slabs %lu\n",
	       uslub_nr_nodes, (unsigned long)calls, (unsigned long)tried,
	       calls ? (double)tried / (double)calls : 0.0, (unsigned long)again,
	       (unsigned long)remote);
	return 0;
}
