/* test_debug.c: USLUB_DEBUG (slub_debug's letters) and USLUB_HARDEN find what they promise,
 * and stop the program with a kernel-style report.
 *
 * The settings are read once at start-up, so each case runs in a child that re-executes
 * this test with the case's environment; its stderr goes into a pipe. A detection must
 * end the child by SIGABRT and its report must name the fault and the cache:
 *   Z   write one byte past a 64-byte object, free it      "Redzone overwritten"
 *   Z   the same one byte past a request of 1, 40, 100, 1000, 5000 (slab objects with
 *       slack to the class size), 20481 (a large block, the rest of its last page), 5 MiB
 *       + 1 (a span of the large zone), 40 MiB + 1 (a huge block) and
 *       posix_memalign(64, 40), and past a realloc grown in place
 *       to 44: "Redzone overwritten", the block's kind and "(requested N of CLASS)"
 *   FZ  the overflow of an object not freed, found by the walker at the next malloc
 *   P   write into a freed object, allocate it again       "Poison overwritten"
 *   F   free the same object twice                         "double free"
 *   U   ... and the report names both sites in this file    "Allocated in", "Freed in"
 *   any free a stack address, then an interior pointer     "invalid pointer"
 *   harden  a free pointer overwritten (as an overflow into the metadata would)
 *                                                           "Freelist pointer corrupted"
 * Controls that must exit 0: the same operations done right under FZPU and under full
 * hardening (with threads freeing each other's objects), T tracing only the caches listed,
 * a cache list selecting caches, alignment and usable size kept by debug caches, Q holding
 * freed large blocks within USLUB_QUARANTINE (their second free a double free), under Z
 * the usable size being the request (and every byte of it writable, through realloc in
 * place of small, large and huge blocks), and the slab_is_valid() walker telling a
 * consistent slab from a broken one.
 *
 * In an AddressSanitizer build every cache poisons its free objects and red zones, so ASan
 * finds the red-zone and use-after-free writes first: those two cases then expect ASan's
 * report instead (the proof that ASan sees inside our slabs). Linked (uslub_ names). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_util.h"

#include "debug/debug.h"
#include "slab/slab.h"
#include "os/vg.h"

extern char **environ;

static unsigned cls64;
/* case_request's request, from TEST_REQUEST in the case's settings (40 + 1 stands for
 * posix_memalign(64, 40)). */
static size_t case_size;

/* ---- the cases, run in the child ---------------------------------------------------- */

static void case_redzone(void)
{
	unsigned char *p = uslub_malloc(64);
	p[64] = 'x'; /* one past the end */
	uslub_free(p);
}

/* One byte past the request, then free: with Z the red zone begins at the request. */
static void case_request(void)
{
	size_t n = case_size;
	unsigned char *p;
	if (n == 40 + 1) { /* posix_memalign(64, 40): a 64-byte class for the alignment */
		n = 40;
		void *q;
		if (uslub_posix_memalign(&q, 64, n) != 0)
			_exit(4);
		p = q;
	} else {
		p = uslub_malloc(n);
	}
	memset(p, 1, n);
	p[n] = 'x';
	uslub_free(p);
}

/* malloc(40) grown in place to 44 (both kmalloc-48): the red zone moves with it. */
static void case_realloc_inplace(void)
{
	unsigned char *p = uslub_malloc(40);
	unsigned char *q = uslub_realloc(p, 44);
	if (q != p)
		_exit(4);
	memset(q, 1, 44);
	q[44] = 'x';
	uslub_free(q);
}

/* An overflow of an object nobody frees: F's walker finds it at the slab's next malloc. */
static void case_walker_redzone(void)
{
	unsigned char *p = uslub_malloc(40);
	p[40] = 'x';
	uslub_malloc(40);
	_exit(0); /* not found */
}

/* Q holds freed large blocks up to USLUB_QUARANTINE (1 MiB here): of 64 blocks of 256 KiB
 * freed, one to three wait (each 66 pages: a page before it, 64, and a page of red zone
 * after), the last one freed among them - the next block of its size is another - and a
 * second free of it is a double free. An ASan build leaves large blocks to ASan. */
static void case_quarantine_large(void)
{
	enum { N = 64, SIZE = 256 << 10 };
	static void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = uslub_malloc(SIZE);
	for (int i = 0; i < N; i++)
		uslub_free(p[i]);
	uint64_t held = uslub_quarantine_held();
	void *q = uslub_malloc(SIZE);
	if (!USLUB_ASAN && (held < 1 || held > 3 || q == p[N - 1])) {
		fprintf(stderr, "held %lu large blocks, next block %p, last freed %p\n",
			(unsigned long)held, q, p[N - 1]);
		_exit(3);
	}
	uslub_free(q);
	fprintf(stderr, "quarantine held %lu large blocks\n", (unsigned long)held);
	if (!USLUB_ASAN)
		uslub_free(tu_opaque(p[N - 1])); /* held: a double free */
	_exit(0);
}

/* Under Z malloc_usable_size is the request, and every byte of it may be written: also
 * after realloc in place of small, large and huge blocks, and after posix_memalign. */
static void case_usable(void)
{
	static const size_t sizes[] = {1, 40, 100, 1000, 5000, 20481, 5 * TU_MIB + 1};
	int bad = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		unsigned char *p = uslub_malloc(n);
		if (uslub_malloc_usable_size(p) != n) {
			fprintf(stderr, "malloc(%zu): usable %zu\n", n,
				uslub_malloc_usable_size(p));
			bad = 1;
		}
		memset(p, 1, uslub_malloc_usable_size(p));
		/* grow and shrink, mostly in place: same class or pages, more pages, fewer */
		size_t steps[] = {n + 3, n + 5000, n > 5 ? n - 5 : n, n + 1};
		for (size_t k = 0; k < 4; k++) {
			p = uslub_realloc(p, steps[k]);
			if (uslub_malloc_usable_size(p) != steps[k]) {
				fprintf(stderr, "realloc(%zu): usable %zu\n", steps[k],
					uslub_malloc_usable_size(p));
				bad = 1;
			}
			memset(p, 2, steps[k]);
		}
		uslub_free(p);
	}
	void *q;
	if (uslub_posix_memalign(&q, 64, 40) != 0 || uslub_malloc_usable_size(q) != 40 ||
	    (uintptr_t)q % 64) {
		fprintf(stderr, "posix_memalign(64, 40): %p, usable %zu\n", q,
			uslub_malloc_usable_size(q));
		bad = 1;
	}
	memset(q, 1, 40);
	uslub_free(q);
	char *z = uslub_calloc(1, 5 * TU_MIB + 1);
	bad |= z[5 * TU_MIB] != 0;
	uslub_free(z);
	fputs("usable sizes done\n", stderr);
	_exit(bad ? 5 : 0);
}

static void case_poison(void)
{
	unsigned char *p = uslub_malloc(64);
	uslub_free(p);
	((volatile unsigned char *)p)[8] = 1; /* write after free */
	/* The freed object is the next one handed out of its slab; allocating checks it. */
	for (int i = 0; i < 10000; i++)
		if (uslub_malloc(64) == p)
			break;
}

static void case_double_free(void)
{
	void *p = uslub_malloc(64);
	uslub_free(p);
	uslub_free(tu_opaque(p));
}

static void case_foreign(void)
{
	char local[64];
	memset(local, 1, sizeof(local));
	uslub_free(tu_opaque(local + 16));
}

static void case_interior(void)
{
	char *p = uslub_malloc(64);
	uslub_free(tu_opaque(p + 8));
}

/* An overflow that reaches the next slot's metadata rewrites its free pointer: here
 * written directly, to a pointer outside the slab. */
static void case_harden(void)
{
	struct uslub_cache *c = &uslub_caches[cls64];
	if (!(c->debug & DBG_HARDEN)) {
		fprintf(stderr, "kmalloc-64 is not hardened\n");
		_exit(4);
	}
	void *a = uslub_malloc(64), *b = uslub_malloc(64);
	uslub_free(a);
	uslub_free(b);
	struct dbg_meta *m = dbg_meta_of(c, b);
	asan_unpoison(&m->link, sizeof(m->link)); /* in an ASan build, as the overflow */
	m->link ^= 0x4000;
	uslub_malloc(64); /* pops b, follows its free pointer */
	uslub_malloc(64);
}

static void *cross_free(void *arg)
{
	void **objs = arg;
	for (int i = 0; i < 500; i++)
		uslub_free(objs[i]);
	return NULL;
}

/* Right use, lots of it: every size, realloc, cross-thread frees. Must exit 0. */
static void case_valid(void)
{
	for (int round = 0; round < 20; round++) {
		void *objs[500];
		for (int i = 0; i < 500; i++) {
			size_t n = (size_t)(i * 37 + round * 11) % 9000 + 1;
			objs[i] = uslub_malloc(n);
			memset(objs[i], i, n);
		}
		for (int i = 0; i < 500; i += 7)
			objs[i] = uslub_realloc(objs[i], (size_t)i * 3 + 1);
		pthread_t t;
		pthread_create(&t, NULL, cross_free, objs);
		pthread_join(t, NULL);
	}
	fputs("valid operations done\n", stderr);
}

static void case_trace(void)
{
	void *p = uslub_malloc(64), *q = uslub_malloc(200);
	uslub_free(p);
	uslub_free(q);
}

static void case_selected(void)
{
	/* USLUB_DEBUG=FZ,kmalloc-64,kmalloc-1k */
	int bad = 0;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		const struct uslub_cache *c = &uslub_caches[i];
		int want = strcmp(c->name, "kmalloc-64") == 0 || strcmp(c->name, "kmalloc-1k") == 0;
		unsigned letters = c->debug & (DBG_CHECK | DBG_REDZONE | DBG_POISON | DBG_TRACK);
		if (letters != (want ? (unsigned)(DBG_CHECK | DBG_REDZONE) : 0u)) {
			fprintf(stderr, "%s: flags %#x\n", c->name, c->debug);
			bad = 1;
		}
	}
	_exit(bad ? 5 : 0);
}

/* Debug caches keep the alignment aligned_alloc counts on and report the class size. */
static void case_layout(void)
{
	int bad = 0;
	for (size_t align = 16; align <= 4096; align *= 2) {
		void *p = uslub_aligned_alloc(align, align);
		if ((uintptr_t)p % align || uslub_malloc_usable_size(p) < align) {
			fprintf(stderr, "aligned_alloc(%zu): %p, usable %zu\n", align, p,
				uslub_malloc_usable_size(p));
			bad = 1;
		}
		uslub_free(p);
	}
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		void *p = uslub_malloc(uslub_class_size[i]);
		if (uslub_malloc_usable_size(p) != uslub_class_size[i] || (uintptr_t)p % 16) {
			fprintf(stderr, "class %u: usable %zu\n", uslub_class_size[i],
				uslub_malloc_usable_size(p));
			bad = 1;
		}
		uslub_free(p);
	}
	_exit(bad ? 5 : 0);
}

/* The walker: the current slab of kmalloc-64 is valid, and not once its count lies. */
static void case_walker(void)
{
	void *objs[8];
	for (int i = 0; i < 8; i++)
		objs[i] = uslub_malloc(64);
	for (int i = 0; i < 8; i += 2)
		uslub_free(objs[i]);
	struct page_desc *s = page_desc_of(objs[1])->head;
	const char *why = NULL;
	if (!uslub_slab_is_valid(s, &why)) {
		fprintf(stderr, "consistent slab found invalid: %s\n", why);
		_exit(5);
	}
	s->local_count++;
	if (uslub_slab_is_valid(s, &why)) {
		fprintf(stderr, "broken local count not found\n");
		_exit(6);
	}
	s->local_count--;
	fprintf(stderr, "walker: %s\n", why);
	_exit(0);
}

struct debug_case {
	const char *name;
	void (*run)(void);
	const char *env[3]; /* settings for the child */
	int expect_abort;
	const char *expect[4]; /* texts that must appear on stderr */
	int asan_catches;      /* in an ASan build, ASan reports first */
	const char *reject;    /* a text that must not appear */
};

#define REQUEST_CASE(label, n, bug, requested)                                                     \
	{                                                                                          \
		.name = label, .run = case_request, .env = {"USLUB_DEBUG=Z", "TEST_REQUEST=" #n},  \
		.expect_abort = 1,                                                                 \
		.expect = {bug, "Redzone overwritten", requested, "First byte 0x78"},              \
		.asan_catches = 1                                                                  \
	}

static const struct debug_case cases[] = {
    {"redzone",
     case_redzone,
     {"USLUB_DEBUG=Z"},
     1,
     {"BUG kmalloc-64", "Redzone overwritten", "@offset=64", "Redzone "},
     1,
     NULL},
    {"poison",
     case_poison,
     {"USLUB_DEBUG=P"},
     1,
     {"BUG kmalloc-64", "Poison overwritten", "@offset=8", "6b 6b 6b"},
     1,
     NULL},
    {"double-free",
     case_double_free,
     {"USLUB_DEBUG=FU"},
     1,
     {"BUG kmalloc-64", "double free", "Allocated in 0x", "Freed in 0x"},
     0,
     NULL},
    {"double-free-sites",
     case_double_free,
     {"USLUB_DEBUG=1"},
     1,
     {"test_debug+0x", "Found in free() called from", NULL},
     0,
     NULL},
    {"foreign",
     case_foreign,
     {"USLUB_DEBUG=FZPU"},
     1,
     {"free(): invalid pointer 0x", "not a block of this allocator"},
     0,
     NULL},
    {"interior",
     case_interior,
     {"USLUB_DEBUG=FZPU"},
     1,
     {"invalid pointer", "BUG kmalloc-64"},
     0,
     NULL},
    {"harden",
     case_harden,
     {"USLUB_HARDEN=full"},
     1,
     {"BUG kmalloc-64", "Freelist pointer corrupted"},
     0,
     NULL},
    {"valid-fzpu", case_valid, {"USLUB_DEBUG=FZPU"}, 0, {"valid operations done"}, 0, NULL},
    {"valid-harden", case_valid, {"USLUB_HARDEN=1"}, 0, {"valid operations done"}, 0, NULL},
    {"valid-harden-off", case_valid, {"USLUB_HARDEN=off"}, 0, {"valid operations done"}, 0, NULL},
    {"trace",
     case_trace,
     {"USLUB_DEBUG=T,kmalloc-64"},
     0,
     {"TRACE kmalloc-64 alloc 0x", "TRACE kmalloc-64 free 0x"},
     0,
     "TRACE kmalloc-224"},
    {"selected", case_selected, {"USLUB_DEBUG=FZ,kmalloc-64,kmalloc-1k"}, 0, {NULL}, 0, NULL},
    {"layout", case_layout, {"USLUB_DEBUG=FZPU"}, 0, {NULL}, 0, NULL},
    {"walker", case_walker, {"USLUB_DEBUG=F"}, 0, {"walker: "}, 0, NULL},
    REQUEST_CASE("request-1", 1, "BUG kmalloc-16", "@offset=1 in the object (requested 1 of 16)"),
    REQUEST_CASE("request-40", 40, "BUG kmalloc-48",
		 "@offset=40 in the object (requested 40 of 48)"),
    REQUEST_CASE("request-100", 100, "BUG kmalloc-112", "(requested 100 of 112)"),
    REQUEST_CASE("request-1000", 1000, "BUG kmalloc-1k", "(requested 1000 of 1024)"),
    REQUEST_CASE("request-5000", 5000, "BUG kmalloc-5k", "(requested 5000 of 5120)"),
    REQUEST_CASE("request-20481", 20481, "BUG large block",
		 "@offset=20481 in the block (requested 20481 of 24576)"),
    REQUEST_CASE("request-5MiB+1", 5242881, "BUG large block", "(requested 5242881 of 5246976)"),
    REQUEST_CASE("request-40MiB+1", 41943041, "BUG huge block", "(requested 41943041 of 41947136)"),
    REQUEST_CASE("request-aligned-40", 41, "BUG kmalloc-64",
		 "@offset=40 in the object (requested 40 of 64)"),
    {.name = "request-realloc-44",
     .run = case_realloc_inplace,
     .env = {"USLUB_DEBUG=Z"},
     .expect_abort = 1,
     .expect = {"BUG kmalloc-48", "Redzone overwritten", "(requested 44 of 48)"},
     .asan_catches = 1},
    {.name = "walker-redzone",
     .run = case_walker_redzone,
     .env = {"USLUB_DEBUG=FZ"},
     .expect_abort = 1,
     .expect = {"BUG kmalloc-48", "Redzone overwritten", "(requested 40 of 48)",
		"Found in malloc() called from"},
     .asan_catches = 1},
    /* No USLUB_DEBUG: only ASan sees it (every cache of an ASan build poisons). */
    {.name = "asan-request-40",
     .run = case_request,
     .env = {"USLUB_DEBUG=0", "TEST_REQUEST=40"},
     .asan_catches = 1},
    {.name = "quarantine-large",
     .run = case_quarantine_large,
     .env = {"USLUB_DEBUG=Q", "USLUB_QUARANTINE=1M"},
     .expect_abort = !USLUB_ASAN,
     .expect = {"quarantine held", USLUB_ASAN ? NULL : "double free"}},
    {.name = "usable-z",
     .run = case_usable,
     .env = {"USLUB_DEBUG=Z"},
     .expect = {"usable sizes done"}},
};
#define NR_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- the parent ------------------------------------------------------------------- */

/* Re-executes this program for case i with its settings; returns the wait status and
 * what the child wrote to stderr. */
static int run_case(const char *self, size_t i, char *out, size_t cap)
{
	int fds[2];
	out[0] = '\0';
	if (pipe(fds) != 0)
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		dup2(fds[1], 2);
		close(fds[1]);
		static char *env[64];
		size_t n = 0;
		for (char **e = environ; *e && n < 48; e++)
			if (strncmp(*e, "USLUB_", 6) != 0)
				env[n++] = *e;
		for (size_t k = 0; k < 3 && cases[i].env[k]; k++)
			env[n++] = (char *)cases[i].env[k];
		env[n++] = "ASAN_OPTIONS=detect_leaks=0";
		env[n] = NULL;
		char idx[16];
		snprintf(idx, sizeof(idx), "%zu", i);
		char *argv[] = {(char *)self, "--case", idx, NULL};
		alarm(60);
		execve(self, argv, env);
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fds[0], out + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || (len += (size_t)r) == cap - 1)
			break;
	}
	out[len] = '\0';
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

int main(int argc, char **argv)
{
	cls64 = uslub_size_to_class(64);
	if (argc == 3 && strcmp(argv[1], "--case") == 0) {
		size_t i = (size_t)atoi(argv[2]);
		signal(SIGABRT, SIG_DFL);
		const char *req = getenv("TEST_REQUEST");
		case_size = req ? strtoul(req, NULL, 10) : 0;
		uslub_free(uslub_malloc(1)); /* start the allocator with the settings */
		cases[i].run();
		_exit(0);
	}
	printf("test_debug: USLUB_DEBUG and USLUB_HARDEN detections%s\n",
	       USLUB_ASAN ? " (ASan build: ASan reports the red-zone and poison writes)" : "");
	for (size_t i = 0; i < NR_CASES; i++) {
		const struct debug_case *c = &cases[i];
		static char out[65536];
		int status = run_case("/proc/self/exe", i, out, sizeof(out));
		int asan = USLUB_ASAN && c->asan_catches;
		tu_section("%s (%s): %s", c->name, c->env[0],
			   asan		     ? "AddressSanitizer reports it"
			   : c->expect_abort ? "SIGABRT with a report"
					     : "exits 0");
		if (asan) {
			CHECKF(strstr(out, "AddressSanitizer") != NULL &&
				   !(WIFEXITED(status) && WEXITSTATUS(status) == 0),
			       "%s: status %#x, no ASan report: %s", c->name, status, out);
			continue;
		}
		if (c->expect_abort)
			CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
			       "%s: status %#x, expected SIGABRT; stderr:\n%s", c->name, status,
			       out);
		else
			CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			       "%s: status %#x; stderr:\n%s", c->name, status, out);
		for (int k = 0; k < 4; k++)
			if (c->expect[k])
				CHECKF(strstr(out, c->expect[k]) != NULL,
				       "%s: stderr lacks \"%s\":\n%s", c->name, c->expect[k], out);
		if (c->reject)
			CHECKF(strstr(out, c->reject) == NULL, "%s: stderr has \"%s\":\n%s",
			       c->name, c->reject, out);
	}
	return tu_summary("test_debug");
}
