/* realloc_mix: random sizes from 1 B to 1 MiB, a third of the operations realloc.
 *
 * One thread keeps SLOTS objects; each operation picks a slot: an empty one gets a new
 * object, a full one is checked and then reallocated to a new random size (growing or
 * shrinking, across size classes and into large blocks), freed, or freed and replaced.
 * Sizes are log-uniform, so small requests dominate by count and large ones by bytes, as
 * in most programs. realloc must carry the kept bytes over; both ends are compared.
 *
 * A second argument raises the largest size (MiB): with 16, a few hundred buffers of
 * 1-16 MiB live among the small ones and grow and shrink by realloc - where uslub loses
 * (tools/bench/results/big-buffers.md).
 *
 * Usage: realloc_mix [SCALE [MAX_MIB]]   (operations scale; one thread) */
#include "workload.h"

enum {
	SLOTS = 2000,
	OPS = 1500000,
};

struct obj {
	void *p;
	size_t size;
	uint64_t key;
};

static struct obj slot[SLOTS];

int main(int argc, char **argv)
{
	uint64_t ops = wl_scaled(OPS, wl_scale(argc, argv));
	uint64_t rng = wl_seed(1), serial = 0, reallocs = 0, moved = 0;
	size_t max = WL_MIB;
	if (argc > 2) {
		char *end;
		unsigned long mib = strtoul(argv[2], &end, 10);
		if (*end != '\0' || mib < 1 || mib > 1024)
			wl_fail("bad MAX_MIB '%s' (want 1-1024)", argv[2]);
		max = mib * WL_MIB;
	}
	for (uint64_t n = 0; n < ops; n++) {
		struct obj *s = &slot[wl_rand(&rng) % SLOTS];
		if (s->p == NULL) {
			s->size = wl_log_range(&rng, 1, max);
			s->key = serial++;
			s->p = wl_malloc(s->size);
			wl_check_aligned(s->p, s->size);
			wl_fill(s->p, s->size, s->key);
			continue;
		}
		wl_check(s->p, s->size, s->key);
		switch (wl_rand(&rng) % 3) {
		case 0: {
			size_t n2 = wl_log_range(&rng, 1, max);
			size_t kept = n2 < s->size ? n2 : s->size;
			size_t tail = kept < 8 ? 0 : kept - 8;
			unsigned char head[8], end[8];
			memcpy(head, s->p, kept < 8 ? kept : 8);
			memcpy(end, (unsigned char *)s->p + tail, kept - tail);
			void *old = s->p;
			s->p = wl_realloc(s->p, n2);
			if (memcmp(head, s->p, kept < 8 ? kept : 8) != 0 ||
			    memcmp(end, (unsigned char *)s->p + tail, kept - tail) != 0)
				wl_fail("realloc(%zu -> %zu) lost the contents", s->size, n2);
			wl_check_aligned(s->p, n2);
			moved += s->p != old;
			reallocs++;
			s->size = n2;
			s->key = serial++;
			wl_fill(s->p, s->size, s->key);
			break;
		}
		case 1:
			free(s->p);
			s->p = NULL;
			break;
		default:
			free(s->p);
			s->size = wl_log_range(&rng, 1, max);
			s->key = serial++;
			s->p = wl_malloc(s->size);
			wl_check_aligned(s->p, s->size);
			wl_fill(s->p, s->size, s->key);
		}
	}
	for (unsigned i = 0; i < SLOTS; i++)
		if (slot[i].p != NULL) {
			wl_check(slot[i].p, slot[i].size, slot[i].key);
			free(slot[i].p);
		}
	return wl_done("%" PRIu64 " operations, %" PRIu64 " reallocs (%" PRIu64 " moved)", ops,
		       reallocs, moved);
}
