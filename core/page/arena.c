/* Arenas: a node's large-block zones, one a thread, and its medium zones likewise (page.h,
 * at the end: their lending). The large ones keep free memory as
 * one zone kept it: the keep before a span pays is shared among them by the pages each
 * has in use (the decay's floor by their count), and a span cut from fresh pages is paid
 * for by the other arenas' warm free memory when its own zone's is not enough, within
 * what the arenas together keep over one zone's keep (decay.c, section 9). Before its own
 * zone grows, a thread takes another arena's free pages (slab/large.c). Without these,
 * each arena's heap grew to its own thread's peak while another's warm memory stayed: two
 * threads replacing buffers of up to 8 MiB peaked at 275-281 MiB against 215-216 with one
 * zone (glibc 220-231), and stress (4 threads) at 137-159 MiB with four arenas against
 * 100-112 with one. A zone is made (lock, lists) by the first block cut from it
 * (uslub_zone_make, at the end), so a program without large blocks writes none of them. */
#include "page/page.h"

/* Round robin over the arenas, in the order threads make their first large block. */
static _Atomic unsigned next_arena;
/* 1 + the thread's turn, modulo 840 (a multiple of every arena count up to 8: no arena
 * gets more turns than another at the wrap); 0 before its first large block. */
#define TURNS 840
_Static_assert(MAX_ARENAS <= 8, "TURNS is a multiple of every count up to 8");
static __thread unsigned short tls_turn;

unsigned uslub_thread_arena(void)
{
	unsigned turn = tls_turn;
	if (unlikely(!turn)) {
		turn = 1 + atomic_fetch_add_explicit(&next_arena, 1, memory_order_relaxed) % TURNS;
		tls_turn = (unsigned short)turn;
	}
	return (turn - 1) % uslub_nr_arenas;
}

/* Pages of zone n's regions not free: its blocks in use, near enough (a block it lent
 * another zone counts, one it borrowed does not). A peek, without the lock. */
static uint64_t zone_used(const struct uslub_node *n)
{
	uint64_t grown = __atomic_load_n(&n->grown_pages, __ATOMIC_RELAXED);
	uint64_t free = __atomic_load_n(&n->free_pages, __ATOMIC_RELAXED);
	return grown > free ? grown - free : 0;
}

/* A quarter, also where the pay moves pages (decay.c, section 10). An eighth there held
 * malloc_large's peak at 437.6 MiB against 477.6 (glibc 489.8) but faulted 170 thousand
 * pages in against 137, and took 4.4-4.8 s against 2.3-2.7 on a VM where a fault costs
 * the most (tools/bench/results/big-buffers.md). */
static uint64_t node_keep(void)
{
	uint64_t keep = uslub_large_in_use() >> 2;
	if (keep < uslub_trim_threshold)
		keep = uslub_trim_threshold;
	return keep >> USLUB_PAGE_SHIFT;
}

uint64_t uslub_pay_keep(const struct uslub_node *n)
{
	uint64_t keep = node_keep();
	unsigned z = (unsigned)(n - uslub_nodes);
	if (uslub_nr_arenas == 1 || !zone_is_large(z))
		return keep;
	/* The floor shared too: two arenas that each kept M_TRIM_THRESHOLD (32 MiB by
	 * default) kept twice what one zone did. */
	uint64_t all = 0;
	for (unsigned a = 0; a < uslub_nr_arenas; a++)
		all += zone_used(&uslub_nodes[LARGE_ARENA_ZONE(z % MAX_NODES, a)]);
	return all ? (uint64_t)((unsigned __int128)keep * zone_used(n) / all)
		   : keep / uslub_nr_arenas;
}

uint64_t uslub_over_keep(const struct uslub_node *o)
{
	uint64_t warm = __atomic_load_n(&o->warm_free_pages, __ATOMIC_RELAXED);
	uint64_t keep = uslub_pay_keep(o);
	return warm > keep ? warm - keep : 0;
}

struct uslub_node *uslub_other_arena(const struct uslub_node *n, unsigned a)
{
	unsigned z = (unsigned)(n - uslub_nodes);
	unsigned oz = LARGE_ARENA_ZONE(z % MAX_NODES, a);
	struct uslub_node *o = &uslub_nodes[oz];
	return zone_is_large(z) && o != n && zone_made(oz) ? o : NULL;
}

uint64_t uslub_node_over(const struct uslub_node *n)
{
	unsigned z = (unsigned)(n - uslub_nodes);
	if (uslub_nr_arenas == 1 || !zone_is_large(z))
		return uslub_over_keep(n);
	uint64_t warm = 0;
	for (unsigned a = 0; a < uslub_nr_arenas; a++)
		warm += __atomic_load_n(
		    &uslub_nodes[LARGE_ARENA_ZONE(z % MAX_NODES, a)].warm_free_pages,
		    __ATOMIC_RELAXED);
	uint64_t keep = node_keep();
	return warm > keep ? warm - keep : 0;
}

/* Held while a zone is made, and by the fork's lock_all (buddy.c): a zone made meanwhile
 * would be one whose lock the fork did not take. */
pthread_mutex_t uslub_zone_make_lock = PTHREAD_MUTEX_INITIALIZER;

void uslub_zone_make(unsigned z)
{
	struct uslub_node *n = &uslub_nodes[z];
	USLUB_OUT(pthread_mutex_lock(&uslub_zone_make_lock));
	if (!zone_made(z)) {
		pthread_mutex_init(&n->lock, NULL);
		for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++)
			CDS_INIT_LIST_HEAD(&n->free_area[o]);
		for (unsigned b = 0; b < EXT_BINS; b++)
			CDS_INIT_LIST_HEAD(&n->ext_bin[b]);
		atomic_store_explicit(&n->made, true, memory_order_release);
	}
	pthread_mutex_unlock(&uslub_zone_make_lock);
}

/* What a thread's medium zone lacks comes from the node's other medium zones before it
 * grows, then from the slab zone (where medium blocks were all cut before, page.h), as
 * the large arenas lend (slab/large.c): with every zone grown to its own
 * thread's peak, four threads that each built and freed 64 MiB of 64 KiB blocks in turn
 * peaked at 112.6 MiB, and at 73.5 lending (tests/test_arenas.c). A block lent stays in
 * its region and goes back to its zone. With a trylock: two threads that lend each other
 * blocks must not meet at both locks. */
struct page_desc *uslub_medium_borrow(unsigned z, unsigned order, unsigned gfp)
{
	for (unsigned a = 0; a <= uslub_nr_arenas; a++) {
		unsigned oz =
		    a < uslub_nr_arenas ? MEDIUM_ARENA_ZONE(z % MAX_NODES, a) : z % MAX_NODES;
		struct uslub_node *o = &uslub_nodes[oz];
		if (oz == z || !zone_made(oz) ||
		    !__atomic_load_n(&o->free_pages, __ATOMIC_RELAXED) ||
		    !uslub_trylock(&o->lock, USLUB_LOCK_ZONE))
			continue;
		struct page_desc *d = uslub_find_block(o, order, gfp);
		if (d)
			return uslub_take_block(o, d, order);
		uslub_zone_unlock(o);
	}
	return NULL;
}
