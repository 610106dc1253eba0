/* Prints the size classes as the caches use them: object size, preferred and minimum
 * order, objects per slab and the leftover at the end of each slab, under the settings
 * of the environment (USLUB_MIN_ORDER, USLUB_MAX_ORDER, USLUB_MIN_OBJECTS). */
#include "thread/thread.h"
#include "uslub.h"

#include <stdio.h>

int main(void)
{
	struct uslub_cache_info info;
	uslub_free(uslub_malloc(1)); /* starts the allocator with the environment's settings */
	printf("%-14s %8s %6s %6s %8s %8s %9s\n", "cache", "size", "order", "min", "objects",
	       "min_objs", "waste");
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		const struct uslub_cache *c = &uslub_caches[i];
		if (uslub_cache_info(c->name, &info) != 0)
			return 1;
		unsigned long slab = USLUB_PAGE_SIZE << c->order;
		unsigned long waste = slab - (unsigned long)c->objects * c->size;
		printf("%-14s %8u %6u %6u %8u %8u %6lu B (%4.1f%%)\n", c->name, c->size, c->order,
		       c->min_order, c->objects, c->min_objects, waste,
		       100.0 * (double)waste / (double)slab);
	}
	return 0;
}
