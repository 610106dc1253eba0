/* test_objcache_fast.c: the object caches' fast paths and bulk calls (issue 27):
 *   - a warm uslub_cache_alloc/free pair takes the sheaf's fast path both ways (the
 *     cache's alloc_fastpath and free_fastpath move by the pairs, its slow paths not),
 *     for a plain cache and for one with a constructor (objects behind a header)
 *   - the fast free still stops an object of another cache, and a double free, naming
 *     the program's pointer and the caches, with the sheaf empty or full
 *   - uslub_cache_alloc_bulk of no more than the sheaf holds is one pass over it (every
 *     object counted on the fast path); a larger one crosses refills and gives distinct,
 *     constructed objects; uslub_cache_free_bulk stops at a wrong object in the middle
 *     (another cache's, a double) as the single free does
 *   - full sheaves of an object cache go to its barn and come back from it (the dump's
 *     barn_put, barn_get), and uslub_cache_shrink empties the barns (no slab left)
 *   - uslub_cache_destroy of a cache with live objects, under U (STORE_USER): the count,
 *     and the objects counted by allocation site, each site an address in the function
 *     that called uslub_cache_alloc
 *   - caches that do not merge take slots up to the 64 a process has (this run's earlier
 *     caches among them), each one working beside the others; the next is NULL with
 *     ENOSPC, and the caches made before keep working
 * Every cache is a debug cache in the sanitizer builds and under USLUB_DEBUG, with no
 * fast path: there the counting checks are skipped ("debug" argument), the rest run.
 *
 * Built linked (-DUSLUB_PREFIXED) and, for the preload suite, against libuslub.so. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_util.h"

static bool fast; /* plain caches have their fast paths (no debug build or setting) */

static struct uslub_cache_info info_of(const char *name)
{
	struct uslub_cache_info ci;
	memset(&ci, 0, sizeof(ci));
	CHECKF(uslub_cache_info(name, &ci) == 0, "no cache %s", name);
	return ci;
}

#define TAG 0x6f626a6563746167ULL
struct obj {
	uint64_t tag;
	uint64_t word; /* where the engine's free mark would go without a header */
	char rest[48];
};
static void obj_ctor(void *p)
{
	struct obj *o = p;
	o->tag = TAG;
	o->word = 0;
}

static void test_pair_fast(const char *name, void (*ctor)(void *))
{
	tu_section("%s: a warm alloc/free pair takes the fast path both ways", name);
	struct uslub_cache *c =
	    uslub_cache_create(name, sizeof(struct obj), 0, USLUB_CACHE_NO_MERGE, ctor);
	CHECK(c != NULL);
	if (!c)
		return;
	/* Warm: the sheaf open and holding an object. The first object is an early one,
	 * from a slab every thread takes from, and its free opens the sheaf without keeping
	 * it (sheaf.c): the second pair fills the sheaf. */
	uslub_cache_free(c, uslub_cache_alloc(c));
	void *w = uslub_cache_alloc(c);
	uslub_cache_free(c, w);
	struct uslub_cache_info a = info_of(name);
	enum { PAIRS = 1000 };
	bool same = true, kept = true;
	for (int i = 0; i < PAIRS; i++) {
		struct obj *o = uslub_cache_alloc(c);
		same &= o == w; /* the sheaf's top, each time */
		kept &= !ctor || (o->tag == TAG && o->word == (uint64_t)i);
		o->word = (uint64_t)i + 1;
		uslub_cache_free(c, o);
	}
	CHECK(same);
	CHECKF(kept, "a constructed object changed between free and alloc");
	struct uslub_cache_info b = info_of(name);
	if (fast) {
		CHECK_EQ(b.alloc_fastpath - a.alloc_fastpath, PAIRS);
		CHECK_EQ(b.free_fastpath - a.free_fastpath, PAIRS);
		CHECK_EQ(b.alloc_slowpath - a.alloc_slowpath, 0);
		CHECK_EQ(b.free_slowpath - a.free_slowpath, 0);
	}
	CHECK_EQ(b.active_objects, 0);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

/* ---- bulk ------------------------------------------------------------------------- */

static void test_bulk(void)
{
	tu_section("bulk: one pass over the sheaf; across refills distinct constructed objects");
	struct uslub_cache *c =
	    uslub_cache_create("of-bulk", sizeof(struct obj), 0, USLUB_CACHE_NO_MERGE, obj_ctor);
	CHECK(c != NULL);
	if (!c)
		return;
	enum { N = 2000 };
	static void *v[N];
	/* Fill the sheaf: N out and back leaves it full (the rest in the slabs). */
	CHECK_EQ(uslub_cache_alloc_bulk(c, N, v), N);
	bool ok = true;
	for (int i = 0; i < N; i++) {
		struct obj *o = v[i];
		ok &= o != NULL && o->tag == TAG && ((uintptr_t)o & 15) == 0;
		o->word = 0x1234;
	}
	CHECKF(ok, "an object without its constructed tag or alignment");
	uintptr_t *sorted = malloc(N * sizeof(*sorted));
	for (int i = 0; i < N; i++)
		sorted[i] = (uintptr_t)v[i];
	int dup = 0;
	for (int i = 1; i < N; i++) /* insertion sort: N is small */
		for (int k = i; k > 0 && sorted[k - 1] > sorted[k]; k--) {
			uintptr_t t = sorted[k];
			sorted[k] = sorted[k - 1];
			sorted[k - 1] = t;
		}
	for (int i = 1; i < N; i++)
		dup += sorted[i] == sorted[i - 1] || sorted[i] - sorted[i - 1] < sizeof(struct obj);
	free(sorted);
	CHECK_EQ(dup, 0);
	CHECK_EQ(info_of("of-bulk").active_objects, N);
	uslub_cache_free_bulk(c, N, v);
	CHECK_EQ(info_of("of-bulk").active_objects, 0);
	/* A small request now comes off the full sheaf, all on the fast path, and the
	 * objects keep the state the program left. */
	struct uslub_cache_info a = info_of("of-bulk");
	CHECK_EQ(uslub_cache_alloc_bulk(c, 8, v), 8);
	struct uslub_cache_info b = info_of("of-bulk");
	if (fast) {
		CHECK_EQ(b.alloc_fastpath - a.alloc_fastpath, 8);
		CHECK_EQ(b.alloc_slowpath - a.alloc_slowpath, 0);
	}
	for (int i = 0; i < 8; i++)
		CHECK(((struct obj *)v[i])->word == 0x1234);
	uslub_cache_free_bulk(c, 8, v);
	CHECK_EQ(uslub_cache_alloc_bulk(c, 0, v), 0);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

/* The counter `key` of cache `name` in the JSON dump, or -1. */
static long long json_counter(const char *name, const char *key)
{
	char path[] = "/tmp/test_objcache_fast.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	uslub_stats_print(fd, 1);
	lseek(fd, 0, SEEK_SET);
	static char text[1 << 20];
	ssize_t len = read(fd, text, sizeof(text) - 1);
	text[len > 0 ? len : 0] = '\0';
	close(fd);
	unlink(path);
	char want[64];
	snprintf(want, sizeof(want), "\"name\": \"%s\"", name);
	const char *at = strstr(text, want);
	snprintf(want, sizeof(want), "\"%s\": ", key);
	const char *next = at ? strstr(at + 1, "\"name\": ") : NULL;
	const char *k = at ? strstr(at, want) : NULL;
	if (!k || (next && k > next))
		return -1;
	return strtoll(k + strlen(want), NULL, 10);
}

static void test_barn(void)
{
	tu_section(
	    "an object cache's full sheaves go to its barn and come back; shrink empties it");
	struct uslub_cache *c = uslub_cache_create("of-barn", 96, 0, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(c != NULL);
	if (!c)
		return;
	enum { N = 600 };
	static void *v[N];
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++)
			CHECK((v[i] = uslub_cache_alloc(c)) != NULL);
		for (int i = 0; i < N; i++)
			uslub_cache_free(c, v[i]);
	}
	if (fast) {
		CHECK(json_counter("of-barn", "barn_put") > 0);
		CHECK(json_counter("of-barn", "barn_get") > 0);
	}
	CHECK_EQ(info_of("of-barn").active_objects, 0);
	uslub_cache_shrink(c);
	/* Nothing left in a sheaf or barn to hold a slab. */
	CHECK_EQ(info_of("of-barn").slabs, 0);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

/* ---- bad frees through the fast paths ----------------------------------------------- */

static struct uslub_cache *ca, *cb;
static char *expect_ptr; /* the program's pointer the report must name */

static void case_wrong_warm(void)
{
	void *w = uslub_cache_alloc(cb);
	uslub_cache_free(cb, w); /* cb's sheaf open */
	void *p = uslub_cache_alloc(ca);
	uslub_cache_free(cb, p);
}

static void case_wrong_full(void)
{
	static void *v[200];
	/* Both sheaves full: the test of the page, not the sheaf's room, stops it. */
	uslub_cache_alloc_bulk(cb, 200, v);
	uslub_cache_free_bulk(cb, 200, v);
	uslub_cache_alloc_bulk(ca, 200, v);
	void *p = v[199];
	uslub_cache_free_bulk(ca, 199, v);
	uslub_cache_free(cb, p);
}

static void case_double_ctor(void)
{
	void *p = uslub_cache_alloc(ca);
	uslub_cache_free(ca, p);
	fprintf(stderr, "object %p\n", p);
	uslub_cache_free(ca, p);
}

static void case_bulk_wrong(void)
{
	void *v[10];
	uslub_cache_alloc_bulk(ca, 10, v);
	v[5] = uslub_cache_alloc(cb);
	uslub_cache_free_bulk(ca, 10, v);
}

static int wrong_at;
static void case_bulk_wrong_at(void)
{
	static void *v[200];
	uslub_cache_alloc_bulk(ca, 200, v);
	v[wrong_at] = uslub_cache_alloc(cb);
	uslub_cache_free_bulk(ca, 200, v);
}

static void case_bulk_double(void)
{
	void *v[10];
	uslub_cache_alloc_bulk(ca, 10, v);
	v[7] = v[2];
	uslub_cache_free_bulk(ca, 10, v);
}

static int run_child(void (*fn)(void), char *out, size_t cap)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		dup2(fds[1], 2);
		alarm(20);
		fn();
		_exit(0);
	}
	close(fds[1]);
	size_t len = 0;
	ssize_t n;
	while (len < cap - 1 && (n = read(fds[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

static void test_bad_frees(void)
{
	tu_section("bad frees through the fast paths stop the program, both caches named");
	ca = uslub_cache_create("of-apple", sizeof(struct obj), 0, 0, obj_ctor);
	cb = uslub_cache_create("of-pear", sizeof(struct obj), 0, 0, obj_ctor);
	CHECK(ca && cb);
	if (!ca || !cb)
		return;
	struct {
		void (*fn)(void);
		const char *text[3];
	} cases[] = {
	    {case_wrong_warm, {"freed to cache of-pear", "of-apple", NULL}},
	    {case_wrong_full, {"freed to cache of-pear", "of-apple", NULL}},
	    {case_double_ctor, {"double free", "of-apple", NULL}},
	    {case_bulk_wrong, {"of-pear freed to cache of-apple", NULL, NULL}},
	    {case_bulk_double, {"double free", "of-apple", NULL}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[4096];
		int st = run_child(cases[i].fn, out, sizeof(out));
		CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "case %zu: status %#x: %s", i,
		       st, out);
		for (int k = 0; k < 3; k++)
			if (cases[i].text[k])
				CHECKF(strstr(out, cases[i].text[k]) != NULL,
				       "case %zu: no '%s' in: %s", i, cases[i].text[k], out);
	}
	/* Pear's object at each place of a bulk free of apple's: the sheaf fills within the
	 * pass (28 objects), so one of them meets it full, where the pass hands the object
	 * to the single free. */
	int missed = 0;
	for (wrong_at = 20; wrong_at < 80; wrong_at++) {
		char out[4096];
		int st = run_child(case_bulk_wrong_at, out, sizeof(out));
		missed += !(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
			    strstr(out, "of-pear freed to cache of-apple"));
	}
	CHECK_EQ(missed, 0);
	/* The double free names the program's pointer, not the slot's in front of it. */
	char out[4096];
	run_child(case_double_ctor, out, sizeof(out));
	char *at = strstr(out, "object 0x");
	CHECK(at != NULL);
	if (at) {
		char ptr[32];
		sscanf(at + 7, "%31s", ptr);
		expect_ptr = ptr;
		const char *report = strstr(at + 1, "double free");
		CHECKF(report && strstr(report, expect_ptr), "%s not in: %s", ptr, out);
	}
}

/* ---- destroy with live objects: their allocation sites under U ------------------------ */

static struct uslub_cache *leaky;
static void *kept[5];

/* Two call sites: the call is not the last thing each does, so it is no tail call and its
 * return address lies in the function. */
static __attribute__((noinline)) void *alloc_a(void)
{
	void *p = uslub_cache_alloc(leaky);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}
static __attribute__((noinline)) void *alloc_b(void)
{
	void *p = uslub_cache_alloc(leaky);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

static void case_destroy_leaky(void)
{
	fprintf(stderr, "destroy returned %zu\n", uslub_cache_destroy(leaky));
}

/* The count printed before " x 0x" for the site nearest after fn (within 256 bytes). */
static unsigned long site_count(const char *out, void *fn)
{
	unsigned long count = 0;
	uintptr_t best = 256;
	for (const char *at = strstr(out, " x 0x"); at; at = strstr(at + 1, " x 0x")) {
		uintptr_t dist = strtoull(at + 3, NULL, 16) - (uintptr_t)fn;
		const char *line = at;
		while (line > out && line[-1] != '\n')
			line--;
		if (dist < best) {
			best = dist;
			count = strtoul(line, NULL, 10);
		}
	}
	return count;
}

static void test_destroy_sites(void)
{
	tu_section("destroy with live objects under U: the count and the allocation sites");
	leaky = uslub_cache_create("of-leak", 72, 0, USLUB_CACHE_STORE_USER, NULL);
	CHECK(leaky != NULL);
	if (!leaky)
		return;
	for (int i = 0; i < 3; i++)
		kept[i] = alloc_a();
	for (int i = 3; i < 5; i++)
		kept[i] = alloc_b();
	void *gone = alloc_b();
	uslub_cache_free(leaky, gone);
	char out[4096];
	int st = run_child(case_destroy_leaky, out, sizeof(out));
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x: %s", st, out);
	CHECKF(strstr(out, "uslub_cache_destroy(of-leak): 5 objects still allocated") != NULL, "%s",
	       out);
	CHECKF(strstr(out, "objects remaining in of-leak") != NULL, "%s", out);
	CHECKF(strstr(out, "destroy returned 5") != NULL, "%s", out);
#if !defined(__SANITIZE_THREAD__)
	/* (ThreadSanitizer's function hooks keep the compiler from the tail calls that
	 * hand the program's call site down: there every site is the library's.) */
	CHECKF(site_count(out, (void *)alloc_a) == 3, "no '3 x' at alloc_a %p in: %s",
	       (void *)alloc_a, out);
	CHECKF(site_count(out, (void *)alloc_b) == 2, "no '2 x' at alloc_b %p in: %s",
	       (void *)alloc_b, out);
#endif
	CHECKF(strstr(out, "5 x 0x") || strstr(out, "3 x 0x"), "no site in: %s", out);
	/* Left alone: still the program's. */
	memset(kept[4], 0x11, 72);
	CHECK(((unsigned char *)kept[4])[71] == 0x11);
}

/* Last in the run: it takes every slot left. */
static void test_slots(void)
{
	tu_section("slots: caches that do not merge, up to ENOSPC");
	enum { MAX = 200, EACH = 40 };
	static struct uslub_cache *c[MAX];
	void *obj[EACH];
	unsigned n = 0;
	errno = 0;
	for (; n < MAX; n++) {
		char name[32];
		snprintf(name, sizeof(name), "of-slot-%u", n);
		c[n] = uslub_cache_create(name, 40 + 8 * (n % 8), 0, USLUB_CACHE_NO_MERGE, NULL);
		if (!c[n])
			break;
	}
	CHECKF(n < MAX && errno == ENOSPC, "made %u, errno %d", n, errno);
	/* More than the 24 slots of before, after the handful this run's tests took. */
	CHECKF(n >= 48, "only %u caches", n);
	for (unsigned i = 0; i < n; i++) {
		size_t size = 40 + 8 * (i % 8);
		for (unsigned k = 0; k < EACH; k++) {
			obj[k] = uslub_cache_alloc(c[i]);
			CHECK(obj[k] != NULL);
			memset(obj[k], (int)(i + k), size);
		}
		for (unsigned k = 0; k < EACH; k++) {
			CHECKF(((unsigned char *)obj[k])[size - 1] == (unsigned char)(i + k),
			       "cache %u object %u", i, k);
			uslub_cache_free(c[i], obj[k]);
		}
	}
	for (unsigned i = 0; i < n; i++)
		CHECK(uslub_cache_destroy(c[i]) == 0);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	fast = !(argc > 1 && strcmp(argv[1], "debug") == 0);
	printf("test_objcache_fast (%s): object caches' fast paths and bulk, issue 27\n", VARIANT);
	test_pair_fast("of-plain", NULL);
	test_pair_fast("of-ctor", obj_ctor);
	test_bulk();
	test_barn();
	test_bad_frees();
	test_destroy_sites();
	test_slots();
	return tu_summary("test_objcache_fast");
}
