/* objcache: object caches against malloc/free, and uslub_free_rcu against call_rcu + free
 * (issue 27; results in tools/bench/results/objcache.md). Links libuslub.so, whose
 * malloc is then the process's, so both sides run on uslub.
 *
 *   objcache pairs SIZE N      N alloc+free pairs: malloc/free, uslub_cache_alloc/free
 *   objcache bulk SIZE N       N objects in batches of 64: alloc_bulk/free_bulk vs a loop
 *   objcache rcu N             N objects of 64 B retired: uslub_free_rcu vs one call_rcu
 *                              (memb flavour) + free per object; ns per object and the
 *                              peak resident memory of each phase (VmHWM reset between)
 *   objcache count MODE SIZE N the loop of one variant alone, untimed, for callgrind
 *                              (tools/bench/objcache_ops.sh): MODE malloc (N malloc+free
 *                              pairs), cache (N uslub_cache_alloc+free pairs), batch (N
 *                              rounds of 64 mallocs then 64 frees), cbatch (the same
 *                              with uslub_cache_alloc/free), bulk (N rounds of
 *                              alloc_bulk/free_bulk of 64)
 * Prints one line per variant: name, ns per operation. objcache_peer (the same source,
 * -DPEER, not linked with uslub) runs the malloc lines of pairs and bulk alone, under
 * LD_PRELOAD of the allocator measured (tools/bench/objcache_peers.py). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef PEER
#include <urcu/urcu-memb.h>

#include "uslub.h"
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#ifndef PEER
/* Peak resident KiB since the last reset (Linux: VmHWM, reset by writing 5 to clear_refs). */
static long peak_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}
static void peak_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

#endif

static void *volatile sink;

/* objcache_peer, the same source without uslub (-DPEER), runs the malloc sides alone
 * under LD_PRELOAD of any allocator; only the linked objcache has the caches. */
#ifdef PEER
struct uslub_cache;
#define uslub_cache_alloc(c)		NULL
#define uslub_cache_free(c, p)		(void)(p)
#define uslub_cache_alloc_bulk(c, n, v) ((size_t)(n))
#define uslub_cache_free_bulk(c, n, v)	(void)(v)
static struct uslub_cache *cache_create(size_t size)
{
	(void)size;
	return NULL;
}
static void cache_destroy(struct uslub_cache *c)
{
	(void)c;
}
#else
static struct uslub_cache *cache_create(size_t size)
{
	return uslub_cache_create("bench", size, 0, USLUB_CACHE_NO_MERGE, NULL);
}
static void cache_destroy(struct uslub_cache *c)
{
	uslub_cache_destroy(c);
}
#endif

static void pairs(size_t size, long n)
{
	struct uslub_cache *c = cache_create(size);
	for (int round = 0; round < 2; round++) {
		double t0 = now();
		for (long i = 0; i < n; i++) {
			void *p = malloc(size);
			sink = p;
			free(p);
		}
		double t1 = now();
		for (long i = 0; i < n && c; i++) {
			void *p = uslub_cache_alloc(c);
			sink = p;
			uslub_cache_free(c, p);
		}
		double t2 = now();
		if (round)
			printf("malloc_free %.2f\n", (t1 - t0) * 1e9 / n);
		if (round && c)
			printf("cache_alloc_free %.2f\n", (t2 - t1) * 1e9 / n);
	}
	cache_destroy(c);
}

static void bulk(size_t size, long n)
{
	struct uslub_cache *c = cache_create(size);
	void *v[64];
	for (int round = 0; round < 2; round++) {
		double t0 = now();
		for (long i = 0; i < n; i += 64) {
			for (int k = 0; k < 64; k++)
				v[k] = malloc(size);
			sink = v[5];
			for (int k = 0; k < 64; k++)
				free(v[k]);
		}
		double t1 = now();
		for (long i = 0; i < n && c; i += 64) {
			for (int k = 0; k < 64; k++)
				v[k] = uslub_cache_alloc(c);
			sink = v[5];
			for (int k = 0; k < 64; k++)
				uslub_cache_free(c, v[k]);
		}
		double t2 = now();
		for (long i = 0; i < n && c; i += 64) {
			if (uslub_cache_alloc_bulk(c, 64, v) != 64)
				abort();
			sink = v[5];
			uslub_cache_free_bulk(c, 64, v);
		}
		double t3 = now();
		if (round)
			printf("malloc_free_x64 %.2f\n", (t1 - t0) * 1e9 / n);
		if (round && c)
			printf("cache_alloc_free_x64 %.2f\ncache_bulk_x64 %.2f\n",
			       (t2 - t1) * 1e9 / n, (t3 - t2) * 1e9 / n);
	}
	cache_destroy(c);
}

#ifndef PEER
struct obj {
	struct rcu_head head;
	char data[48];
};
static void obj_free(struct rcu_head *h)
{
	free(caa_container_of(h, struct obj, head));
}

static void rcu(long n)
{
	urcu_memb_register_thread();
	uslub_set_rcu(urcu_memb_call_rcu, urcu_memb_barrier);
	peak_reset();
	long base = peak_kib();
	double t0 = now();
	for (long i = 0; i < n; i++) {
		struct obj *o = malloc(sizeof(*o));
		o->data[0] = 1;
		urcu_memb_call_rcu(&o->head, obj_free);
	}
	urcu_memb_barrier();
	double t1 = now();
	long peak_call = peak_kib() - base;
	peak_reset();
	base = peak_kib();
	double t2 = now();
	for (long i = 0; i < n; i++) {
		struct obj *o = malloc(sizeof(*o));
		o->data[0] = 1;
		uslub_free_rcu(o);
	}
	uslub_rcu_barrier();
	double t3 = now();
	long peak_free = peak_kib() - base;
	printf("call_rcu_free %.2f peak_kib %ld\nuslub_free_rcu %.2f peak_kib %ld\n",
	       (t1 - t0) * 1e9 / n, peak_call, (t3 - t2) * 1e9 / n, peak_free);
	urcu_memb_unregister_thread();
}

/* The compiler must see each pointer escape, or it may pair and drop malloc/free
 * (opcount.c). */
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void count_loop(struct uslub_cache *c, char mode, size_t size, long n)
{
	void *v[64];
	for (long i = 0; i < n; i++) {
		void *p;
		switch (mode) {
		case 'm':
			p = malloc(size);
			escape(p);
			free(p);
			break;
		case 'c':
			p = uslub_cache_alloc(c);
			escape(p);
			uslub_cache_free(c, p);
			break;
		case 'a':
			for (int k = 0; k < 64; k++) {
				v[k] = malloc(size);
				escape(v[k]);
			}
			for (int k = 0; k < 64; k++)
				free(v[k]);
			break;
		case 'k':
			for (int k = 0; k < 64; k++) {
				v[k] = uslub_cache_alloc(c);
				escape(v[k]);
			}
			for (int k = 0; k < 64; k++)
				uslub_cache_free(c, v[k]);
			break;
		default:
			if (uslub_cache_alloc_bulk(c, 64, v) != 64)
				abort();
			escape(v[0]);
			uslub_cache_free_bulk(c, 64, v);
		}
	}
}

/* One warm-up round first, so the first slab is set up in both of the driver's runs
 * alike (opcount.c). */
static int count(const char *mode, size_t size, long n)
{
	char m = !strcmp(mode, "malloc")   ? 'm'
		 : !strcmp(mode, "cache")  ? 'c'
		 : !strcmp(mode, "batch")  ? 'a'
		 : !strcmp(mode, "cbatch") ? 'k'
		 : !strcmp(mode, "bulk")   ? 'b'
					   : 0;
	if (!m)
		return 2;
	struct uslub_cache *c = uslub_cache_create("bench", size, 0, USLUB_CACHE_NO_MERGE, NULL);
	count_loop(c, m, size, 1);
	count_loop(c, m, size, n);
	return 0;
}

#endif

int main(int argc, char **argv)
{
#ifndef PEER
	if (argc >= 5 && !strcmp(argv[1], "count"))
		return count(argv[2], strtoul(argv[3], NULL, 0), atol(argv[4]));
	if (argc >= 3 && !strcmp(argv[1], "rcu")) {
		rcu(atol(argv[2]));
		return 0;
	}
#endif
	if (argc >= 4 && !strcmp(argv[1], "pairs"))
		pairs(strtoul(argv[2], NULL, 0), atol(argv[3]));
	else if (argc >= 4 && !strcmp(argv[1], "bulk"))
		bulk(strtoul(argv[2], NULL, 0), atol(argv[3]));
	else {
		fprintf(stderr, "usage: objcache pairs|bulk SIZE N | rcu N | count MODE SIZE N\n");
		return 2;
	}
	return 0;
}
