/* test_objcache.c: object caches (uslub.h's uslub_cache_*, issue 27), each call's
 * contract:
 *   - create: size 0, size above 64 KiB, an alignment that is no power of two or above a
 *     page, unknown flags -> NULL with EINVAL; two caches may share a name
 *   - alloc/free: objects of the cache's size and alignment, distinct, writable; an
 *     object freed with free() goes back too; the statistics know the cache by name
 *   - ctor: runs once per object when its slab is carved, never per allocation; a freed
 *     object comes back in the state the program left it (no free pointer in it)
 *   - bulk: all n or 0; under USLUB_MEM_LIMIT a request that cannot be met takes nothing
 *   - shrink: empty slabs go back (slabs drop to 0)
 *   - destroy: returns the objects still allocated and leaves them readable
 *   - merging: compatible caches share one cache (USLUB_MERGE=0: never), NO_MERGE, a
 *     ctor and TYPESAFE_BY_RCU never merge; aliases appear in the JSON dump
 *   - bad frees stop the program naming the pointer and both caches: an object freed to
 *     another cache, a foreign pointer, a double free (forked children)
 *   - RCU: readers walk a liburcu-protected hash table while writers delete and
 *     re-insert objects of a TYPESAFE_BY_RCU cache and retire them with uslub_free_rcu;
 *     every object a reader sees carries the cache's type tag; slabs wait for a grace
 *     period (the stats' pending counts move and drain at uslub_rcu_barrier)
 *
 * Built linked (-DUSLUB_PREFIXED) and linked against libuslub.so run under LD_PRELOAD
 * (the same program both ways, as issue 27 asks). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <urcu/urcu-memb.h>

#include "test_util.h"

/* ---- contracts ------------------------------------------------------------------ */

static void test_create_errors(void)
{
	tu_section("create: bad size, alignment or flags -> NULL, EINVAL");
	struct {
		size_t size, align;
		unsigned flags;
	} bad[] = {{0, 0, 0}, {(64 << 10) + 1, 0, 0}, {64, 3, 0}, {64, 8192, 0}, {64, 0, 1u << 20}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		struct uslub_cache *c =
		    uslub_cache_create("bad", bad[i].size, bad[i].align, bad[i].flags, NULL);
		CHECKF(c == NULL && errno == EINVAL, "case %zu: %p errno %d", i, (void *)c, errno);
	}
	errno = 0;
	CHECK(uslub_cache_create(NULL, 64, 0, 0, NULL) == NULL && errno == EINVAL);
}

struct thing {
	uint64_t tag;
	uint64_t ctor_runs;
	char payload[40];
};
#define THING_TAG 0x7468696e67746167ULL

static atomic_ulong ctor_calls;
static void thing_ctor(void *p)
{
	struct thing *t = p;
	t->tag = THING_TAG;
	t->ctor_runs = 1; /* fresh slab memory need not be zero */
	t->payload[0] = '\0';
	atomic_fetch_add(&ctor_calls, 1);
}

static uint64_t active_of(const char *name)
{
	struct uslub_cache_info ci;
	if (uslub_cache_info(name, &ci) != 0)
		return UINT64_MAX;
	return ci.active_objects;
}

static void test_alloc_free(void)
{
	tu_section("alloc/free: size, alignment, distinct objects, free() too, stats by name");
	struct uslub_cache *c = uslub_cache_create("oc-plain", 200, 64, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(c != NULL);
	if (!c)
		return;
	enum { N = 1000 };
	static char *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = uslub_cache_alloc(c);
		CHECK(p[i] != NULL);
		CHECK_ALIGNED(p[i], 64);
		memset(p[i], i & 0xff, 200);
	}
	bool ok = true;
	for (int i = 0; i < N; i++)
		for (int k = 0; k < 200; k++)
			ok &= (unsigned char)p[i][k] == (i & 0xff);
	CHECKF(ok, "objects overlap");
	CHECK_EQ(active_of("oc-plain"), N);
	for (int i = 0; i < N; i += 2)
		uslub_cache_free(c, p[i]);
	for (int i = 1; i < N; i += 2)
		FREE(p[i]); /* free() of a cache's object */
	CHECK_EQ(active_of("oc-plain"), 0);
	uslub_cache_free(c, NULL);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

static void test_ctor(void)
{
	tu_section("ctor: once per object when carved, state kept across free and alloc");
	atomic_store(&ctor_calls, 0);
	struct uslub_cache *c =
	    uslub_cache_create("oc-ctor", sizeof(struct thing), 0, 0, thing_ctor);
	CHECK(c != NULL);
	if (!c)
		return;
	enum { N = 300, ROUNDS = 20 };
	static struct thing *t[N];
	unsigned long bad = 0, reused = 0;
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			t[i] = uslub_cache_alloc(c);
			CHECK(t[i] != NULL);
			char mine[40];
			snprintf(mine, sizeof(mine), "kept %p", (void *)t[i]);
			/* Fresh from the ctor, or as the program left it when it freed it:
			 * the tag and the second word too, where a free mark would go. */
			bool fresh = t[i]->payload[0] == '\0';
			reused += !fresh;
			bad += t[i]->tag != THING_TAG || t[i]->ctor_runs != 1 ||
			       (!fresh && strcmp(t[i]->payload, mine) != 0);
			snprintf(t[i]->payload, sizeof(t[i]->payload), "%s", mine);
		}
		for (int i = 0; i < N; i++) {
			if (r & 1)
				uslub_cache_free(c, t[i]);
			else
				FREE(t[i]); /* free() of an object with a header in front */
		}
	}
	CHECKF(bad == 0, "%lu objects came back changed", bad);
	/* A debug cache (the -debug variant) has no sheaves and wide red zones: its empty
	 * slabs beyond the node's min_partial are discarded, so fewer come back. */
	CHECKF(reused >= (ROUNDS - 1) * N / 4, "only %lu objects reused", reused);
	unsigned long calls = atomic_load(&ctor_calls);
	/* Once per object carved: a slab emptied and made again constructs again (a debug
	 * cache, which has no sheaves, does so often), never once per allocation. */
	CHECKF(calls >= N && calls < N * ROUNDS * 3 / 4, "ctor ran %lu times for %d objects x %d",
	       calls, N, ROUNDS);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

static void test_bulk_shrink_destroy(void)
{
	tu_section("bulk all-or-nothing, shrink, destroy with live objects");
	struct uslub_cache *c = uslub_cache_create("oc-bulk", 512, 0, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(c != NULL);
	if (!c)
		return;
	void *objs[4096];
	CHECK_EQ(uslub_cache_alloc_bulk(c, 4096, objs), 4096);
	CHECK_EQ(active_of("oc-bulk"), 4096);
	uslub_cache_free_bulk(c, 4096, objs);
	CHECK_EQ(active_of("oc-bulk"), 0);
	CHECK_EQ(uslub_cache_shrink(c), 0);
	struct uslub_cache_info ci;
	CHECK(uslub_cache_info("oc-bulk", &ci) == 0 && ci.slabs == 0);
	CHECK_EQ(uslub_cache_alloc_bulk(c, 0, objs), 0);
	CHECK_EQ(uslub_cache_alloc_bulk(c, 3, objs), 3);
	memset(objs[1], 0x5a, 512);
	CHECK_EQ(uslub_cache_destroy(c), 3); /* reported, left alone */
	CHECK(((unsigned char *)objs[1])[511] == 0x5a);
}

/* Under a cap, a bulk request larger than what is left takes nothing. */
static void test_bulk_cap(void)
{
	tu_section("bulk under USLUB_MEM_LIMIT: 0 and nothing taken");
	struct uslub_cache *c = uslub_cache_create("oc-cap", 4096, 0, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(c != NULL);
	if (!c)
		return;
	size_t n = 64 << 10; /* 256 MiB of objects against the 64 MiB cap */
	void **objs = malloc(n * sizeof(void *));
	errno = 0;
	size_t got = uslub_cache_alloc_bulk(c, n, objs);
	CHECKF(got == 0 && errno == ENOMEM, "got %zu, errno %d", got, errno);
	CHECK_EQ(active_of("oc-cap"), 0);
	CHECK_EQ(uslub_cache_alloc_bulk(c, 100, objs), 100);
	uslub_cache_free_bulk(c, 100, objs);
	free(objs);
	CHECK_EQ(uslub_cache_destroy(c), 0);
}

/* ---- merging ---------------------------------------------------------------------- */

/* `merge`: whether compatible caches are expected to merge (not with USLUB_MERGE=0, nor
 * where every cache is a debug cache: a sanitizer build). */
static void test_merge(bool merge)
{
	tu_section("merging: %s", merge ? "compatible caches share kmalloc-64" : "off");
	struct uslub_cache *a = uslub_cache_create("oc-m1", 60, 0, 0, NULL);
	struct uslub_cache *b = uslub_cache_create("oc-m2", 64, 16, 0, NULL);
	struct uslub_cache *own = uslub_cache_create("oc-m3", 64, 0, USLUB_CACHE_NO_MERGE, NULL);
	struct uslub_cache *twin = uslub_cache_create("oc-m3", 64, 0, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(a && b && own && twin && own != twin);
	if (!(a && b && own && twin))
		return;
	struct uslub_cache_info ci;
	CHECK_EQ(uslub_cache_info("oc-m1", &ci) != 0, merge);
	CHECK_EQ(uslub_cache_info("oc-m3", &ci), 0); /* NO_MERGE: its own */
	uint64_t before = active_of("kmalloc-64");
	void *x = uslub_cache_alloc(a), *y = uslub_cache_alloc(b), *z = uslub_cache_alloc(own);
	CHECK(x && y && z);
	CHECK_EQ(active_of("kmalloc-64") - before, merge ? 2 : 0);
	CHECK_EQ(active_of("oc-m3"), 1);
	/* The aliases are in the dump. */
	char path[] = "/tmp/test_objcache.XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	uslub_stats_print(fd, 1);
	lseek(fd, 0, SEEK_SET);
	static char text[1 << 20];
	ssize_t len = read(fd, text, sizeof(text) - 1);
	text[len > 0 ? len : 0] = '\0';
	close(fd);
	unlink(path);
	CHECK_EQ(strstr(text, "\"aliases\": [\"oc-m1\", \"oc-m2\"]") != NULL, merge);
	CHECK(strstr(text, "\"name\": \"oc-m3\"") != NULL);
	CHECK(strstr(text, "\"rcu_pending_objects\"") != NULL);
	uslub_cache_free(a, x);
	uslub_cache_free(b, y);
	uslub_cache_free(own, z);
	CHECK_EQ(uslub_cache_destroy(a), 0);
	CHECK_EQ(uslub_cache_destroy(b), 0);
	CHECK_EQ(uslub_cache_destroy(own), 0);
	CHECK_EQ(uslub_cache_destroy(twin), 0);
}

/* ---- bad frees --------------------------------------------------------------------- */

static struct uslub_cache *bad_a, *bad_b;

static void case_wrong_cache(void)
{
	void *p = uslub_cache_alloc(bad_a);
	uslub_cache_free(bad_b, p);
}

static void case_foreign(void)
{
	static char global[64];
	uslub_cache_free(bad_a, tu_opaque(global + 16));
}

static void case_double(void)
{
	void *p = uslub_cache_alloc(bad_a);
	void *q = uslub_cache_alloc(bad_a);
	uslub_cache_free(bad_a, p);
	uslub_cache_free(bad_a, q);
	uslub_cache_free(bad_a, p);
}

static void case_valid(void)
{
	void *p = uslub_cache_alloc(bad_a);
	uslub_cache_free(bad_a, p);
	fputs("valid free done\n", stderr);
}

/* Runs fn in a child with stderr in a pipe: its wait status, its text in out. */
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
	tu_section("bad frees stop the program naming the pointer and the caches");
	bad_a = uslub_cache_create("oc-apple", 96, 0, USLUB_CACHE_NO_MERGE, NULL);
	bad_b = uslub_cache_create("oc-pear", 96, 0, USLUB_CACHE_NO_MERGE, NULL);
	CHECK(bad_a && bad_b);
	if (!bad_a || !bad_b)
		return;
	struct {
		void (*fn)(void);
		int abort;
		const char *text[3];
	} cases[] = {
	    {case_wrong_cache, 1, {"uslub: uslub_cache_free(): object 0x", "oc-apple", "oc-pear"}},
	    {case_foreign, 1, {"uslub: uslub_cache_free(): invalid pointer 0x", NULL, NULL}},
	    /* A debug cache (USLUB_DEBUG) says it the kernel's way: "BUG oc-apple ...". */
	    {case_double, 1, {"double free", "oc-apple", "0x"}},
	    {case_valid, 0, {"valid free done", NULL, NULL}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[4096];
		int st = run_child(cases[i].fn, out, sizeof(out));
		if (cases[i].abort)
			CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
			       "case %zu: status %#x: %s", i, st, out);
		else
			CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "case %zu: status %#x: %s", i,
			       st, out);
		for (int k = 0; k < 3; k++)
			if (cases[i].text[k])
				CHECKF(strstr(out, cases[i].text[k]) != NULL,
				       "case %zu: no '%s' in: %s", i, cases[i].text[k], out);
	}
}

/* ---- RCU --------------------------------------------------------------------------- */

/* A hash table under liburcu (the memb flavour, told to uslub with uslub_set_rcu): lists
 * linked through C11 atomics (release stores, acquire loads), so ThreadSanitizer sees each
 * publication, and a reader that followed an object recycled into another bucket still
 * ends at a NULL. Writers take a bucket's lock, unlink an object and either free it at
 * once to its TYPESAFE_BY_RCU cache (reuse allowed: readers re-check the key) or retire
 * it with uslub_free_rcu; each object points at a malloc'd side block retired with
 * uslub_free_rcu, which readers read too. Slabs empty and go back (shrink) all along. */
#define BUCKETS	 64
#define KEYS	 4096
#define SIDE_TAG 0x5349444553494445ULL

struct node {
	uint64_t tag; /* THING_TAG from the ctor, never changed */
	_Atomic uint64_t key;
	uint64_t *_Atomic side;
	struct node *_Atomic next;
};

/* liburcu is not built for ThreadSanitizer, which sees neither its grace periods nor its
 * call_rcu queue. In a TSan build the test says both: every reader releases a sync
 * object as it leaves its read-side section and every call_rcu releases it, and the
 * callback, which runs after a grace period, acquires it before uslub frees anything. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
static char grace;
struct tsan_cb {
	struct rcu_head rh;
	struct rcu_head *head;
	void (*func)(struct rcu_head *head);
};
static void tsan_cb_run(struct rcu_head *rh)
{
	struct tsan_cb *w = caa_container_of(rh, struct tsan_cb, rh);
	__tsan_acquire(&grace);
	w->func(w->head);
	free(w);
}
static void test_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head))
{
	struct tsan_cb *w = malloc(sizeof(*w));
	if (!w)
		abort();
	w->head = head;
	w->func = func;
	__tsan_release(&grace);
	urcu_memb_call_rcu(&w->rh, tsan_cb_run);
}
static void test_barrier(void)
{
	urcu_memb_barrier();
	__tsan_acquire(&grace);
}
#define read_unlock() (urcu_memb_read_unlock(), __tsan_release(&grace))
#else
#define test_call_rcu urcu_memb_call_rcu
#define test_barrier  urcu_memb_barrier
#define read_unlock() urcu_memb_read_unlock()
#endif

static struct node *_Atomic table[BUCKETS];
static pthread_mutex_t bucket_lock[BUCKETS];
static struct uslub_cache *rcu_cache;
static atomic_bool stop;
static atomic_ulong seen, bad_tag, bad_side, lookups_hit;

static void node_ctor(void *p)
{
	struct node *n = p;
	n->tag = THING_TAG;
}

static void *reader(void *arg)
{
	(void)arg;
	urcu_memb_register_thread();
	unsigned long local_seen = 0, hits = 0;
	for (unsigned k = 0; !atomic_load_explicit(&stop, memory_order_relaxed); k++) {
		uint64_t want = (k * 2654435761u) % KEYS;
		urcu_memb_read_lock();
		struct node *n = atomic_load_explicit(&table[want % BUCKETS], memory_order_acquire);
		for (unsigned steps = 0; n && steps < 4 * KEYS; steps++) {
			local_seen++;
			if (n->tag != THING_TAG)
				atomic_fetch_add(&bad_tag, 1);
			/* The kernel's pattern: the object may have been recycled, so the key is
			 * read again and compared before the object counts as found. */
			if (atomic_load_explicit(&n->key, memory_order_acquire) == want) {
				uint64_t *side =
				    atomic_load_explicit(&n->side, memory_order_acquire);
				if (side && *side != SIDE_TAG)
					atomic_fetch_add(&bad_side, 1);
				hits++;
			}
			n = atomic_load_explicit(&n->next, memory_order_acquire);
		}
		read_unlock();
	}
	atomic_fetch_add(&seen, local_seen);
	atomic_fetch_add(&lookups_hit, hits);
	urcu_memb_unregister_thread();
	return NULL;
}

static void *writer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t key = rand_r(&seed) % KEYS;
		unsigned b = key % BUCKETS;
		struct node *fresh = uslub_cache_alloc(rcu_cache);
		uint64_t *side = MALLOC(48);
		if (!fresh || !side)
			abort();
		*side = SIDE_TAG;
		atomic_store(&fresh->key, key);
		atomic_store(&fresh->side, side);
		pthread_mutex_lock(&bucket_lock[b]);
		struct node *old = NULL, *_Atomic *link = &table[b];
		struct node *n = atomic_load(link);
		for (unsigned steps = 0; n && steps <= KEYS;
		     steps++, link = &n->next, n = atomic_load(link))
			if (atomic_load(&n->key) == key) {
				old = n;
				break;
			}
		if (old) /* unlinked: readers on it go on along its next */
			atomic_store_explicit(link, atomic_load(&old->next), memory_order_release);
		/* Release too: a reader may come to fresh through an older object. */
		atomic_store_explicit(&fresh->next, atomic_load(&table[b]), memory_order_release);
		atomic_store_explicit(&table[b], fresh, memory_order_release);
		pthread_mutex_unlock(&bucket_lock[b]);
		if (old) {
			uslub_free_rcu(atomic_load(&old->side));
			if (rand_r(&seed) & 1)
				uslub_cache_free(rcu_cache, old); /* reused at once: typesafe */
			else
				uslub_free_rcu(old);
		}
		if ((rand_r(&seed) & 1023) == 0)
			uslub_cache_shrink(rcu_cache);
	}
	return NULL;
}

static void test_rcu(double seconds)
{
	tu_section("TYPESAFE_BY_RCU cache and uslub_free_rcu under liburcu readers, %.1f s",
		   seconds);
	uslub_set_rcu(test_call_rcu, test_barrier);
	rcu_cache = uslub_cache_create("oc-rcu-node", sizeof(struct node), 0,
				       USLUB_CACHE_TYPESAFE_BY_RCU, node_ctor);
	CHECK(rcu_cache != NULL);
	if (!rcu_cache)
		return;
	for (unsigned b = 0; b < BUCKETS; b++)
		pthread_mutex_init(&bucket_lock[b], NULL);
	enum { READERS = 3, WRITERS = 2 };
	pthread_t r[READERS], w[WRITERS];
	for (int i = 0; i < READERS; i++)
		pthread_create(&r[i], NULL, reader, NULL);
	for (int i = 0; i < WRITERS; i++)
		pthread_create(&w[i], NULL, writer, (void *)(uintptr_t)(i + 1));
	struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(r[i], NULL);
	printf("    readers saw %lu objects (%lu key matches)\n", atomic_load(&seen),
	       atomic_load(&lookups_hit));
	CHECK(atomic_load(&seen) > 1000);
	CHECK_EQ(atomic_load(&bad_tag), 0);
	CHECK_EQ(atomic_load(&bad_side), 0);
	/* Empty the table, then everything pending goes after one barrier. */
	size_t left = 0;
	for (unsigned b = 0; b < BUCKETS; b++) {
		struct node *n = atomic_load(&table[b]);
		atomic_store(&table[b], NULL);
		for (unsigned steps = 0; n && steps <= KEYS; steps++, left++) {
			struct node *next = atomic_load(&n->next);
			uslub_free_rcu(atomic_load(&n->side));
			uslub_free_rcu(n);
			n = next;
		}
	}
	CHECK(left > 0);
	uslub_cache_shrink(rcu_cache);
	uslub_rcu_barrier();
	uslub_cache_shrink(rcu_cache);
	uslub_rcu_barrier();
	CHECK_EQ(active_of("oc-rcu-node"), 0);
	CHECK_EQ(uslub_cache_destroy(rcu_cache), 0);
	/* The dump's pending counts are back to 0. */
	char path[] = "/tmp/test_objcache.XXXXXX";
	int fd = mkstemp(path);
	uslub_stats_print(fd, 1);
	lseek(fd, 0, SEEK_SET);
	static char text[1 << 20];
	ssize_t len = read(fd, text, sizeof(text) - 1);
	text[len > 0 ? len : 0] = '\0';
	close(fd);
	unlink(path);
	CHECK(strstr(text, "\"rcu_pending_objects\": 0") != NULL);
	CHECK(strstr(text, "\"rcu_pending_slabs\": 0") != NULL);
	const char *f = strstr(text, "\"rcu_freed_objects\": ");
	CHECK(f && strtoull(f + 21, NULL, 10) >= left);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	printf("test_objcache (%s): object caches, issue 27\n", VARIANT);
	if (argc > 1 && strcmp(argv[1], "cap") == 0) {
		test_bulk_cap();
		return tu_summary("test_objcache cap");
	}
	bool merge = !(argc > 1 && strcmp(argv[1], "nomerge") == 0);
	double seconds = argc > 2 ? atof(argv[2]) : 2.0;
	test_create_errors();
	test_alloc_free();
	test_ctor();
	test_bulk_shrink_destroy();
	test_merge(merge);
	test_bad_frees();
	test_rcu(seconds);
	return tu_summary("test_objcache");
}
