/* big_buffers: buffers of 5-25 MiB replaced one at a time, each filled once - decoded
 * images, network or I/O buffers, matrices sized per request. A new buffer is allocated
 * before the one it replaces is freed (as a smart pointer's assignment does), filled with
 * memset, and its first and last words carry a tag checked before it is freed.
 *
 * LIVE buffers are kept at once, set at build time: big_buffers keeps 4;
 * malloc_large keeps 20 and takes mimalloc-bench's malloc-large shape (20 buffers of a
 * uniform 5-25 MiB, a random one replaced per step, each zero-filled as
 * std::make_unique<char[]> does).
 *
 * Usage: big_buffers|malloc_large [SCALE]   (steps scale) */
#include "workload.h"

#ifndef LIVE
#define LIVE 4
#endif

enum { STEPS = LIVE == 4 ? 600 : 1000 };
static const size_t MIN_SIZE = 5 * WL_MIB, MAX_SIZE = 25 * WL_MIB;

static unsigned char *buf[LIVE];
static size_t len[LIVE];
static uint64_t key[LIVE];

static void make(unsigned i, size_t n, uint64_t k)
{
	unsigned char *p = wl_malloc(n);
	memset(p, LIVE == 4 ? (int)(k & 0xff) : 0, n);
	uint64_t head = wl_tag(p, n, k), tail = ~head;
	memcpy(p, &head, sizeof(head));
	memcpy(p + n - sizeof(tail), &tail, sizeof(tail));
	if (buf[i]) {
		uint64_t h, t;
		memcpy(&h, buf[i], sizeof(h));
		memcpy(&t, buf[i] + len[i] - sizeof(t), sizeof(t));
		if (h != wl_tag(buf[i], len[i], key[i]) || t != ~h)
			wl_fail("buffer %u (%zu bytes at %p) overwritten", i, len[i],
				(void *)buf[i]);
		free(buf[i]);
	}
	buf[i] = p;
	len[i] = n;
	key[i] = k;
}

int main(int argc, char **argv)
{
	uint64_t steps = wl_scaled(STEPS, wl_scale(argc, argv));
	uint64_t rng = wl_seed(42), serial = 1;
	for (unsigned i = 0; i < LIVE; i++)
		make(i, wl_range(&rng, MIN_SIZE, MAX_SIZE), serial++);
	for (uint64_t s = 0; s < steps; s++) {
		unsigned i = (unsigned)(wl_rand(&rng) % LIVE);
		make(i, wl_range(&rng, MIN_SIZE, MAX_SIZE), serial++);
	}
	for (unsigned i = 0; i < LIVE; i++)
		free(buf[i]);
	return wl_done("%u live buffers of 5-25 MiB, %" PRIu64 " replacements", (unsigned)LIVE,
		       steps);
}
