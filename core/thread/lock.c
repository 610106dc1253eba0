/* Every lock of the allocator at once, in the order of slab.c's essay (section 5): fork
 * takes them all so the child inherits none that a vanished thread held, and the heap
 * walker (check.c) so no list changes under it. One list, so the two cannot drift. */
#include "thread/thread.h"
#include "slab/slab.h"

void uslub_lock_all(void)
{
	uslub_lock(&uslub_orphan_lock, USLUB_LOCK_ORPHAN);
	uslub_lock(&uslub_registry_lock, USLUB_LOCK_REGISTRY);
	USLUB_OUT(pthread_mutex_lock(&uslub_stat_lock));
	for (unsigned i = 0; i < USLUB_NR_CACHES; i++)
		for (unsigned n = 0; n < uslub_nr_nodes; n++)
			uslub_lock(&uslub_cache_nodes[n][i].list_lock, USLUB_LOCK_LIST);
	uslub_barns_lock_all();
	uslub_medium_lock_all();
	uslub_pages_lock_all();
	uslub_huge_lock();
}

void uslub_unlock_all(void)
{
	uslub_huge_unlock();
	uslub_pages_unlock_all();
	uslub_medium_unlock_all();
	uslub_barns_unlock_all();
	for (unsigned i = 0; i < USLUB_NR_CACHES; i++)
		for (unsigned n = 0; n < uslub_nr_nodes; n++)
			pthread_mutex_unlock(&uslub_cache_nodes[n][i].list_lock);
	pthread_mutex_unlock(&uslub_stat_lock);
	pthread_mutex_unlock(&uslub_registry_lock);
	pthread_mutex_unlock(&uslub_orphan_lock);
}
