/* NUMA nodes: the topology (libnuma's, none, or simulated), the node a thread allocates
 * on, and the order in which get_any_partial visits the other nodes. */
#ifndef USLUB_NODE_H
#define USLUB_NODE_H

#include <stdbool.h>

#pragma GCC visibility push(hidden)

#define NODE_CPUS 1024

struct uslub_topology {
	unsigned nr_nodes;
	bool fake;	   /* simulated nodes (USLUB_NUMA=fake:N) */
	bool real_multi;   /* several real nodes: regions are bound with mbind */
	bool round_robin;  /* more simulated nodes than CPUs: threads placed in turn */
	bool search_local; /* ",noskip": get_any_partial also visits the local node and
			    * runs on one node, as before the kernel's fix (for comparison) */
	unsigned char distance[16][16];
	/* For each node, the others by increasing distance (the local node excluded). */
	unsigned char order[16][16];
	unsigned char cpu_node[NODE_CPUS];
};

extern struct uslub_topology uslub_topo;

/* From USLUB_NUMA at start-up: "off", "fake:N[,noskip]" or "auto[,noskip]" (one node
 * until uslub_node_discover reads libnuma's topology, outside any malloc). */
void uslub_node_init(void);
void uslub_node_discover(void);
/* The node the calling thread runs on now (sched_getcpu, a vDSO call, no syscall). */
unsigned uslub_node_current(void);

#pragma GCC visibility pop

#endif
