/* workload.h: what the benchmark workloads share.
 *
 * Each workload is one C file, a normal program that uses the malloc family and is run
 * with LD_PRELOAD set to the allocator under test (or none, for glibc). It takes one
 * optional argument, a scale factor (default 1.0; `tools/uslub bench --quick` passes a
 * small one), and multiplies its iteration counts by it, never its thread counts, so a
 * quick run takes the same code paths as a full one.
 *
 * A benchmark that only times an allocator would reward one that hands out the same block
 * twice, so every object carries a pattern derived from its address, size and a seed, and
 * is checked before it is freed: any mismatch prints what went wrong and exits 1.
 *
 * Header-only; each workload is one translation unit. */
#ifndef USLUB_BENCH_WORKLOAD_H
#define USLUB_BENCH_WORKLOAD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WL_KIB ((size_t)1 << 10)
#define WL_MIB ((size_t)1 << 20)

/* Prints "NAME: message" and exits 1: the result the driver counts as a failed run. */
static inline void __attribute__((noreturn, format(printf, 1, 2))) wl_fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: FAILED: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static inline void *wl_malloc(size_t n)
{
	void *p = malloc(n);
	if (p == NULL)
		wl_fail("malloc(%zu) returned NULL", n);
	return p;
}

static inline void *wl_realloc(void *old, size_t n)
{
	void *p = realloc(old, n);
	if (p == NULL)
		wl_fail("realloc(%p, %zu) returned NULL", old, n);
	return p;
}

/* The scale factor from argv[1]: iteration counts are multiplied by it. */
static inline double wl_scale(int argc, char **argv)
{
	if (argc < 2)
		return 1.0;
	char *end;
	double s = strtod(argv[1], &end);
	if (*end != '\0' || !(s > 0.0) || s > 100.0)
		wl_fail("bad scale '%s' (want a number in (0, 100])", argv[1]);
	return s;
}

/* n scaled, at least 1, so a quick run still does each step once. */
static inline uint64_t wl_scaled(uint64_t n, double scale)
{
	double v = (double)n * scale;
	return v < 1.0 ? 1 : (uint64_t)v;
}

/* xorshift64*: fast, and the same sequence with every allocator. */
static inline uint64_t wl_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t wl_seed(uint64_t n)
{
	return 0x9e3779b97f4a7c15ULL * (n + 1) | 1;
}

/* Uniform in [lo, hi]. */
static inline size_t wl_range(uint64_t *state, size_t lo, size_t hi)
{
	return lo + (size_t)(wl_rand(state) % (hi - lo + 1));
}

/* Log-uniform in [lo, hi]: as many 16..32 B requests as 512 KiB..1 MiB ones would be too
 * few small ones; real programs skew small, and this skews the same way. */
static inline size_t wl_log_range(uint64_t *state, size_t lo, size_t hi)
{
	unsigned bits_lo = 63 - (unsigned)__builtin_clzll(lo);
	unsigned bits_hi = 63 - (unsigned)__builtin_clzll(hi);
	unsigned b = bits_lo + (unsigned)(wl_rand(state) % (bits_hi - bits_lo + 1));
	size_t base = (size_t)1 << b;
	size_t n = base + (size_t)(wl_rand(state) % base);
	return n < lo ? lo : n > hi ? hi : n;
}

/* The pattern word of an object: the address alone would let a block handed out twice to
 * the same size pass, so the key (a per-object serial) goes in too. */
static inline uint64_t wl_tag(const void *p, size_t size, uint64_t key)
{
	return ((uintptr_t)p * 0xff51afd7ed558ccdULL) ^ (size * 0xc4ceb9fe1a85ec53ULL) ^ key;
}

/* Marks an object: the tag in its first and last words (or bytes, for tiny ones) and,
 * for objects up to 256 bytes, every byte, so a neighbour's overrun shows too. Large
 * objects are marked every 4 KiB, which touches each page once, as a program would.
 * Not inlined: GCC, seeing the malloc size range at the call site, unrolls the loop past
 * it and warns (-Wstringop-overflow) about iterations that never run. */
static __attribute__((noinline, unused)) void wl_fill(void *p, size_t size, uint64_t key)
{
	unsigned char *b = p;
	uint64_t t = wl_tag(p, size, key);
	if (size < 16) {
		for (size_t i = 0; i < size; i++)
			b[i] = (unsigned char)(t >> (8 * (i % 8)));
		return;
	}
	if (size <= 256) {
		for (size_t i = 0; i + 16 <= size; i += 8)
			memcpy(b + i, &t, 8);
	} else {
		for (size_t i = 0; i + 16 <= size; i += 4096)
			memcpy(b + i, &t, 8);
	}
	memcpy(b + size - 8, &t, 8);
}

/* Checks what wl_fill wrote; the first `size` bytes of a realloc'ed object were marked
 * for its old address, so realloc callers check before and fill again after. */
static __attribute__((noinline, unused)) int wl_ok(const void *p, size_t size, uint64_t key)
{
	const unsigned char *b = p;
	uint64_t t = wl_tag(p, size, key), w;
	if (size < 16) {
		for (size_t i = 0; i < size; i++)
			if (b[i] != (unsigned char)(t >> (8 * (i % 8))))
				return 0;
		return 1;
	}
	size_t step = size <= 256 ? 8 : 4096;
	for (size_t i = 0; i + 16 <= size; i += step) {
		memcpy(&w, b + i, 8);
		if (w != t)
			return 0;
	}
	memcpy(&w, b + size - 8, 8);
	return w == t;
}

static inline void wl_check(const void *p, size_t size, uint64_t key)
{
	if (!wl_ok(p, size, key))
		wl_fail("object %p (%zu bytes, key %" PRIu64 ") was overwritten", p, size, key);
}

static inline void wl_check_aligned(const void *p, size_t size)
{
	size_t align = size >= 16 ? 16 : 8;
	if ((uintptr_t)p & (align - 1))
		wl_fail("malloc(%zu) returned %p, not %zu-aligned", size, p, align);
}

static inline pthread_t wl_spawn(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	int err = pthread_create(&t, NULL, fn, arg);
	if (err != 0)
		wl_fail("pthread_create: %s", strerror(err));
	return t;
}

static inline void wl_join(pthread_t t)
{
	int err = pthread_join(t, NULL);
	if (err != 0)
		wl_fail("pthread_join: %s", strerror(err));
}

/* The last line of every workload: what was done, so a log shows that it ran in full. */
static inline int wl_done(const char *fmt, ...)
{
	va_list ap;
	printf("%s: ok: ", program_invocation_short_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	return 0;
}

#endif
