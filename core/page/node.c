/* NUMA topology.
 *
 * USLUB_NUMA=auto reads libnuma's nodes, CPU-to-node map and distance table; off treats
 * the machine as one node; fake:N splits it into N simulated nodes with a distance table
 * of their own (10 local, 20 to a ring neighbour, 10 more per further step), so every
 * multi-node path runs on a one-node machine. With more simulated nodes than CPUs, threads
 * are placed on nodes in turn as they start: a simulated placement, documented as such.
 * The auto path itself runs in the tests on emulated machines: tests/numa_emu.c stands in
 * for libnuma (and for sched_getcpu and mbind) ahead of the real ones.
 *
 * libnuma allocates with malloc in its own start-up and in some queries, so nothing here
 * calls it from inside an allocation: start-up takes one node, and the library's
 * constructor (not malloc) switches to the real topology once the allocator is ready.
 *
 * libnuma is loaded there, not linked: a linked libnuma's own constructor runs before
 * anything else in every program that preloads uslub, allocates, and exits the process
 * ("Out of memory allocating bitmask") when that fails - under a tight `ulimit -v` no
 * program started. Loaded by the constructor, once uslub's heap is up, it can only fail
 * to load (the machine is then one node), and a program that never needs it pays
 * nothing - nor does a one-node machine, which the kernel's list of online nodes shows.
 * Symbols already in the process come first (a program linked with libnuma, or a test's
 * stand-in), so every caller in the process sees one libnuma. */
#include "page/node.h"

#include "hooks.h"
#include "page/page.h"
#include "os/options.h"
#include "os/os.h"
#include "os/print.h"

#include <dlfcn.h>
#include <sched.h>
#include <string.h>

struct uslub_topology uslub_topo = {.nr_nodes = 1};
unsigned uslub_nr_nodes = 1;
unsigned uslub_nr_arenas = 1;

static _Atomic unsigned placement;
static bool auto_mode;

static void build_order(void)
{
	unsigned n = uslub_topo.nr_nodes;
	for (unsigned i = 0; i < n; i++) {
		unsigned k = 0;
		for (unsigned j = 0; j < n; j++)
			if (j != i)
				uslub_topo.order[i][k++] = (unsigned char)j;
		/* Insertion sort by distance; ties keep node number order. */
		for (unsigned a = 1; a < k; a++)
			for (unsigned b = a;
			     b > 0 && uslub_topo.distance[i][uslub_topo.order[i][b]] <
					  uslub_topo.distance[i][uslub_topo.order[i][b - 1]];
			     b--) {
				unsigned char t = uslub_topo.order[i][b];
				uslub_topo.order[i][b] = uslub_topo.order[i][b - 1];
				uslub_topo.order[i][b - 1] = t;
			}
	}
}

static void set_fake(unsigned n, unsigned ncpus)
{
	uslub_topo.nr_nodes = n;
	uslub_topo.fake = true;
	uslub_topo.round_robin = n > ncpus;
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++) {
			unsigned d = i > j ? i - j : j - i;
			if (n - d < d)
				d = n - d;
			uslub_topo.distance[i][j] = (unsigned char)(i == j ? 10 : 10 + 10 * d);
		}
	for (unsigned c = 0; c < NODE_CPUS; c++)
		uslub_topo.cpu_node[c] = (unsigned char)((c % ncpus) * n / ncpus);
}

/* From the parsed USLUB_NUMA (options.c). */
void uslub_node_init(void)
{
	memset(&uslub_topo, 0, sizeof(uslub_topo));
	uslub_topo.nr_nodes = 1;
	uslub_topo.distance[0][0] = 10;
	auto_mode = uslub_config.numa_mode == USLUB_NUMA_AUTO;
	if (uslub_config.numa_mode == USLUB_NUMA_FAKE)
		set_fake(uslub_config.numa_nodes, uslub_os_ncpus());
	uslub_topo.search_local = uslub_config.numa_noskip;
	build_order();
	uslub_nr_nodes = uslub_topo.nr_nodes;
	/* Four large-block zones for each CPU of a node, up to MAX_ARENAS (page.h), as
	 * jemalloc makes four arenas a CPU, and one where there is one CPU (as it does too).
	 * With one a CPU, threads met at an arena's lock as soon as more of them ran than
	 * there were CPUs, and a holder preempted in a span search kept the others of its
	 * arena waiting: 8 threads replacing blocks of up to 2 MiB on 2 CPUs ran at 0.35
	 * million a second against 0.64 with four a CPU (tools/bench/results/recent-runs.md).
	 * A machine of 8 CPUs a node or more has MAX_ARENAS either way. */
	unsigned ncpus = uslub_os_ncpus();
	unsigned per_node = ncpus > 1 ? 4 * ncpus / uslub_nr_nodes : 1;
	uslub_nr_arenas = per_node < 1 ? 1 : per_node > MAX_ARENAS ? MAX_ARENAS : per_node;
}

/* The libnuma calls discovery makes (mbind goes to os.c). */
static struct {
	int (*available)(void);
	int (*max_node)(void);
	int (*distance)(int, int);
	int (*node_of_cpu)(int);
	void *mbind;
} numa;

static void *numa_lib; /* what dlopen gave; NULL when the process had libnuma already */

/* More than node 0 online, by the kernel's own list ("0" on a one-node machine, "0-1",
 * "0,2-3" otherwise; no file without NUMA). Read without allocating. */
static bool several_nodes_online(void)
{
	char buf[64];
	long n = uslub_os_read_file("/sys/devices/system/node/online", buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strcmp(buf, "0\n") != 0 && strcmp(buf, "0") != 0;
}

static bool load_libnuma(void)
{
	void *lib = RTLD_DEFAULT;
	if (!USLUB_OUT(dlsym(lib, "numa_available"))) {
		/* Most machines have one node: they never load libnuma. */
		if (!several_nodes_online())
			return false;
		lib = numa_lib = USLUB_OUT(dlopen("libnuma.so.1", RTLD_NOW | RTLD_LOCAL));
		if (!lib)
			return false;
	}
	/* POSIX's way to turn dlsym's void * into a function pointer. */
	*(void **)&numa.available = USLUB_OUT(dlsym(lib, "numa_available"));
	*(void **)&numa.max_node = USLUB_OUT(dlsym(lib, "numa_max_node"));
	*(void **)&numa.distance = USLUB_OUT(dlsym(lib, "numa_distance"));
	*(void **)&numa.node_of_cpu = USLUB_OUT(dlsym(lib, "numa_node_of_cpu"));
	numa.mbind = USLUB_OUT(dlsym(lib, "mbind"));
	return numa.available && numa.max_node && numa.distance && numa.node_of_cpu && numa.mbind;
}

/* One node after all: libnuma goes again (what it allocated too, which a leak checker
 * would otherwise count against the program). */
static void unload_libnuma(void)
{
	if (numa_lib)
		USLUB_OUT(dlclose(numa_lib));
	numa_lib = NULL;
}

void uslub_node_discover(void)
{
	if (!auto_mode || !load_libnuma())
		return;
	int max = USLUB_OUT(numa.available()) < 0 ? 0 : USLUB_OUT(numa.max_node());
	if (max < 1) {
		unload_libnuma();
		return; /* one node: nothing to spread, nothing to search */
	}
	unsigned n = (unsigned)max + 1;
	if (n > MAX_NODES) {
		uslub_message("uslub: %u NUMA nodes; uslub handles %u, the rest share them\n", n,
			      (unsigned)MAX_NODES);
		n = MAX_NODES;
	}
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++)
			uslub_topo.distance[i][j] =
			    (unsigned char)USLUB_OUT(numa.distance((int)i, (int)j));
	for (unsigned c = 0; c < NODE_CPUS; c++) {
		int node = USLUB_OUT(numa.node_of_cpu((int)c));
		uslub_topo.cpu_node[c] = (unsigned char)(node >= 0 ? (unsigned)node % n : 0);
	}
	uslub_os_use_mbind(numa.mbind);
	uslub_topo.real_multi = true;
	/* build_order sorts nr_nodes nodes: set first, or the table stays empty and every
	 * search visits node 0 (a bug the fake:N tests could not see). The table is complete
	 * before uslub_nr_nodes lets other threads search more than one node. */
	uslub_topo.nr_nodes = n;
	build_order();
	uslub_hooks.nodes_online(uslub_nr_nodes, n);
	uslub_pages_use(n, uslub_nr_arenas);
	__atomic_store_n(&uslub_nr_nodes, n, __ATOMIC_RELEASE);
	/* Regions made before now (for libnuma's own start-up mallocs) are node 0's and were
	 * made unbound: bind them as region_new binds every later one. */
	uslub_pages_bind_regions();
}

unsigned uslub_node_current(void)
{
	if (uslub_topo.nr_nodes == 1)
		return 0;
	if (uslub_topo.round_robin)
		return atomic_fetch_add(&placement, 1) % uslub_topo.nr_nodes;
	int cpu = sched_getcpu();
	return cpu >= 0 ? uslub_topo.cpu_node[(unsigned)cpu % NODE_CPUS] : 0;
}
