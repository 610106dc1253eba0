/* numa_emu.h: what the libnuma stand-in (numa_emu.c) shows the tests.
 *
 * libnumaemu.so answers the libnuma calls uslub makes (numa_available, numa_max_node,
 * numa_distance, numa_node_of_cpu, mbind) for an emulated machine chosen by NUMA_EMU, and
 * places threads on its CPUs: sched_setaffinity(0, ...) moves the calling thread to the
 * lowest emulated CPU of the set, sched_getcpu reports it. Preloaded ahead of libuslub.so
 * (or of a test linked with the engine), its symbols win over libnuma's and glibc's, so
 * uslub's real discovery path reads the emulated topology.
 *
 *   NUMA_EMU=2  2 nodes, CPUs 0-3, CPU c on node c % 2, distances 10 / 21
 *   NUMA_EMU=4  4 nodes, CPUs 0-7, CPU c on node c % 4, a square: each node 16 from two
 *               neighbours and 22 from the node across (0-3 and 1-2)
 *   unset       a machine without NUMA (numa_available() < 0)
 *
 * mbind does not reach the kernel (the real machine has one node, which would refuse a
 * mask naming others): each call is recorded and succeeds. */
#ifndef USLUB_NUMA_EMU_H
#define USLUB_NUMA_EMU_H

#define NUMA_EMU_API __attribute__((visibility("default")))

struct numa_emu_bind {
	const void *addr;
	unsigned long len;
	int mode;
	unsigned flags;
	unsigned long maxnode;
	unsigned long mask; /* nodes 0-63 of the node mask */
	int wide;	    /* a bit set past node 63 */
};

/* The emulated machine: nodes and CPUs (0 nodes when NUMA_EMU is unset). */
NUMA_EMU_API unsigned numa_emu_nodes(void);
NUMA_EMU_API unsigned numa_emu_cpus(void);
/* The mbind calls so far, in call order. */
NUMA_EMU_API unsigned numa_emu_binds(const struct numa_emu_bind **out);
/* The node the latest mbind covering p bound it to: -1 when none covers p, -2 when that
 * mask does not name exactly one node. */
NUMA_EMU_API int numa_emu_bound_node(const void *p);

#endif
