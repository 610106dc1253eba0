/* NUMA: per-node memory and partial lists searched by distance. Run three ways:
 *   fake:4  four simulated nodes: a thread's objects come from its node's regions,
 *           cross-node frees land on the owner node's list, get_any_partial visits the
 *           other nodes nearest first, never the local one, each once;
 *   off     one node: get_any_partial is never entered;
 *   auto    the real topology is read without error. */
#include "thread/thread.h"
#include "page/node.h"
#include "test_util.h"
#include "uslub.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct job {
	unsigned node;
	size_t size;
	void **objs;
	int n;
	int free_from; /* free objs[free_from..n) unless -1; allocate when objs[0] is NULL */
	struct page_desc *got_slab;
};

static void *on_node(void *arg)
{
	struct job *j = arg;
	uslub_free(uslub_malloc(8)); /* this thread's state */
	uslub_tls_thread->node = j->node;
	if (!j->objs[0]) {
		for (int i = 0; i < j->n; i++)
			j->objs[i] = uslub_malloc(j->size);
	} else {
		for (int i = j->free_from; i < j->n; i++)
			uslub_free(j->objs[i]);
	}
	return NULL;
}

static void run_on(struct job *j)
{
	pthread_t t;
	pthread_create(&t, NULL, on_node, j);
	pthread_join(t, NULL);
}

static struct uslub_cache *cache_of(size_t size)
{
	return &uslub_caches[uslub_size_to_class(size)];
}

static unsigned node_of(void *p)
{
	return (unsigned)(region_of(p)->node - uslub_nodes) % MAX_NODES;
}

/* Leaves partial slabs of `size` on `node`'s list: a thread there allocates whole
 * slabs, another on the same node frees all but one object per slab, both exit. */
static void **partials_on(unsigned node, size_t size, int n)
{
	void **objs = calloc((size_t)n, sizeof(void *));
	struct job a = {node, size, objs, n, -1, NULL};
	run_on(&a);
	/* Keep every 8th object so each slab stays partial. */
	for (int i = 0; i < n; i++)
		if (i % 8)
			uslub_free(objs[i]), objs[i] = NULL;
	return objs;
}

static void fake4(void)
{
	CHECKF(uslub_nr_nodes == 4, "four nodes, got %u", uslub_nr_nodes);
	bool unequal = false;
	for (unsigned i = 0; i < 4; i++) {
		CHECKF(uslub_topo.distance[i][i] == 10, "local distance");
		for (unsigned j = 0; j < 4; j++) {
			CHECKF(uslub_topo.distance[i][j] == uslub_topo.distance[j][i], "symmetric");
			if (i != j)
				CHECKF(uslub_topo.distance[i][j] >= 20, "remote >= 20");
			if (i != j && uslub_topo.distance[i][j] != uslub_topo.distance[0][1])
				unequal = true;
		}
		for (unsigned k = 0; k + 1 < 3; k++)
			CHECKF(uslub_topo.distance[i][uslub_topo.order[i][k]] <=
				   uslub_topo.distance[i][uslub_topo.order[i][k + 1]],
			       "search order of node %u by distance", i);
		for (unsigned k = 0; k < 3; k++)
			CHECKF(uslub_topo.order[i][k] != i, "local node not in its search order");
	}
	CHECKF(unequal, "remote distances are not all equal");

	/* A thread's objects come from its own node's regions (a class no other node has
	 * partial slabs of, or get_any_partial would rightly take those first). */
	static const size_t sizes[4] = {320, 384, 448, 512};
	for (unsigned node = 0; node < 4; node++) {
		void *objs[64] = {0};
		struct job j = {node, sizes[node], objs, 64, -1, NULL};
		run_on(&j);
		unsigned right = 0;
		for (int i = 0; i < 64; i++)
			right += node_of(objs[i]) == node;
		CHECKF(right == 64, "node %u: %u of 64 objects from its regions", node, right);
		void *big = NULL;
		(void)big;
		for (int i = 0; i < 64; i++)
			uslub_free(objs[i]);
	}

	/* Cross-node frees land on the owner node's list. */
	struct uslub_cache *c = cache_of(128);
	uint64_t before[4];
	for (unsigned n = 0; n < 4; n++)
		before[n] = cache_node_of(c, n)->nr_partial;
	enum { N = 32 * 20 };
	void **objs = calloc(N, sizeof(void *));
	struct job alloc0 = {0, 128, objs, N, -1, NULL};
	run_on(&alloc0);
	struct job free1 = {1, 128, objs, N, 1, NULL}; /* frees all but objs[0] */
	/* ... but keep one object in every slab so they stay partial */
	for (int i = 1; i < N; i++)
		if (i % 32 == 0)
			objs[i] = objs[i]; /* kept below */
	void **keep = calloc(N, sizeof(void *));
	int nk = 0, w = 1;
	for (int i = 1; i < N; i++) {
		if (i % 32 == 0)
			keep[nk++] = objs[i];
		else
			objs[w++] = objs[i];
	}
	free1.n = w;
	run_on(&free1);
	CHECKF(cache_node_of(c, 0)->nr_partial > before[0],
	       "slabs went back to node 0's list: %lu -> %lu", (unsigned long)before[0],
	       (unsigned long)cache_node_of(c, 0)->nr_partial);
	CHECKF(cache_node_of(c, 1)->nr_partial == before[1], "none on the freeing node's list");
	uslub_free(objs[0]);
	for (int i = 0; i < nk; i++)
		uslub_free(keep[i]);
	free(keep);
	free(objs);

	/* get_any_partial: from node 0, with nothing local, nearest first. */
	size_t size = 96;
	struct uslub_cache *c96 = cache_of(size);
	void **on1 = partials_on(1, size, 42 * 8);
	void **on2 = partials_on(2, size, 42 * 8);
	CHECKF(cache_node_of(c96, 0)->nr_partial == 0, "node 0 has no partial kmalloc-96");
	struct uslub_node *n0 = &uslub_nodes[0];
	uint64_t calls = n0->any_partial_calls, tried = n0->any_partial_tried;
	uint64_t remote = n0->remote_slabs;
	void *one[1] = {0};
	struct job take = {0, size, one, 1, -1, NULL};
	run_on(&take);
	CHECKF(n0->any_partial_calls == calls + 1, "one get_any_partial call");
	CHECKF(n0->any_partial_tried == tried + 1, "node 1 (distance 20) found at the first try");
	CHECKF(n0->remote_slabs == remote + 1, "a remote slab taken");
	CHECKF(node_of(one[0]) == 1, "the object is node 1's (got %u)", node_of(one[0]));
	/* Another class with partial slabs only on node 2: the search tries node 1 and
	 * node 3 (distance 20, both empty) before node 2 (distance 30). */
	uslub_free(one[0]);
	size_t size2 = 112;
	void **only2 = partials_on(2, size2, 36 * 8);
	CHECKF(cache_node_of(cache_of(size2), 1)->nr_partial == 0 &&
		   cache_node_of(cache_of(size2), 3)->nr_partial == 0,
	       "nodes 1 and 3 have no partial kmalloc-112");
	calls = n0->any_partial_calls, tried = n0->any_partial_tried;
	one[0] = NULL;
	struct job take2 = {0, size2, one, 1, -1, NULL};
	run_on(&take2);
	CHECKF(node_of(one[0]) == 2, "then node 2's (got %u)", node_of(one[0]));
	CHECKF(n0->any_partial_tried - tried == 3, "tried 1, 3, 2: %lu",
	       (unsigned long)(n0->any_partial_tried - tried));
	CHECKF(n0->any_partial_tried - tried <=
		   (uslub_nr_nodes - 1) * (n0->any_partial_calls - calls),
	       "the local node is never tried again");
	for (int i = 0; i < 36 * 8; i++)
		uslub_free(only2[i]);
	free(only2);
	uslub_free(one[0]);
	for (int i = 0; i < 42 * 8; i++) {
		uslub_free(on1[i]);
		uslub_free(on2[i]);
	}
	free(on1);
	free(on2);
}

static void one_node(bool noskip)
{
	CHECKF(uslub_nr_nodes == 1, "one node");
	uint64_t calls = uslub_nodes[0].any_partial_calls;
	/* Drain partial lists: threads freeing each other's objects. */
	for (int round = 0; round < 20; round++) {
		void **p = partials_on(0, 64, 64 * 6);
		for (int i = 0; i < 64 * 6; i++)
			uslub_free(p[i]);
		free(p);
		void *x[64] = {0};
		struct job j = {0, 64, x, 64, -1, NULL};
		run_on(&j);
		for (int i = 0; i < 64; i++)
			uslub_free(x[i]);
	}
	if (noskip)
		CHECKF(uslub_nodes[0].any_partial_calls > calls, "without the fix it is entered");
	else
		CHECKF(uslub_nodes[0].any_partial_calls == calls, "get_any_partial never entered");
}

int main(int argc, char **argv)
{
	uslub_free(uslub_malloc(1));
	const char *mode = argc > 2 ? argv[2] : "fake4";
	if (strcmp(mode, "fake4") == 0)
		fake4();
	else if (strcmp(mode, "off") == 0)
		one_node(false);
	else if (strcmp(mode, "noskip") == 0)
		one_node(true);
	else if (strcmp(mode, "auto") == 0)
		CHECKF(uslub_nr_nodes >= 1 && uslub_topo.distance[0][0] == 10,
		       "real topology read: %u nodes", uslub_nr_nodes);
	CHECKF(uslub_pages_check(0) == 0, "node 0 page allocator consistent");
	return tu_summary("test_numa");
}
