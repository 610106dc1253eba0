/* uslub's real NUMA discovery (USLUB_NUMA=auto: libnuma's topology) on the emulated
 * machines of numa_emu.c, NUMA_EMU=2 and 4, preloaded ahead of uslub so its libnuma and
 * placement calls are the ones answering.
 *
 * Built twice:
 *   numa-emuN-linked   -DUSLUB_PREFIXED, linked with the engine: the topology uslub read
 *                      (distances, CPU-to-node map, each node's visit order against the
 *                      order worked out by hand below), every region of every zone bound
 *                      once to its node, and get_any_partial's counters
 *   numa-emuN-preload  standard names under LD_PRELOAD="libnumaemu.so libuslub.so": the
 *                      regions made while libnuma's constructor mallocs, before uslub knows
 *                      the topology, are bound too (node 0's objects come from them)
 * Both: a thread pinned to each node gets objects and large blocks of that node's regions
 * (bound with mbind to that node alone); from each node, with partial slabs only on the
 * last node of its visit order, one allocation walks the whole order and takes that
 * node's slab; the JSON dump shows each node's search_order and no node searched twice. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>

#include "numa_emu.h"
#include "test_util.h"

#ifdef USLUB_PREFIXED
#include "thread/thread.h"
#include "page/node.h"
#endif

/* Each node's visit order, nearest first, worked out from numa_emu.c's tables: ties keep
 * node number order. */
struct expect {
	unsigned nodes;
	unsigned char order[4][3];
};
static const struct expect machines[] = {
    {2, {{1}, {0}}},
    {4, {{1, 2, 3}, {0, 3, 2}, {0, 3, 1}, {1, 2, 0}}},
};
static const struct expect *ex;

/* ---- threads placed on a node -------------------------------------------------------- */

struct job {
	unsigned node;
	void (*fn)(struct job *);
	size_t size;
	void *objs[64];
	int n;
	int pinned;
};

/* CPU `node` is on node `node` in both machines (CPU c is on node c % nodes). */
static int pin(unsigned cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) == 0 && sched_getcpu() == (int)cpu;
}

static void *run_pinned(void *arg)
{
	struct job *j = arg;
	/* Before any malloc: the thread's state takes its node when it is made. */
	j->pinned = pin(j->node);
	j->fn(j);
	return NULL;
}

static void on_node(unsigned node, void (*fn)(struct job *), struct job *j)
{
	j->node = node;
	j->fn = fn;
	pthread_t t;
	CHECK(pthread_create(&t, NULL, run_pinned, j) == 0);
	pthread_join(t, NULL);
	CHECKF(j->pinned, "thread placed on emulated CPU %u", node);
}

/* ---- objects and large blocks come from the thread's node, bound to it ---------------- */

/* Per node, small sizes of classes no other node allocates: a thread whose node has no
 * partial slab of a class rightly takes another node's before making a slab
 * (get_any_partial). Node 0's are the common ones: libnuma's start-up and stdio leave
 * partial slabs of those on node 0 only. The last is a large block. */
enum { NR_PLACE = 5 };
static const size_t place_sizes[4][NR_PLACE] = {
    {24, 128, 512, 4096, 100 << 10},
    {160, 640, 1280, 6144, 100 << 10},
    {192, 768, 1536, 7168, 100 << 10},
    {224, 896, 1792, 8192, 100 << 10},
};

static void alloc_here(struct job *j)
{
#ifdef USLUB_PREFIXED
	uslub_free(uslub_malloc(8));
	CHECK_EQ(uslub_tls_thread->node, j->node);
#endif
	j->n = 0;
	for (unsigned s = 0; s < NR_PLACE; s++)
		for (int i = 0; i < 8; i++)
			j->objs[j->n++] = MALLOC(place_sizes[j->node][s]);
	for (int i = 0; i < j->n; i++) {
		CHECK(j->objs[i] != NULL);
		int bound = numa_emu_bound_node(j->objs[i]);
		CHECKF(bound == (int)j->node, "node %u: object %d (%zu B) %p bound to %d", j->node,
		       i, place_sizes[j->node][i / 8], j->objs[i], bound);
#ifdef USLUB_PREFIXED
		CHECK_EQ(region_of(j->objs[i])->nid, j->node);
#endif
	}
	for (int i = 0; i < j->n; i++)
		FREE(j->objs[i]);
}

static void placement(void)
{
	tu_section("a thread on each node: objects and large blocks from regions bound to it");
	for (unsigned k = 0; k < ex->nodes; k++) {
		struct job j = {0};
		on_node(k, alloc_here, &j);
	}
}

/* ---- every mbind names one node, with uslub's arguments ------------------------------- */

static void bind_calls(void)
{
	tu_section("mbind calls: MPOL_PREFERRED, one node each, inside one region, whole pages");
	const struct numa_emu_bind *b;
	unsigned n = numa_emu_binds(&b), seen = 0;
	/* At least one region per node: placement() grew each. */
	CHECKF(n >= ex->nodes, "%u mbind calls for %u nodes", n, ex->nodes);
	for (unsigned i = 0; i < n; i++) {
		unsigned long m = b[i].mask;
		uintptr_t a = (uintptr_t)b[i].addr;
		CHECK_EQ(b[i].mode, MPOL_PREFERRED);
		CHECK_EQ(b[i].flags, 0);
		CHECKF(!b[i].wide && m && !(m & (m - 1)) && (unsigned)__builtin_ctzl(m) < ex->nodes,
		       "mbind %u: mask %#lx names one of %u nodes", i, m, ex->nodes);
		/* Regions map their pages as they grow, and each piece is bound as it is
		 * mapped: a piece is whole 4 KiB pages inside one 256 MiB (2^28) region
		 * slot (the preloaded build has no engine headers to name them). */
		CHECKF(b[i].len && !(a & 4095) && !(b[i].len & 4095) &&
			   a >> 28 == (a + b[i].len - 1) >> 28,
		       "mbind %u: %p + %lu is whole pages of one region", i, b[i].addr, b[i].len);
		if (m)
			seen |= (unsigned)m;
	}
	CHECKF(seen == (1u << ex->nodes) - 1, "every node has a bound region: %#x", seen);
}

/* ---- get_any_partial walks the whole visit order ------------------------------------- */

struct partial_job {
	struct job j;
	void *kept[16];
	int nk;
};

/* Several slabs of j->size, all but every 5th object freed, so some slabs stay partial
 * on the thread's node list when it exits. */
static void leave_partials(struct job *j)
{
	struct partial_job *p = (struct partial_job *)j;
	void *o[48];
	for (int i = 0; i < 48; i++)
		o[i] = MALLOC(j->size);
	p->nk = 0;
	for (int i = 0; i < 48; i++) {
		if (i % 5 == 0 && p->nk < 16)
			p->kept[p->nk++] = o[i];
		else
			FREE(o[i]);
	}
}

static void take_one(struct job *j)
{
	j->objs[0] = MALLOC(j->size);
	j->n = 1;
}

#ifdef USLUB_PREFIXED
struct counters {
	uint64_t calls, tried, again, remote;
};
static struct counters counters_of(unsigned node)
{
	struct uslub_node *n = &uslub_nodes[node];
	return (struct counters){n->any_partial_calls, n->any_partial_tried, n->any_partial_again,
				 n->remote_slabs};
}
#endif

/* Object sizes nothing else here allocates (no stdio buffer is 2.5-5 KiB), one per
 * searching node, so the only partial slabs of each are the ones this test leaves. */
static const size_t search_sizes[4] = {2560, 3072, 3584, 5120};

static void search_order(void)
{
	tu_section("from each node, partial slabs only on its farthest node: the search visits "
		   "every other node once, nearest first, and takes that slab");
	unsigned last_pos = ex->nodes - 2;
	for (unsigned k = 0; k < ex->nodes; k++) {
		unsigned far = ex->order[k][last_pos];
		struct partial_job p = {.j = {.size = search_sizes[k]}};
		on_node(far, leave_partials, &p.j);
#ifdef USLUB_PREFIXED
		struct uslub_cache *c = &uslub_caches[uslub_size_to_class(search_sizes[k])];
		for (unsigned x = 0; x < ex->nodes; x++)
			CHECKF((cache_node_of(c, x)->nr_partial > 0) == (x == far),
			       "%s: node %u has %lu partial slabs", c->name, x,
			       (unsigned long)cache_node_of(c, x)->nr_partial);
		struct counters before = counters_of(k);
#endif
		struct job t = {.size = search_sizes[k]};
		on_node(k, take_one, &t);
		int got = numa_emu_bound_node(t.objs[0]);
		CHECKF(got == (int)far, "from node %u: the %zu B object is node %d's, expected %u",
		       k, search_sizes[k], got, far);
#ifdef USLUB_PREFIXED
		struct counters after = counters_of(k);
		CHECK_EQ(after.calls - before.calls, 1);
		CHECKF(after.tried - before.tried == ex->nodes - 1,
		       "from node %u: %lu nodes tried, expected %u", k,
		       (unsigned long)(after.tried - before.tried), ex->nodes - 1);
		CHECK_EQ(after.again, before.again);
		CHECK_EQ(after.remote - before.remote, 1);
#endif
		FREE(t.objs[0]);
		for (int i = 0; i < p.nk; i++)
			FREE(p.kept[i]);
	}
}

/* ---- the JSON dump ------------------------------------------------------------------- */

typedef void (*stats_print_fn)(int fd, int json);

static stats_print_fn stats_print(void)
{
#ifdef USLUB_PREFIXED
	return uslub_stats_print;
#else
	void *sym = dlsym(RTLD_DEFAULT, "uslub_stats_print");
	stats_print_fn fn = NULL;
	memcpy(&fn, &sym, sizeof(fn));
	return fn;
#endif
}

static char dump[1 << 20];

static void json_dump(void)
{
	tu_section("JSON dump: nodes[i].search_order, and no node tried twice in one search");
	stats_print_fn print = stats_print();
	CHECKF(print != NULL, "uslub_stats_print found");
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (!print || !f)
		return;
	print(fileno(f), 1);
	rewind(f);
	size_t len = fread(dump, 1, sizeof(dump) - 1, f);
	fclose(f);
	dump[len] = '\0';

	char want[160];
	snprintf(want, sizeof(want), "\"nodes\": %u,", ex->nodes);
	CHECKF(strstr(dump, want) != NULL, "config has %s", want);
	const char *nodes = strstr(dump, "\"nodes\": [");
	CHECKF(nodes != NULL, "the dump has a nodes array");
	if (!nodes)
		return;
	for (unsigned k = 0; k < ex->nodes; k++) {
		snprintf(want, sizeof(want), "{\"node\": %u,", k);
		const char *node = strstr(nodes, want);
		CHECKF(node != NULL, "nodes[%u] is there", k);
		if (!node)
			continue;
		int w = snprintf(want, sizeof(want), "\"search_order\": [");
		for (unsigned i = 0; i + 1 < ex->nodes; i++)
			w += snprintf(want + w, sizeof(want) - (size_t)w, "%s%u", i ? ", " : "",
				      ex->order[k][i]);
		snprintf(want + w, sizeof(want) - (size_t)w, "]");
		const char *order = strstr(node, "\"search_order\": [");
		const char *end = strchr(node, '}');
		CHECKF(order && order < end && strncmp(order, want, strlen(want)) == 0,
		       "nodes[%u]: expected %s, the dump has %.40s", k, want, order ? order : "-");
		const char *again = strstr(node, "\"nodes_tried_again\": ");
		CHECKF(again && again < end &&
			   strtoul(again + strlen("\"nodes_tried_again\": "), NULL, 10) == 0,
		       "nodes[%u]: %.30s", k, again ? again : "no nodes_tried_again");
	}
}

/* ---- the linked build: what uslub read ----------------------------------------------- */

#ifdef USLUB_PREFIXED
static void topology(void)
{
	tu_section("uslub_topo: libnuma's distances and CPU map, each node's visit order");
	CHECK_EQ(uslub_nr_nodes, ex->nodes);
	CHECK_EQ(uslub_topo.nr_nodes, ex->nodes);
	CHECK(uslub_topo.real_multi && !uslub_topo.fake && !uslub_topo.round_robin);
	for (unsigned i = 0; i < ex->nodes; i++)
		for (unsigned j = 0; j < ex->nodes; j++)
			CHECK_EQ(uslub_topo.distance[i][j], numa_distance((int)i, (int)j));
	unsigned cpus = numa_emu_cpus();
	for (unsigned c = 0; c < NODE_CPUS; c++)
		CHECKF(uslub_topo.cpu_node[c] == (c < cpus ? c % ex->nodes : 0),
		       "CPU %u on node %u", c, uslub_topo.cpu_node[c]);
	for (unsigned k = 0; k < ex->nodes; k++)
		for (unsigned i = 0; i + 1 < ex->nodes; i++)
			CHECKF(uslub_topo.order[k][i] == ex->order[k][i],
			       "node %u, visit %u: node %u, expected %u", k, i,
			       uslub_topo.order[k][i], ex->order[k][i]);
}

/* Every mapped page of every region - its descriptors and what it has grown to - is
 * covered by mbind calls naming the region's node, and no call binds anything else. */
static void regions_bound(void)
{
	tu_section("every mapped page of every region bound, to its node alone");
	const struct numa_emu_bind *b;
	unsigned n = numa_emu_binds(&b), inside = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		for (struct region *r = uslub_nodes[z].regions; r; r = r->next) {
			uintptr_t cur = (uintptr_t)r, end = cur + (r->grown << USLUB_PAGE_SHIFT);
			for (unsigned i = 0; i < n; i++) {
				uintptr_t a = (uintptr_t)b[i].addr;
				if (a >> REGION_SHIFT != (uintptr_t)r >> REGION_SHIFT)
					continue;
				inside++;
				CHECK_EQ(b[i].maxnode, 256);
				CHECKF(b[i].mask == 1UL << r->nid && !b[i].wide,
				       "zone %u region %p (node %u): %p + %lu bound to %#lx", z,
				       (void *)r, r->nid, b[i].addr, b[i].len, b[i].mask);
			}
			/* The calls are in mapping order: each piece follows the last. */
			for (unsigned i = 0; i < n && cur < end; i++)
				if ((uintptr_t)b[i].addr <= cur &&
				    cur < (uintptr_t)b[i].addr + b[i].len)
					cur = (uintptr_t)b[i].addr + b[i].len;
			CHECKF(cur >= end, "zone %u region %p: mapped to %p, bound only to %p", z,
			       (void *)r, (void *)end, (void *)cur);
			CHECK_EQ(r->nid, z % MAX_NODES);
		}
	CHECKF(inside == n, "%u of %u mbind calls lie in a region", inside, n);
}
#endif

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	(void)argc;
	printf("test_numa_emu (%s), NUMA_EMU=%s\n", VARIANT,
	       getenv("NUMA_EMU") ? getenv("NUMA_EMU") : "(unset)");
	unsigned nodes = numa_emu_nodes();
	for (unsigned i = 0; i < sizeof(machines) / sizeof(machines[0]); i++)
		if (machines[i].nodes == nodes)
			ex = &machines[i];
	CHECKF(ex != NULL, "an emulated machine (NUMA_EMU=2 or 4) is in effect: %u nodes", nodes);
	if (!ex)
		return tu_summary("test_numa_emu");
	/* The main thread allocates too: on node 0 like any. */
	CHECK(pin(0));
#ifdef USLUB_PREFIXED
	topology();
#endif
	placement();
	search_order();
	bind_calls();
#ifdef USLUB_PREFIXED
	regions_bound();
#endif
	json_dump();
	return tu_summary("test_numa_emu");
}
