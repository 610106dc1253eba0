/* Fault injection through the OS door (core/os/os.c, USLUB_FAULT).
 *
 * Built twice:
 *   fault-linked   -DUSLUB_PREFIXED, linked with the engine. Installs fault plans between
 *                  phases (uslub_os_fault_set) and checks after each: every entry point
 *                  that needed memory from the OS returned NULL with ENOMEM
 *                  (posix_memalign: returned ENOMEM), blocks allocated before are intact,
 *                  no allocator lock is held, the heap walker (core/debug/check.c) finds every
 *                  page in exactly one place with every counter right, and allocation
 *                  works again once the faults stop.
 *   fault-preload  standard names under LD_PRELOAD with USLUB_FAULT=mmap:every:3 in the
 *                  environment: the variable alone makes huge allocations fail and the
 *                  program runs on.
 * A watchdog alarm turns a lock left held (a hang) into a failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include "test_util.h"

#ifdef USLUB_PREFIXED
#include "debug/check.h"
#include "thread/thread.h"
#include "os/os.h"
#include "page/page.h"
#endif

/* ---- the eight entry points ------------------------------------------------------ */

enum ep {
	EP_MALLOC,
	EP_CALLOC,
	EP_REALLOC,
	EP_POSIX_MEMALIGN,
	EP_ALIGNED_ALLOC,
	EP_MEMALIGN,
	EP_VALLOC,
	EP_PVALLOC,
	NR_EP
};
static const char *const ep_names[NR_EP] = {"malloc",	      "calloc",	       "realloc",
					    "posix_memalign", "aligned_alloc", "memalign",
					    "valloc",	      "pvalloc"};
static unsigned long ep_nulls[NR_EP], ep_ok[NR_EP];

#define NSPARE 64
static void *spare[NSPARE];
static unsigned nspare;

/* One call of entry point `e` for `size` bytes. A failure must be NULL with errno ENOMEM
 * (posix_memalign: ENOMEM returned, *out and errno untouched); realloc's failure leaves
 * the old block as it was. A success is aligned, large enough and writable. The result,
 * or NULL, is returned for the caller to free. */
static void *attempt(enum ep e, size_t size)
{
	void *p = NULL;
	size_t align = 16;
	errno = 0;
	switch (e) {
	case EP_MALLOC:
		p = MALLOC(size);
		break;
	case EP_CALLOC:
		p = CALLOC(1, size);
		break;
	case EP_REALLOC: {
		/* A block that must come through a failure untouched: a spare one made
		 * beforehand, as the page allocator may be empty by now. */
		unsigned char *old = nspare ? spare[--nspare] : MALLOC(64);
		CHECK(old != NULL);
		if (!old)
			return NULL;
		tu_fill(old, 0, 64, 0xfeed);
		errno = 0;
		p = REALLOC(old, size);
		if (!p) {
			CHECK_EQ(tu_verify(old, 64, 0xfeed), (size_t)-1);
			if (nspare < NSPARE)
				spare[nspare++] = old;
			else
				FREE(old);
		} else {
			CHECK_EQ(tu_verify(p, size < 64 ? size : 64, 0xfeed), (size_t)-1);
		}
		break;
	}
	case EP_POSIX_MEMALIGN: {
		void *out = (void *)0x1;
		align = 4096;
		errno = 12345;
		int rc = POSIX_MEMALIGN(&out, align, size);
		if (rc) {
			CHECK_EQ(rc, ENOMEM);
			CHECK(out == (void *)0x1);
			CHECK_EQ(errno, 12345);
			ep_nulls[e]++;
			return NULL;
		}
		p = out;
		break;
	}
	case EP_ALIGNED_ALLOC:
		align = 256;
		p = ALIGNED_ALLOC(align, size);
		break;
	case EP_MEMALIGN:
		align = 8192;
		p = MEMALIGN(align, size);
		break;
	case EP_VALLOC:
		align = 4096;
		p = VALLOC(size);
		break;
	case EP_PVALLOC:
		align = 4096;
		p = PVALLOC(size);
		break;
	default:
		return NULL;
	}
	if (!p) {
		CHECKF(errno == ENOMEM, "%s(%zu): NULL with errno %d", ep_names[e], size, errno);
		ep_nulls[e]++;
		return NULL;
	}
	ep_ok[e]++;
	CHECK_ALIGNED(p, align);
	CHECKF(USABLE_SIZE(p) >= size, "%s(%zu): usable %zu", ep_names[e], size, USABLE_SIZE(p));
	unsigned char *b = p;
	b[0] = 1;
	b[size - 1] = 2;
	return p;
}

/* ---- blocks that must survive everything ----------------------------------------- */

#define NKEEP 600
static unsigned char *keep[NKEEP];
static size_t keep_size[NKEEP];

static size_t keep_size_of(int i)
{
	static const size_t sizes[] = {8, 24, 100, 512, 3000, 8192, 20000, 300000, 33 << 20};
	size_t n = sizes[i % (int)(sizeof(sizes) / sizeof(sizes[0]))];
	return n + (size_t)(i % 7);
}

/* With `huge`, one block in 60 has a mapping of its own. */
static void keep_make(int huge)
{
	while (nspare < NSPARE)
		spare[nspare++] = MALLOC(64);
	for (int i = 0; i < NKEEP; i++) {
		keep_size[i] = huge && i % 60 == 8 ? keep_size_of(i) : keep_size_of(i) % (1 << 20);
		keep[i] = MALLOC(keep_size[i]);
		/* The heap grows by mmap too: under USLUB_FAULT=mmap:every:3 a block may be
		 * refused (ENOMEM); asked for again, it comes. */
		for (int t = 0; !keep[i] && t < 4; t++) {
			CHECK_EQ(errno, ENOMEM);
			keep[i] = MALLOC(keep_size[i]);
		}
		CHECK(keep[i] != NULL);
		if (keep[i])
			tu_fill(keep[i], 0, keep_size[i], 1000 + (uint64_t)i);
	}
}

static void keep_verify(const char *when)
{
	unsigned long bad = 0;
	for (int i = 0; i < NKEEP; i++)
		if (keep[i] && tu_verify(keep[i], keep_size[i], 1000 + (uint64_t)i) != (size_t)-1)
			bad++;
	CHECKF(bad == 0, "%s: %lu blocks allocated before the faults changed", when, bad);
}

static void keep_free(void)
{
	while (nspare)
		FREE(spare[--nspare]);
	for (int i = 0; i < NKEEP; i++)
		FREE(keep[i]);
}

static void watchdog(int sig)
{
	(void)sig;
	static const char msg[] = "test_fault: watchdog: a call hung (an allocator lock held?)\n";
	ssize_t rc = write(2, msg, sizeof(msg) - 1);
	(void)rc;
	_exit(1);
}

#ifdef USLUB_PREFIXED

/* ---- linked: plans installed between phases -------------------------------------- */

static void set_plan(const char *spec)
{
	struct uslub_fault_plan plan;
	CHECKF(uslub_fault_parse(spec, &plan) == 0, "spec %s", spec);
	uslub_os_fault_set(&plan);
}

static void no_faults(void)
{
	uslub_os_fault_set(NULL);
}

/* Every allocator lock is free: a failure path that returned with one held shows here. */
static void check_unlocked(const char *when)
{
	pthread_mutex_t *locks[4 + USLUB_NR_CLASSES * MAX_NODES + MAX_NODES];
	unsigned n = 0;
	locks[n++] = &uslub_orphan_lock;
	locks[n++] = &uslub_registry_lock;
	locks[n++] = &uslub_stat_lock;
	for (unsigned c = 0; c < USLUB_NR_CLASSES; c++)
		for (unsigned nid = 0; nid < uslub_nr_nodes; nid++)
			locks[n++] = &cache_node_of(&uslub_caches[c], nid)->list_lock;
	for (unsigned nid = 0; nid < uslub_nr_nodes; nid++)
		locks[n++] = &uslub_nodes[nid].lock;
	unsigned held = 0;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_mutex_trylock(locks[i]) != 0)
			held++;
		else
			pthread_mutex_unlock(locks[i]);
	}
	CHECKF(held == 0, "%s: %u allocator locks held", when, held);
	/* The huge-block lock is private to huge.c: a lookup takes it. */
	CHECK(USABLE_SIZE(keep[8]) >= keep_size[8]);
}

static void check_heap(const char *when)
{
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	CHECKF(errors == 0, "%s: the heap walker found %lu inconsistencies", when,
	       (unsigned long)errors);
	if (errors)
		uslub_check_print(&c, 2);
}

/* Live bytes as if every spare block were still held, as realloc uses them up. */
static uint64_t live_bytes(void)
{
	struct uslub_check c;
	uslub_check_heap(&c, -1);
	return c.live_bytes + (NSPARE - nspare) * 64;
}

/* Blocks that empty the page allocator: largest first, so nothing is left but what a
 * thread's slabs and page cache hold. Large blocks are never touched, so holding the
 * whole region costs its descriptors only. */
static void **hog;
static size_t nhog;

static void hog_push(void *p)
{
	if (nhog % 4096 == 0)
		hog = realloc(hog, (nhog + 4096) * sizeof(*hog));
	hog[nhog++] = p;
}

static void exhaust(void)
{
	void *p;
	for (int o = USLUB_MAX_ORDER; o >= 2; o--) {
		errno = 0;
		while ((p = MALLOC(USLUB_PAGE_SIZE << o)))
			hog_push(p);
		CHECKF(errno == ENOMEM, "order %d: NULL with errno %d", o, errno);
	}
	/* Orders 1 and 0 go to slabs of the two largest classes, and a few small ones. */
	static const size_t small[] = {8192, 4096, 2048, 512, 64, 16};
	for (unsigned i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		unsigned long n = 0;
		errno = 0;
		while ((p = MALLOC(small[i])) && n++ < 4000000)
			hog_push(p);
		CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) until NULL: errno %d", small[i],
		       errno);
	}
}

static void hog_free(void)
{
	for (size_t i = 0; i < nhog; i++)
		FREE(hog[i]);
	nhog = 0;
}

/* Every entry point for sizes that need fresh pages: all must fail. */
static void all_fail(const char *when)
{
	uslub_huge_cache_release(true); /* a freed huge mapping would serve 40 MiB */
	static const size_t sizes[] = {16, 64 << 10, 1 << 20, 40 << 20};
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (int e = 0; e < NR_EP; e++) {
			unsigned long before = ep_nulls[e];
			void *p = attempt((enum ep)e, sizes[s]);
			/* A 16-byte request may still find a free object of its class (aligned
			 * ones go to larger classes); any other must fail. */
			if (sizes[s] > 16)
				CHECKF(ep_nulls[e] == before + 1, "%s: %s(%zu) did not fail", when,
				       ep_names[e], sizes[s]);
			FREE(p);
		}
	}
}

static void all_work(const char *when)
{
	static const size_t sizes[] = {16, 200, 64 << 10, 1 << 20, 40 << 20};
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (int e = 0; e < NR_EP; e++) {
			void *p = attempt((enum ep)e, sizes[s]);
			CHECKF(p != NULL, "%s: %s(%zu) failed with the faults off", when,
			       ep_names[e], sizes[s]);
			FREE(p);
		}
	}
}

static void *thread_during_faults(void *arg)
{
	(void)arg;
	/* A thread whose state cannot be built takes the shared orphan state. */
	for (int i = 0; i < 50; i++) {
		void *p = MALLOC(16 + (size_t)i * 40);
		if (!p)
			CHECK_EQ(errno, ENOMEM);
		FREE(p);
		void *q = attempt(EP_MALLOC, 64 << 10);
		CHECK(q == NULL);
	}
	return NULL;
}

/* mmap fails and the page allocator is empty: everything that needs a page fails. */
static void phase_mmap_exhausted(void)
{
	tu_section("mmap:every:1 with the page allocator emptied: every entry point fails "
		   "with ENOMEM, a new thread too, nothing allocated before changes");
	uint64_t live0 = live_bytes();
	set_plan("mmap:every:1");
	unsigned long inj0 = uslub_os_fault_injected();
	exhaust();
	all_fail("exhausted");
	pthread_t th;
	CHECK(pthread_create(&th, NULL, thread_during_faults, NULL) == 0);
	pthread_join(th, NULL);
	CHECK(uslub_os_fault_injected() > inj0);
	keep_verify("exhausted");
	check_unlocked("exhausted");
	check_heap("exhausted");
	no_faults();
	tu_section("faults off: every entry point works again (a new region)");
	all_work("after mmap faults");
	hog_free();
	keep_verify("after mmap faults");
	check_heap("after mmap faults");
	CHECK_EQ(live_bytes(), live0);
}

/* The Nth and every Kth: huge blocks take one mmap each (and the huge table now and
 * then one more) when the huge cache is empty, so exactly the planned ones fail. */
static void phase_mmap_counted(void)
{
	tu_section("mmap:3 fails only the third huge allocation; mmap:every:2 every second");
	uint64_t live0 = live_bytes();
	void *p[6];
	set_plan("mmap:3");
	for (int i = 0; i < 6; i++)
		p[i] = attempt(EP_MALLOC, (33 << 20) + (size_t)i);
	for (int i = 0; i < 6; i++)
		CHECKF((p[i] == NULL) == (i == 2), "huge block %d: %p", i, p[i]);
	for (int i = 0; i < 6; i++)
		FREE(p[i]);
	/* Emptied: munmap is no call USLUB_FAULT counts. */
	uslub_huge_cache_release(true);
	set_plan("mmap:every:2");
	unsigned fails = 0;
	for (int i = 0; i < 6; i++) {
		p[i] = attempt((enum ep)(i % NR_EP), 34 << 20);
		fails += p[i] == NULL;
	}
	CHECK_EQ(fails, 3);
	for (int i = 0; i < 6; i++)
		FREE(p[i]);
	uslub_huge_cache_release(true);
	no_faults();
	keep_verify("mmap counted");
	check_unlocked("mmap counted");
	check_heap("mmap counted");
	CHECK_EQ(live_bytes(), live0);
}

/* mremap fails: a huge block neither grows nor shrinks, and stays as it was. */
static void phase_mremap(void)
{
	tu_section("mremap:every:1: realloc of a huge block fails with ENOMEM, block intact");
	size_t n = 34 << 20;
	unsigned char *p = MALLOC(n);
	CHECK(p != NULL);
	if (!p)
		return;
	tu_fill(p, 0, n, 77);
	set_plan("mremap:every:1");
	static const size_t to[] = {68 << 20, 33 << 20, 160 << 20};
	for (unsigned i = 0; i < 3; i++) {
		errno = 0;
		void *q = REALLOC(p, to[i]);
		CHECKF(q == NULL && errno == ENOMEM, "realloc to %zu: %p errno %d", to[i], q,
		       errno);
		ep_nulls[EP_REALLOC] += q == NULL;
		CHECK(USABLE_SIZE(p) >= n);
	}
	CHECK_EQ(tu_verify(p, n, 77), (size_t)-1);
	no_faults();
	unsigned char *q = REALLOC(p, 68 << 20);
	CHECK(q != NULL);
	if (q) {
		CHECK_EQ(tu_verify(q, n, 77), (size_t)-1);
		FREE(q);
	}
	check_unlocked("mremap");
	check_heap("mremap");
}

/* mremap fails while a span's pay moves pages into it (core/page/move.c): failed as a
 * kernel that refuses the move fails it, with the span's pages unmapped first
 * (mremap_to unmaps the destination before it looks at the source). Those pages are
 * mapped again: the new buffer is written whole (without that, a SIGSEGV) and every
 * buffer keeps its bytes. */
static void phase_move(void)
{
	enum { N = 24 };
	const size_t mib = 1UL << 20;
	tu_section("mremap:every:1 during a pay that moves pages: the span's pages, unmapped "
		   "by the failed move, are mapped again; every buffer keeps its bytes");
	unsigned char *buf[N];
	for (int i = 0; i < N; i++) {
		buf[i] = MALLOC(6 * mib);
		CHECK(buf[i] != NULL);
		if (!buf[i])
			return;
		tu_fill(buf[i], 0, 6 * mib, 600 + (uint64_t)i);
	}
	/* 72 MiB warm free in holes too short for 8 MiB: the next span is paid for. */
	for (int i = 1; i < N; i += 2)
		FREE(buf[i]);
	unsigned long inj0 = uslub_os_fault_injected();
	set_plan("mremap:every:1");
	unsigned char *big = MALLOC(8 * mib);
	no_faults();
	CHECK(big != NULL);
	if (big) {
		tu_fill(big, 0, 8 * mib, 699);
		CHECK_EQ(tu_verify(big, 8 * mib, 699), (size_t)-1);
	}
	CHECKF(uslub_os_fault_injected() > inj0 || !uslub_pages_can_move(), "no move was tried");
	for (int i = 0; i < N; i += 2)
		CHECKF(tu_verify(buf[i], 6 * mib, 600 + (uint64_t)i) == (size_t)-1,
		       "buffer %d lost its bytes", i);
	check_unlocked("move");
	check_heap("move");
	for (int i = 0; i < N; i += 2)
		FREE(buf[i]);
	FREE(big);
}

/* madvise fails: memory is not handed back, and the figures say so. */
static void phase_madvise(void)
{
	tu_section("madvise:every:1 and :every:2: trimming and freeing past the trim "
		   "threshold keep every page accounted for");
	enum { N = 48 };
	void *p[N];
	const char *plans[] = {"madvise:every:1", "madvise:every:2", "madvise:3"};
	/* The earlier phases' huge blocks, cached, would make malloc_trim succeed. */
	uslub_huge_cache_release(true);
	for (unsigned k = 0; k < 3; k++) {
		for (int i = 0; i < N; i++) {
			p[i] = MALLOC(1 << 20);
			CHECK(p[i] != NULL);
			if (p[i])
				memset(p[i], 0x5a, 1 << 20); /* warm: worth handing back */
		}
		set_plan(plans[k]);
		unsigned long inj0 = uslub_os_fault_injected();
		/* 48 MiB freed passes the 32 MiB trim threshold: the free path releases. */
		for (int i = 0; i < N; i++)
			FREE(p[i]);
		int trimmed = MALLOC_TRIM(0);
		if (k == 0)
			CHECK_EQ(trimmed, 0);
		CHECKF(uslub_os_fault_injected() > inj0, "%s injected nothing", plans[k]);
		no_faults();
		keep_verify(plans[k]);
		check_unlocked(plans[k]);
		check_heap(plans[k]);
	}
	MALLOC_TRIM(0);
	check_heap("madvise, trimmed with no faults");
}

/* Every third OS call of any kind fails, under a random mix of every entry point. */
static void phase_all_random(void)
{
	tu_section("all:every:3 under 20000 random operations of every entry point");
	enum { SLOTS = 256 };
	unsigned char *slot[SLOTS] = {0};
	size_t len[SLOTS] = {0};
	uint64_t rng = 99;
	uint64_t live0 = live_bytes();
	set_plan("all:every:3");
	for (int i = 0; i < 20000; i++) {
		unsigned k = (unsigned)(tu_rand(&rng) % SLOTS);
		uint64_t r = tu_rand(&rng);
		size_t size = r % 16 == 0  ? (33 << 20) + (r >> 40) % (8 << 20)
			      : r % 4 == 0 ? (r >> 32) % (512 << 10) + 1
					   : (r >> 32) % 4000 + 1;
		if (slot[k]) {
			CHECK_EQ(tu_verify(slot[k], len[k] < 256 ? len[k] : 256, (uint64_t)k),
				 (size_t)-1);
			if (r & 0x100) {
				errno = 0;
				unsigned char *q = REALLOC(slot[k], size);
				if (!q) {
					CHECK_EQ(errno, ENOMEM);
					ep_nulls[EP_REALLOC]++;
					continue;
				}
				ep_ok[EP_REALLOC]++;
				slot[k] = q;
				size_t keep_n = len[k] < size ? len[k] : size;
				keep_n = keep_n < 256 ? keep_n : 256;
				CHECK_EQ(tu_verify(q, keep_n, (uint64_t)k), (size_t)-1);
				len[k] = size;
				tu_fill(q, 0, size < 256 ? size : 256, (uint64_t)k);
				continue;
			}
			FREE(slot[k]);
			slot[k] = NULL;
			if (r & 0x200)
				MALLOC_TRIM(r & 0x400 ? 0 : 1 << 20);
			continue;
		}
		enum ep e = (enum ep)((r >> 12) % NR_EP);
		if (e == EP_REALLOC)
			e = EP_MALLOC;
		slot[k] = attempt(e, size);
		if (slot[k]) {
			len[k] = size;
			tu_fill(slot[k], 0, size < 256 ? size : 256, (uint64_t)k);
		}
	}
	no_faults();
	for (int k = 0; k < SLOTS; k++)
		FREE(slot[k]);
	keep_verify("all:every:3");
	check_unlocked("all:every:3");
	check_heap("all:every:3");
	CHECK_EQ(live_bytes(), live0);
	all_work("after all:every:3");
}

static void phase_parse(void)
{
	tu_section("USLUB_FAULT specs: good ones parse, bad ones are refused whole");
	static const char *good[] = {"",
				     "mmap:3",
				     "mmap:every:5",
				     "madvise:1",
				     "mremap:every:1",
				     "all:every:3",
				     "mmap:2,madvise:every:4,mremap:1"};
	static const char *bad[] = {"mmap",	    "mmap:",	     "mmap:0",
				    "mmap:every:0", "mmap:x",	     "brk:3",
				    "mmap:every:",  "mmap:3,",	     ",",
				    "mmap:3:4",	    "mmap:every:5x", "mmap:99999999999999999999"};
	struct uslub_fault_plan plan;
	for (unsigned i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECKF(uslub_fault_parse(good[i], &plan) == 0, "\"%s\"", good[i]);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECKF(uslub_fault_parse(bad[i], &plan) == -1, "\"%s\"", bad[i]);
	CHECK(uslub_fault_parse("mmap:2,mremap:every:4", &plan) == 0);
	CHECK(plan.nth[0] == 2 && plan.every[1] == 4 && plan.nth[2] == 0);
}

/* realloc of a huge block moves it with mremap, then records it again in the huge-block
 * table. It once did so after the move, and when that insert needed a bigger table whose
 * mmap failed, the moved block was forgotten: the next free() or malloc_usable_size() of
 * it stopped the program with "invalid pointer". The table's room is now made before the
 * move (huge.c, uslub_huge_realloc); this keeps it so. 256 huge blocks fill the first
 * table (512 slots) to the point where the re-insert must grow it. */
static int huge_table_realloc(void)
{
	static void *p[256];
	printf("test_fault huge-table: realloc of a huge block while the table's mmap fails\n");
	for (int i = 0; i < 256; i++)
		p[i] = MALLOC(33 << 20);
	set_plan("mmap:1"); /* the next mmap fails; mremap still works */
	void *q = REALLOC(p[0], 66 << 20);
	no_faults();
	if (q) {
		p[0] = q;
		CHECK(USABLE_SIZE(q) >= (66 << 20)); /* aborts when the block was forgotten */
	}
	for (int i = 0; i < 256; i++)
		FREE(p[i]);
	check_heap("huge table");
	return tu_summary("test_fault huge-table");
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	signal(SIGALRM, watchdog);
	alarm(240);
	if (argc > 1 && strcmp(argv[1], "huge-table") == 0)
		return huge_table_realloc();
	printf("test_fault (linked, uslub_ names)\n");
	phase_parse();
	keep_make(1);
	check_heap("start");
	phase_mmap_counted();
	phase_mremap();
	phase_move();
	phase_madvise();
	phase_all_random();
	phase_mmap_exhausted();
	keep_verify("end");
	keep_free();
	check_heap("end");
	unsigned long nulls = 0;
	printf("  faults injected: %lu; NULL/ENOMEM returns survived:", uslub_os_fault_injected());
	for (int e = 0; e < NR_EP; e++) {
		printf(" %s %lu%s", ep_names[e], ep_nulls[e], e + 1 < NR_EP ? "," : "\n");
		nulls += ep_nulls[e];
		CHECKF(ep_nulls[e] > 0, "%s never failed", ep_names[e]);
	}
	printf("  total NULL returns %lu\n", nulls);
	return tu_summary("test_fault");
}

#else

/* ---- preload: USLUB_FAULT=mmap:every:3 from the environment ---------------------- */

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	signal(SIGALRM, watchdog);
	alarm(120);
	printf("test_fault (preload, USLUB_FAULT=%s)\n", getenv("USLUB_FAULT"));
	CHECK(tu_totals_fn() != NULL);
	if (!getenv("USLUB_FAULT") || strcmp(getenv("USLUB_FAULT"), "mmap:every:3") != 0) {
		printf("run with USLUB_FAULT=mmap:every:3\n");
		return 1;
	}
	/* (With every second call failing, the first huge block's two calls - the block,
	 * then the table that records huge blocks - would always have one fail.) */
	tu_section("huge blocks need an mmap each once malloc_trim has emptied the huge "
		   "cache: with every third failing, every entry point both fails with ENOMEM "
		   "and succeeds; the process runs on");
	keep_make(0);
	for (int round = 0; round < 8; round++) {
		for (int e = 0; e < NR_EP; e++) {
			void *p = attempt((enum ep)e, (33 << 20) + (size_t)round * 4096);
			FREE(p);
			malloc_trim(0);
		}
	}
	for (int e = 0; e < NR_EP; e++) {
		CHECKF(ep_nulls[e] > 0, "%s never failed", ep_names[e]);
		CHECKF(ep_ok[e] > 0, "%s never succeeded", ep_names[e]);
	}
	keep_verify("end");
	/* stdio, which allocates through us, still works. */
	char *s = NULL;
	CHECK(asprintf(&s, "%d-%s", 42, "ok") > 0 && strcmp(s, "42-ok") == 0);
	free(s);
	keep_free();
	return tu_summary("test_fault");
}

#endif
