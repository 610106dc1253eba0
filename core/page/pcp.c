/* The thread's page cache. It stands in for the kernel's per-CPU pagesets: free blocks of
 * orders 0..PCP_MAX_ORDER on one list per order, so a thread that discards a slab and
 * makes another, of any cache, does it without the node lock. Its size follows use, as
 * the pcp's batch and high do since Linux 6.7:
 *
 *  - refill: an order-0 miss brings a batch of pages in one trip to the buddy, as one
 *    block split up (neighbours, one lock). The batch starts at one page and doubles
 *    after every second refill, up to 16 pages (the fixed batch before): a thread that
 *    needs one slab of each of a dozen caches holds what it uses and a page or two; one
 *    that keeps missing soon takes 16 pages a trip (doubling at every refill left parked
 *    threads holding pages they never used: tools/bench/results/). Orders 1-3 refill one block at a
 * time: a batch of them would be cut from a larger free block, passing over the warm blocks of the
 * order itself that other threads freed (peak RSS rose: tools/bench/results/).
 *  - free: a block goes on its list; past `pcp_high` pages the oldest blocks, round the
 *    orders, go back until a batch below it, and the batch halves (the thread is
 *    freeing, not taking). Blocks of orders 1-3 are kept up to PCP_HIGH_ORDER_PAGES per
 *    order - enough to turn a cache's slabs over, not to hoard what other threads could
 *    use or the buddy could merge (the kernel limits high-order pcp pages for the same
 *    reason; held up to `high` instead, peak RSS rose: tools/bench/results/).
 *  - high: PCP_HIGH_MIN at first - one block of the highest order, so a cache whose slabs
 *    are order 3 turns them over - and raised by each refill's pages up to PCP_HIGH: a
 *    thread that made a few slabs and went idle keeps a few pages, one that churns keeps
 *    what its churn needs. Exit and malloc_trim drain it all and start it over.
 *
 * The preferred-order try of allocate_slab (slab.c) comes here too: a block on the list
 * is at hand in the sense of DESIGN.md, and a refill asked with GFP_NOWAIT waits for no
 * lock and grows nothing. (An order-0 batch is asked without waiting or growing, and
 * when it is not at hand, one page as the caller asked; the buddy counts the batch's try
 * among its no-wait misses, as it did before.) Blocks on the lists are of kind
 * PAGE_UNUSED, like a page in no block (check.c finds them "loose"). */
#include "page/page.h"

#include <string.h>

const char *const uslub_pcp_stat_names[USLUB_NR_PCP_STATS] = {
#define X(id, name) #name,
    USLUB_PCP_STAT_ITEMS(X)
#undef X
};
uint64_t uslub_pcp_stat[USLUB_NR_PCP_STATS][PCP_ORDERS];

#if USLUB_STATS_ENABLED
#define pcp_stat(t, item, order, n)                                                                \
	uslub_own_store((t)->pcp_stat[USLUB_##item][order],                                        \
			(t)->pcp_stat[USLUB_##item][order] + (n))
#else
#define pcp_stat(t, item, order, n) ((void)(t), (void)(order), (void)(n))
#endif

void uslub_pcp_init(struct uslub_thread *t)
{
	for (unsigned o = 0; o < PCP_ORDERS; o++)
		CDS_INIT_LIST_HEAD(&t->pcp[o]);
	memset(t->pcp_blocks, 0, sizeof(t->pcp_blocks));
	uslub_own_store(t->pcp_count, 0);
	t->pcp_high = PCP_HIGH_MIN;
	t->pcp_batch_step = 0;
}

static void pcp_push(struct uslub_thread *t, struct page_desc *d, unsigned order)
{
	d->order = (uint8_t)order;
	cds_list_add(&d->list, &t->pcp[order]);
	t->pcp_blocks[order]++;
	uslub_own_store(t->pcp_count, t->pcp_count + (1U << order));
}

static void pcp_take(struct uslub_thread *t, struct page_desc *d, unsigned order)
{
	cds_list_del(&d->list);
	t->pcp_blocks[order]--;
	uslub_own_store(t->pcp_count, t->pcp_count - (1U << order));
}

/* The oldest block of `order` back to the buddy. */
static void pcp_give_back(struct uslub_thread *t, unsigned order)
{
	struct page_desc *d = cds_list_entry(t->pcp[order].prev, struct page_desc, list);
	pcp_take(t, d, order);
	pcp_stat(t, PCP_DRAIN, order, 1);
	uslub_pages_free(d, order);
}

/* Blocks of 2^order from the buddy onto the list, lowest address on top; false if none. */
static bool pcp_refill(struct uslub_thread *t, unsigned node, unsigned order, unsigned gfp)
{
	unsigned shift = order ? 0 : t->pcp_batch_step / 2; /* log2 of the blocks */
	unsigned high = t->pcp_high + (1U << (order + shift));
	t->pcp_high = (uint16_t)(high < PCP_HIGH ? high : PCP_HIGH);
	while (shift && t->pcp_count + (1U << shift) > t->pcp_high)
		shift--;
	struct page_desc *b = NULL;
	if (shift)
		b = uslub_pages_alloc(node, order + shift, GFP_NOWAIT);
	if (!b) {
		shift = 0;
		b = uslub_pages_alloc(node, order, gfp);
		if (!b)
			return false;
	}
	for (unsigned i = 1U << shift; i-- > 0;)
		pcp_push(t, b + ((size_t)i << order), order);
	pcp_stat(t, PCP_REFILL, order, 1U << shift);
	if (!order && t->pcp_batch_step < PCP_BATCH_STEPS)
		t->pcp_batch_step++;
	return true;
}

struct page_desc *uslub_pcp_alloc(struct uslub_thread *t, unsigned node, unsigned order,
				  unsigned gfp)
{
	if (order > PCP_MAX_ORDER)
		return uslub_pages_alloc(node, order, gfp);
	if (unlikely(node != t->pcp_node)) {
		/* The thread moved: its cached blocks are the old node's memory. */
		uslub_pcp_drain(t, 0);
		t->pcp_node = node;
	}
	struct cds_list_head *h = &t->pcp[order];
	if (cds_list_empty(h)) {
		pcp_stat(t, PCP_MISS, order, 1);
		if (!pcp_refill(t, node, order, gfp))
			return NULL;
	} else {
		pcp_stat(t, PCP_HIT, order, 1);
	}
	struct page_desc *d = cds_list_entry(h->next, struct page_desc, list);
	pcp_take(t, d, order);
	return d;
}

/* The oldest block of the first non-empty list from order `o` round, back to the buddy. */
static void pcp_drain_one(struct uslub_thread *t, unsigned *o)
{
	for (unsigned k = 0; k < PCP_ORDERS; k++, *o = (*o + 1) % PCP_ORDERS) {
		if (cds_list_empty(&t->pcp[*o]))
			continue;
		pcp_give_back(t, *o);
		*o = (*o + 1) % PCP_ORDERS;
		return;
	}
}

void uslub_pcp_free(struct uslub_thread *t, struct page_desc *d, unsigned order)
{
	if (order > PCP_MAX_ORDER || region_of(d)->nid != t->pcp_node) {
		uslub_pages_free(d, order);
		return;
	}
	pcp_push(t, d, order);
	pcp_stat(t, PCP_FREE, order, 1);
	if (order && t->pcp_blocks[order] > PCP_HIGH_ORDER_PAGES >> order)
		pcp_give_back(t, order); /* its oldest, at once (see above) */
	if (t->pcp_count > t->pcp_high) {
		/* A batch below high after an order-0 free; after a larger block, just under
		 * it (the block was the slack), so a turnover of order-3 slabs does not empty
		 * the cache. */
		unsigned batch = order ? 0 : 1U << (t->pcp_batch_step / 2);
		uslub_pcp_drain(t, t->pcp_high > batch ? t->pcp_high - batch : 0);
		t->pcp_batch_step = t->pcp_batch_step > 2 ? t->pcp_batch_step - 2 : 0;
	}
}

void uslub_pcp_drain(struct uslub_thread *t, unsigned keep)
{
	/* Each step frees a block while any is left, so pcp_count bounds the steps. */
	unsigned o = 0;
	for (unsigned steps = t->pcp_count; t->pcp_count > keep && steps; steps--)
		pcp_drain_one(t, &o);
	if (!keep) {
		t->pcp_high = PCP_HIGH_MIN;
		t->pcp_batch_step = 0;
	}
}
