/* test_util.h: what every test in C shares (unit, API, stress, fork, churn, bad input...).
 *
 * - CHECK / CHECKF / CHECK_EQ count every assertion; a failure prints file:line, the
 *   condition and the values, and the test exits non-zero at the end (tu_summary).
 * - tu_clean_env() re-executes the test without USLUB_STATS / USLUB_STATS_FILE, so a
 *   statistics dump asked for in the caller's environment does not mix with the test.
 * - tu_totals_fn() finds uslub_get_totals: called directly in the linked (prefixed)
 *   build, looked up with dlsym() under LD_PRELOAD, where finding it proves that the
 *   preloaded library is the one answering.
 * - tu_opaque() hides a value from the optimiser, so the compiler neither folds a call
 *   such as malloc(SIZE_MAX) nor warns about a deliberate bad free().
 *
 * Header-only; each test is one translation unit. */
#ifndef USLUB_TEST_UTIL_H
#define USLUB_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "uslub.h"

#define TU_MIB ((size_t)1 << 20)
#define TU_KIB ((size_t)1 << 10)

/* ---- the malloc family, both ways ------------------------------------------------ */

/* A test built twice: with -DUSLUB_PREFIXED it is linked with the engine and calls the
 * uslub_ names beside glibc's malloc; without, it calls the standard names and runs under
 * LD_PRELOAD=libuslub.so. */
#include <malloc.h>
#ifdef USLUB_PREFIXED
#define MALLOC(n)		  uslub_malloc(n)
#define FREE(p)			  uslub_free(p)
#define CALLOC(n, s)		  uslub_calloc(n, s)
#define REALLOC(p, n)		  uslub_realloc(p, n)
#define REALLOCARRAY(p, n, s)	  uslub_reallocarray(p, n, s)
#define POSIX_MEMALIGN(out, a, n) uslub_posix_memalign(out, a, n)
#define ALIGNED_ALLOC(a, n)	  uslub_aligned_alloc(a, n)
#define MEMALIGN(a, n)		  uslub_memalign(a, n)
#define VALLOC(n)		  uslub_valloc(n)
#define PVALLOC(n)		  uslub_pvalloc(n)
#define USABLE_SIZE(p)		  uslub_malloc_usable_size(p)
#define MALLOC_TRIM(pad)	  uslub_malloc_trim(pad)
#define VARIANT			  "linked, uslub_ names"
#else
#define MALLOC(n)		  malloc(n)
#define FREE(p)			  free(p)
#define CALLOC(n, s)		  calloc(n, s)
#define REALLOC(p, n)		  realloc(p, n)
#define REALLOCARRAY(p, n, s)	  reallocarray(p, n, s)
#define POSIX_MEMALIGN(out, a, n) posix_memalign(out, a, n)
#define ALIGNED_ALLOC(a, n)	  aligned_alloc(a, n)
#define MEMALIGN(a, n)		  memalign(a, n)
#define VALLOC(n)		  valloc(n)
#define PVALLOC(n)		  pvalloc(n)
#define USABLE_SIZE(p)		  malloc_usable_size(p)
#define MALLOC_TRIM(pad)	  malloc_trim(pad)
#define VARIANT			  "standard names under LD_PRELOAD"
#endif

/* ---- counted assertions ---------------------------------------------------------- */

static unsigned long tu_checks;
static unsigned long tu_failures;
enum { TU_MAX_REPORTED = 60 };

/* Counts one check; on failure prints its place and condition and returns 1 so the
 * caller can add details. Past TU_MAX_REPORTED failures only the count goes on. */
static inline int tu_check_failed(int ok, const char *file, int line, const char *cond)
{
	tu_checks++;
	if (ok)
		return 0;
	tu_failures++;
	if (tu_failures > TU_MAX_REPORTED)
		return 0;
	fprintf(stderr, "FAIL %s:%d: %s\n", file, line, cond);
	if (tu_failures == TU_MAX_REPORTED)
		fprintf(stderr, "(further failures are counted, not printed)\n");
	return 1;
}

#define CHECK(cond) ((void)tu_check_failed((cond) ? 1 : 0, __FILE__, __LINE__, #cond))

/* CHECKF(cond, "fmt", ...): the details are printed only when cond is false. */
#define CHECKF(cond, ...)                                                                          \
	do {                                                                                       \
		if (tu_check_failed((cond) ? 1 : 0, __FILE__, __LINE__, #cond)) {                  \
			fprintf(stderr, "    ");                                                   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		uintmax_t tu_a_ = (uintmax_t)(a), tu_b_ = (uintmax_t)(b);                          \
		CHECKF(tu_a_ == tu_b_, "%s = %ju (%#jx), %s = %ju (%#jx)", #a, tu_a_, tu_a_, #b,   \
		       tu_b_, tu_b_);                                                              \
	} while (0)

#define CHECK_ALIGNED(p, align)                                                                    \
	CHECKF(((uintptr_t)(p) & ((uintptr_t)(align)-1)) == 0, "%p is not %zu-aligned",            \
	       (void *)(p), (size_t)(align))

/* Prints "<name>: N checks passed" or the failure count; returns the exit status. */
static inline int tu_summary(const char *name)
{
	fflush(stdout);
	if (tu_failures == 0) {
		printf("%s: %lu checks passed\n", name, tu_checks);
		fflush(stdout);
		return 0;
	}
	printf("%s: %lu of %lu checks FAILED\n", name, tu_failures, tu_checks);
	fflush(stdout);
	return 1;
}

/* Prints a section heading: every test says what it checks. */
static inline void tu_section(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("  - ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
}

/* ---- environment ------------------------------------------------------------------ */

/* The statistics dump goes to stderr at exit; tests that read stderr or print their own
 * report must not see it. Re-executing is the only way to drop a variable the library
 * already read at load time. */
static inline void tu_clean_env(char **argv)
{
	if (getenv("USLUB_STATS") == NULL && getenv("USLUB_STATS_FILE") == NULL)
		return;
	unsetenv("USLUB_STATS");
	unsetenv("USLUB_STATS_FILE");
	execv("/proc/self/exe", argv);
	perror("tu_clean_env: execv(/proc/self/exe), going on with the variables unset");
}

/* ---- the allocator's own figures ------------------------------------------------- */

typedef void (*tu_get_totals_fn)(struct uslub_totals *);

static inline tu_get_totals_fn tu_totals_fn(void)
{
#ifdef USLUB_PREFIXED
	return uslub_get_totals;
#else
	void *sym = dlsym(RTLD_DEFAULT, "uslub_get_totals");
	tu_get_totals_fn fn = NULL;
	memcpy(&fn, &sym, sizeof(fn) < sizeof(sym) ? sizeof(fn) : sizeof(sym));
	return fn;
#endif
}

/* in_use in bytes, or 0 when uslub is not there (the caller checked tu_totals_fn). */
static inline uint64_t tu_in_use(void)
{
	tu_get_totals_fn fn = tu_totals_fn();
	struct uslub_totals t;
	if (fn == NULL)
		return 0;
	memset(&t, 0, sizeof(t));
	fn(&t);
	return t.in_use;
}

/* ---- small helpers ----------------------------------------------------------------- */

/* Hides a value from the optimiser (no folding, no -Walloc-size / -Wfree-nonheap-object
 * warnings for deliberate misuse). */
static inline size_t tu_opaque_size(size_t n)
{
	__asm__ volatile("" : "+r"(n));
	return n;
}

static inline void *tu_opaque(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* Resident set size in bytes (0 when unreadable), from /proc/self/smaps_rollup, which
 * counts the pages mapped; /proc/self/statm only where that is missing. Since Linux 6.2
 * statm reads the mm's per-CPU counters without summing them, off by up to 32 pages a
 * CPU: 1.3 KiB a thread in a test of 200 parked threads with a 20 KiB bound, which read
 * 21.2 KiB under a parallel test run where smaps_rollup reads 18.8-18.9. */
static inline size_t tu_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	if (f != NULL) {
		char line[256];
		unsigned long kib;
		while (fgets(line, sizeof(line), f) != NULL)
			if (sscanf(line, "Rss: %lu kB", &kib) == 1) {
				fclose(f);
				return (size_t)kib << 10;
			}
		fclose(f);
	}
	f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, resident = 0;
	if (f == NULL)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static inline double tu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64*: deterministic, seedable, good enough for choosing sizes. */
static inline uint64_t tu_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static inline uint64_t tu_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* A byte pattern that depends on a key and on the offset. Words are the fast path;
 * pattern byte i is byte (i % 8) of word (i / 8), so a fill may start anywhere. */
static inline uint64_t tu_pattern_word(uint64_t key, size_t word)
{
	return key ^ ((uint64_t)word * 0x9E3779B97F4A7C15ULL);
}

static inline unsigned char tu_pattern_byte(uint64_t key, size_t i)
{
	uint64_t w = tu_pattern_word(key, i / 8);
	return (unsigned char)(w >> (8 * (i % 8)));
}

/* Fills bytes [from, to) of p with the key's pattern. */
static inline void tu_fill(unsigned char *p, size_t from, size_t to, uint64_t key)
{
	size_t i = from;
	while (i < to && (i % 8) != 0) {
		p[i] = tu_pattern_byte(key, i);
		i++;
	}
	for (; i + 8 <= to; i += 8) {
		uint64_t w = tu_pattern_word(key, i / 8);
		memcpy(p + i, &w, 8);
	}
	for (; i < to; i++)
		p[i] = tu_pattern_byte(key, i);
}

/* Checks bytes [0, n) of p against the key's pattern; returns the first bad offset, or
 * (size_t)-1 when all match. */
static inline size_t tu_verify(const unsigned char *p, size_t n, uint64_t key)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		if (w != tu_pattern_word(key, i / 8))
			break;
	}
	for (; i < n; i++)
		if (p[i] != tu_pattern_byte(key, i))
			return i;
	return (size_t)-1;
}

#endif
