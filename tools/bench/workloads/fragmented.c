/* fragmented: a long-lived heap with many survivors and random frees.
 *
 * A program that runs for days ends up with its live objects scattered over memory that
 * was filled when it was busy. Here one thread fills a heap with OBJECTS small objects
 * (16 .. 512 B), then, PHASES times, frees a random half of whatever is live and
 * allocates new objects of a different size range into the holes. At the end every
 * survivor is checked. Peak RSS shows how well an allocator reuses the holes; time shows
 * what its free lists cost when they are long and scattered.
 *
 * Usage: fragmented [SCALE]   (objects scale; one thread) */
#include "workload.h"

#include <sys/mman.h>

enum {
	OBJECTS = 1500000,
	PHASES = 6,
};

struct obj {
	void *p;
	uint32_t size;
	uint32_t key;
};

/* each phase prefers its own sizes, so holes left by one phase fit the next one badly */
static const size_t phase_lo[PHASES + 1] = {16, 96, 24, 200, 48, 320, 16};
static const size_t phase_hi[PHASES + 1] = {128, 512, 160, 512, 256, 512, 512};

int main(int argc, char **argv)
{
	uint64_t n = wl_scaled(OBJECTS, wl_scale(argc, argv));
	/* the table is mapped directly, so it counts against no allocator */
	struct obj *objs = mmap(NULL, n * sizeof(*objs), PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (objs == MAP_FAILED)
		wl_fail("mmap of the object table failed");
	uint64_t rng = wl_seed(3), live = 0, freed = 0;
	uint32_t serial = 0;
	for (uint64_t i = 0; i < n; i++) {
		objs[i].size = (uint32_t)wl_log_range(&rng, phase_lo[0], phase_hi[0]);
		objs[i].key = serial++;
		objs[i].p = wl_malloc(objs[i].size);
		wl_fill(objs[i].p, objs[i].size, objs[i].key);
		live++;
	}
	for (unsigned ph = 1; ph <= PHASES; ph++) {
		for (uint64_t i = 0; i < n; i++)
			if (objs[i].p != NULL && wl_rand(&rng) % 2 == 0) {
				wl_check(objs[i].p, objs[i].size, objs[i].key);
				free(objs[i].p);
				objs[i].p = NULL;
				freed++;
				live--;
			}
		/* refill two thirds of the holes with the phase's sizes */
		for (uint64_t i = 0; i < n; i++)
			if (objs[i].p == NULL && wl_rand(&rng) % 3 != 0) {
				objs[i].size =
				    (uint32_t)wl_log_range(&rng, phase_lo[ph], phase_hi[ph]);
				objs[i].key = serial++;
				objs[i].p = wl_malloc(objs[i].size);
				wl_check_aligned(objs[i].p, objs[i].size);
				wl_fill(objs[i].p, objs[i].size, objs[i].key);
				live++;
			}
	}
	for (uint64_t i = 0; i < n; i++)
		if (objs[i].p != NULL) {
			wl_check(objs[i].p, objs[i].size, objs[i].key);
			free(objs[i].p);
		}
	munmap(objs, n * sizeof(*objs));
	return wl_done("%" PRIu32 " allocations, %" PRIu64 " random frees, %" PRIu64
		       " survivors checked at the end",
		       serial, freed, live);
}
