/* Random numbers without libc: splitmix64 over a seed from the kernel's AT_RANDOM. */
#include "os/os.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/auxv.h>

uint64_t uslub_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t uslub_random_seed(void)
{
	uint64_t seed = (uintptr_t)&seed, r[2];
	const void *bytes = (const void *)getauxval(AT_RANDOM);
	if (bytes) {
		memcpy(r, bytes, sizeof(r)); /* not necessarily aligned */
		seed ^= r[0] ^ (r[1] << 1);
	}
	return seed;
}

static _Atomic uint64_t random_state;

void uslub_random_init(uint64_t *seed)
{
	atomic_store_explicit(&random_state, uslub_splitmix64(seed), memory_order_relaxed);
}

uint64_t uslub_random(void)
{
	uint64_t x =
	    atomic_fetch_add_explicit(&random_state, 0x9e3779b97f4a7c15ULL, memory_order_relaxed);
	return uslub_splitmix64(&x);
}
