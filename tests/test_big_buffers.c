/* Big buffers: a program that replaces 5-25 MiB buffers (spans of the large zone,
 * core/page/run.c) reuses their pages instead of faulting every page of each new one in
 * again; above HUGE_THRESHOLD (32 MiB) the huge cache (core/page/huge.c) reuses freed
 * mappings: calloc of a reused mapping still reads zero; malloc_trim and the decay period
 * give the cached mappings back; a mapping refused under RLIMIT_AS (and, linked, at
 * USLUB_MEM_LIMIT) first gives back cached ones; linked, the heap walker's accounting holds
 * throughout; realloc,
 * memalign and fork keep huge blocks' bytes (also under USLUB_DEBUG=FZP, where each has red
 * zones before and after it); two threads replacing buffers of 64 KiB - 8 MiB keep every
 * byte. Built linked (uslub_ names) and plain (run preloaded). */
#include "test_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#ifdef USLUB_PREFIXED
#include "debug/check.h"
#include "page/page.h"
#include "thread/thread.h"
#endif

#define MIB TU_MIB

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static void check_heap(const char *when)
{
#ifdef USLUB_PREFIXED
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	CHECKF(errors == 0, "%s: the heap walker found %lu inconsistencies", when,
	       (unsigned long)errors);
#else
	(void)when;
#endif
}

/* 200 replacements of 5-25 MiB buffers, four live, each filled once: the pages faulted in
 * stay a small part of the pages filled (without the cache, every one of them: measured
 * 1.01 faults per page filled), and resident memory stays within M_TRIM_THRESHOLD (what
 * the zone keeps warm, decay.c section 9) and a little of the live buffers - warm free
 * pages above that go back as fresh ones are faulted in (without it, measured: 52 MiB
 * over). */
static void replace_buffers(void)
{
	enum { LIVE = 4, ROUNDS = 200 };
	tu_section("%d replacements of 5-25 MiB buffers, %d live, each filled once: page "
		   "faults under a quarter of the pages filled, peak resident memory within "
		   "40 MiB of the live buffers' peak",
		   ROUNDS, LIVE);
	/* Under the debug letters the quarantine holds freed buffers; the sanitizers'
	 * shadow pages are resident with them. */
	bool plain = !getenv("USLUB_DEBUG") || !*getenv("USLUB_DEBUG");
	size_t rss0 = tu_rss_bytes(), peak_rss = 0, peak_live = 0;
	unsigned char *buf[LIVE] = {0};
	size_t len[LIVE] = {0};
	uint64_t seed = 13;
	for (int i = 0; i < LIVE; i++) {
		len[i] = 5 * MIB + tu_rand(&seed) % (20 * MIB);
		buf[i] = MALLOC(len[i]);
		CHECK(buf[i] != NULL);
		if (buf[i])
			memset(buf[i], i, len[i]);
	}
	long faults0 = minor_faults();
	size_t filled = 0;
	for (int r = 0; r < ROUNDS; r++) {
		int i = (int)(tu_rand(&seed) % LIVE);
		size_t n = 5 * MIB + tu_rand(&seed) % (20 * MIB);
		unsigned char *p = MALLOC(n); /* the new one first, as a smart pointer does */
		CHECK(p != NULL);
		if (!p)
			break;
		CHECK(buf[i][len[i] - 1] == buf[i][0]);
		FREE(buf[i]);
		memset(p, r & 0xff, n);
		filled += n;
		size_t live = n, rss = tu_rss_bytes(); /* both were live at the malloc */
		for (int k = 0; k < LIVE; k++)
			live += len[k];
		peak_live = live > peak_live ? live : peak_live;
		peak_rss = rss > peak_rss ? rss : peak_rss;
		buf[i] = p;
		len[i] = n;
	}
	/* Peak against peak, as GNU time's maximum resident set and the live set's peak:
	 * resident memory rises only where fresh pages are filled. */
	size_t over = peak_rss > rss0 + peak_live ? peak_rss - rss0 - peak_live : 0;
	long faults = minor_faults() - faults0;
	size_t pages = filled / 4096;
	printf("  %ld page faults for %zu pages filled (%.3f a page)\n", faults, pages,
	       (double)faults / (double)pages);
#ifndef __SANITIZE_THREAD__ /* TSan's shadow pages fault in with the program's */
	CHECKF((size_t)faults * 4 < pages, "%ld faults for %zu pages", faults, pages);
#endif
	printf("  peak resident %zu MiB beyond the live buffers' peak (%zu MiB)\n", over / MIB,
	       peak_live / MIB);
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
	if (plain)
		CHECKF(over <= 40 * MIB, "peak resident %zu MiB beyond the live buffers' peak",
		       over / MIB);
#endif
	(void)plain;
	for (int i = 0; i < LIVE; i++)
		FREE(buf[i]);
	check_heap("after the replacements");
}

/* A buffer up to HUGE_THRESHOLD is a span of the large zone: freed, its pages are the next
 * one's, in place, with no system call; the heap walker sees it as a large block. */
/* Lines of /proc/self/maps: the mappings the kernel keeps for the process. */
static int mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, c;
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* Whether this kernel moves pages with MREMAP_DONTUNMAP (5.7), asked on a scratch
 * mapping of the test's own. */
static bool kernel_moves(void)
{
	size_t page = 4096;
	char *a = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return false;
	a[0] = 1;
	bool ok = mremap(a, page, page, MREMAP_MAYMOVE | MREMAP_FIXED | 4 /* DONTUNMAP */,
			 a + page) != MAP_FAILED;
	ok = ok && a[page] == 1;
	munmap(a, 2 * page);
	return ok;
}

/* Section 10 of the page allocator (core/page/move.c): a span cut from fresh pages while
 * the zone keeps more warm free memory than it may gets the pages paid for moved in - no
 * page faults filling it - and the live buffers around keep their bytes; the mappings the
 * moves split are joined again once the memory goes back (malloc_trim). */
static void pay_moves(void)
{
	enum { N = 24 };
	tu_section("a span paid for by warm free pages gets them moved in (under 128 of its "
		   "2048 pages faulted filling it), live buffers keep their bytes, and the "
		   "mappings moves split are joined again after malloc_trim");
	bool plain = !getenv("USLUB_DEBUG") || !*getenv("USLUB_DEBUG");
	bool moves = kernel_moves();
	if (!moves)
		printf(
		    "  this kernel does not move pages (MREMAP_DONTUNMAP): faults not checked\n");
	MALLOC_TRIM(0);
	int maps0 = mappings();
	unsigned char *buf[N];
	for (int i = 0; i < N; i++) {
		buf[i] = MALLOC(6 * MIB);
		CHECK(buf[i] != NULL);
		if (!buf[i])
			return;
		tu_fill(buf[i], 0, 6 * MIB, (uint64_t)i);
	}
	/* 72 MiB warm free in holes too short for 8 MiB, 72 in use: 40 more than the zone
	 * keeps (M_TRIM_THRESHOLD, 32 MiB), so the next span's fresh pages are all paid for
	 * (without the move, measured: 515-900 faults). */
	for (int i = 1; i < N; i += 2)
		FREE(buf[i]);
	long faults0 = minor_faults();
#ifdef USLUB_PREFIXED
	uint64_t moved0 = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		moved0 += __atomic_load_n(&uslub_nodes[z].moved_pages, __ATOMIC_RELAXED);
#endif
	unsigned char *big = MALLOC(8 * MIB);
	CHECK(big != NULL);
	if (!big)
		return;
	tu_fill(big, 0, 8 * MIB, 99);
	long faults = minor_faults() - faults0;
	printf("  %ld page faults filling an 8 MiB span (2048 pages)\n", faults);
#ifndef __SANITIZE_THREAD__ /* TSan's shadow pages fault in with the program's */
	if (moves && plain)
		CHECKF(faults < 128, "%ld page faults filling the span", faults);
#endif
#ifdef USLUB_PREFIXED
	/* What the stats report as moved_bytes: the pages the pay moved in. */
	uint64_t moved = 0;
	for (unsigned z = 0; z < NR_ZONES; z++)
		moved += __atomic_load_n(&uslub_nodes[z].moved_pages, __ATOMIC_RELAXED);
	if (moves && plain)
		CHECKF(moved - moved0 >= 256, "%lu pages moved in",
		       (unsigned long)(moved - moved0));
	printf("  %lu pages moved in\n", (unsigned long)(moved - moved0));
#endif
	CHECK(tu_verify(big, 8 * MIB, 99) == (size_t)-1);
	for (int i = 0; i < N; i += 2)
		CHECKF(tu_verify(buf[i], 6 * MIB, (uint64_t)i) == (size_t)-1,
		       "live buffer %d lost its bytes", i);
	/* More spans, each paid for while the zone keeps more than it may: moved ranges
	 * that the kernel keeps as mappings of their own, until the memory goes back. */
	unsigned char *more[4];
	for (int i = 0; i < 4; i++) {
		more[i] = MALLOC(8 * MIB);
		CHECK(more[i] != NULL);
		if (more[i])
			tu_fill(more[i], 0, 8 * MIB, 200 + (uint64_t)i);
	}
	for (int i = 0; i < 4; i++)
		if (more[i])
			CHECK(tu_verify(more[i], 8 * MIB, 200 + (uint64_t)i) == (size_t)-1);
	/* The holes again, some of them emptied by the move: usable, and what is written
	 * stays. */
	for (int i = 1; i < N; i += 2) {
		buf[i] = MALLOC(6 * MIB);
		CHECK(buf[i] != NULL);
		if (buf[i])
			tu_fill(buf[i], 0, 6 * MIB, 100 + (uint64_t)i);
	}
	for (int i = 0; i < N; i++)
		if (buf[i])
			CHECKF(tu_verify(buf[i], 6 * MIB,
					 i % 2 ? 100 + (uint64_t)i : (uint64_t)i) == (size_t)-1,
			       "buffer %d lost its bytes", i);
	CHECK(tu_verify(big, 8 * MIB, 99) == (size_t)-1);
	check_heap("after moves");
	int maps1 = mappings();
	for (int i = 0; i < N; i++)
		FREE(buf[i]);
	for (int i = 0; i < 4; i++)
		FREE(more[i]);
	FREE(big);
	MALLOC_TRIM(0);
	int maps2 = mappings();
	printf("  mappings: %d before, %d with the buffers, %d after malloc_trim\n", maps0, maps1,
	       maps2);
#ifndef __SANITIZE_THREAD__ /* TSan maps shadow for the ranges the program touched */
	CHECKF(maps2 <= maps0 + 2, "%d mappings after malloc_trim, %d before", maps2, maps0);
#endif
}

static void span_reused(void)
{
	tu_section("a 20 MiB buffer is cut from the zone's pages: freed and asked for again, "
		   "its pages, not faulted in again");
#ifdef USLUB_PREFIXED
	uint64_t huge0 = atomic_load(&uslub_huge_bytes);
#endif
	unsigned char *p = MALLOC(20 * MIB);
	CHECK(p != NULL);
	if (!p)
		return;
	memset(p, 1, 20 * MIB);
#ifdef USLUB_PREFIXED
	CHECK_EQ(atomic_load(&uslub_huge_bytes), huge0); /* no mapping of its own */
#endif
	FREE(p);
	long faults0 = minor_faults();
	/* Under USLUB_DEBUG a large block has a red-zone page before it and the quarantine
	 * may hold it: the layout and the reuse are the letters' (large.c). */
	int plain = !getenv("USLUB_DEBUG") || !*getenv("USLUB_DEBUG");
	unsigned char *q = MALLOC(20 * MIB);
	/* The zone keeps the freed pages whole, merged with free ones before them if any
	 * (page/extent.c): the block is cut at the start of that run, over its own pages. */
	CHECK(q && (q <= p || !plain) && q + 20 * MIB > p);
	if (q)
		memset(q, 2, 20 * MIB);
	long faults = minor_faults() - faults0;
	CHECKF(faults < 64, "%ld page faults refilling a reused 20 MiB buffer", faults);
	CHECK(USABLE_SIZE(q) >= 20 * MIB);
	/* realloc within the span's zone: a shrink that keeps half stays in place */
	unsigned char *r = REALLOC(q, 12 * MIB);
	CHECK(r == q || !plain);
	if (r)
		CHECK(r[12 * MIB - 1] == 2);
	unsigned char *r2 = r ? REALLOC(r, 7 * MIB) : NULL;
	CHECK(r2 == r || !plain);
#ifdef USLUB_PREFIXED
	CHECK_EQ(atomic_load(&uslub_huge_bytes), huge0);
#endif
	check_heap("after a span");
	/* Below a span's size (slab.h, PF_BARE): every page names the block again. */
	unsigned char *s = r2 ? REALLOC(r2, 3840 * 1024) : NULL;
	CHECK(s == r2 || !plain);
	if (s)
		CHECK(s[3840 * 1024 - 1] == 2);
	check_heap("after a span shrank to 3.75 MiB");
	/* A shrink to less than half moves (api.c), its bytes with it, and the old pages
	 * are free: the next block of the old size may take them. */
	unsigned char *t = s ? REALLOC(s, MIB) : NULL;
	CHECK(t != NULL);
	CHECK(t != s || !plain);
	if (t)
		CHECK(t[0] == 2 && t[MIB - 1] == 2 && USABLE_SIZE(t) < 2 * MIB);
	check_heap("after a shrink that moved");
	FREE(t);
}

static size_t first_nonzero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return i;
	return (size_t)-1;
}

/* calloc of a mapping that held another block reads zero: reused whole, with its tail
 * cut, and grown. */
static void calloc_reused(void)
{
	tu_section("calloc of a reused huge mapping reads zero (same size, smaller, grown)");
	static const size_t first[] = {40 * MIB, 40 * MIB, 100 * MIB, 34 * MIB};
	static const size_t then[] = {40 * MIB, 36 * MIB, 34 * MIB, 68 * MIB};
	for (unsigned k = 0; k < sizeof(first) / sizeof(first[0]); k++) {
		MALLOC_TRIM(0);
		unsigned char *p = MALLOC(first[k]);
		CHECK(p != NULL);
		if (!p)
			continue;
		memset(p, 0xab, first[k]);
		FREE(p);
		unsigned char *q = CALLOC(1, then[k]);
		CHECK(q != NULL);
		if (!q)
			continue;
		/* In place, or moved by mremap when grown. */
		if (then[k] <= first[k])
			CHECKF(q == p, "%zu MiB after %zu MiB: a new mapping", then[k] / MIB,
			       first[k] / MIB);
		CHECKF(first_nonzero(q, then[k]) == (size_t)-1,
		       "calloc(%zu MiB) after %zu MiB: byte %zu not zero", then[k] / MIB,
		       first[k] / MIB, first_nonzero(q, then[k]));
		CHECK(USABLE_SIZE(q) >= then[k]);
		FREE(q);
	}
	check_heap("after calloc");
}

/* mallopt(M_TRIM_THRESHOLD, v): linked, the value it sets (decay.c). */
#ifdef USLUB_PREFIXED
#define TRIM_THRESHOLD(v) (uslub_trim_threshold = (uint64_t)(v), 1)
#else
#define TRIM_THRESHOLD(v) mallopt(M_TRIM_THRESHOLD, v)
#endif

static uint64_t warm_free(void)
{
	struct uslub_totals t;
	memset(&t, 0, sizeof(t));
	tu_totals_fn()(&t);
	return t.warm_free;
}

/* Section 11 of the page allocator (core/page/decay.c): freed while the zone keeps more
 * warm memory than it may (M_TRIM_THRESHOLD 0 here, so a quarter of what is in use), a big
 * buffer the program wrote only the ends of goes free cold - its pages handed back, the
 * zone's warm free memory not grown by it - and one written through goes free warm, and
 * comes back without faults; calloc of a buffer reused reads zero, and buffers replaced at
 * random keep the bytes written at their ends. */
#ifdef USLUB_PREFIXED
static void set_pay_step(uint32_t step)
{
	for (unsigned z = 0; z < NR_ZONES; z++)
		__atomic_store_n(&uslub_nodes[z].pay_step, step, __ATOMIC_RELAXED);
}

/* Its pay and the 2 MiB buffer freed after it: one zone, the large one. */
static bool any_pay_step(uint32_t step)
{
	for (unsigned z = 0; z < NR_ZONES; z++)
		if (__atomic_load_n(&uslub_nodes[z].pay_step, __ATOMIC_RELAXED) == step)
			return true;
	return false;
}

/* Section 11's blocks of 1-4 MiB: looked at only while spans pay (a block that size is
 * no span's pages, and counts warm only for their pays): a 2 MiB buffer written at its
 * ends goes free warm when no span has paid in this step or the last - replacing such
 * buffers then costs no system call - and cold right after a span has. */
static void placed_unfilled(void)
{
	tu_section("a 2 MiB buffer written at its ends goes free warm when no span has paid "
		   "lately, and cold after a 20 MiB malloc paid for its fresh pages");
	if (getenv("USLUB_DEBUG") && *getenv("USLUB_DEBUG"))
		return; /* freed buffers wait in the quarantine */
	CHECK(TRIM_THRESHOLD(0) == 1);
	/* The two buffers on pages never written (nothing warm is left to place them on),
	 * then warm free memory over the keep (a quarter of what is in use) elsewhere: each
	 * free passes the keep, and the span below pays. */
	MALLOC_TRIM(0);
	/* Each between two in use: a cold block merged with a warm buddy counts warm. */
	unsigned char *g[4], *p, *q, *warm[2];
	g[0] = MALLOC(2 * MIB);
	p = MALLOC(2 * MIB);
	g[1] = MALLOC(2 * MIB);
	q = MALLOC(2 * MIB);
	g[2] = MALLOC(2 * MIB);
	warm[0] = MALLOC(16 * MIB);
	g[3] = MALLOC(2 * MIB);
	warm[1] = MALLOC(16 * MIB);
	CHECK(g[0] && g[1] && g[2] && g[3] && p && q && warm[0] && warm[1]);
	if (!g[0] || !g[1] || !g[2] || !g[3] || !p || !q || !warm[0] || !warm[1])
		return;
	p[0] = p[2 * MIB - 1] = q[0] = q[2 * MIB - 1] = 1;
	/* Two warm runs apart, each shorter than the span below: it finds room in
	 * neither as the zone keeps them (page/extent.c), and is placed on one with fresh
	 * pages after it, which the other pays for. */
	for (int i = 0; i < 2; i++) {
		memset(warm[i], 5, 16 * MIB);
		FREE(warm[i]);
	}
	set_pay_step(uslub_step_now() - 10);
	uint64_t w0 = warm_free();
	FREE(p);
	uint64_t w1 = warm_free();
	unsigned char *span = MALLOC(20 * MIB);
	CHECK(span != NULL);
	uint32_t paid = uslub_step_now();
	CHECKF(any_pay_step(paid) || any_pay_step(paid - 1),
	       "a 20 MiB malloc over the keep did not pay");
	uint64_t w2 = warm_free();
	FREE(q);
	uint64_t w3 = warm_free();
	printf("  warm free memory %+.1f MiB at the free with no span paying, %+.1f MiB after "
	       "one paid\n",
	       ((double)w1 - (double)w0) / MIB, ((double)w3 - (double)w2) / MIB);
	CHECKF(w1 >= w0 + MIB, "no span paying: warm free memory %+.1f MiB",
	       ((double)w1 - (double)w0) / MIB);
	CHECKF(w3 < w2 + MIB, "after a pay: warm free memory %+.1f MiB",
	       ((double)w3 - (double)w2) / MIB);
	FREE(span);
	for (int i = 0; i < 4; i++)
		FREE(g[i]);
}
#endif

static void unfilled_buffers(void)
{
	enum { LIVE = 16, ROUNDS = 400 };
	tu_section("an 8 MiB buffer written at its ends goes free cold (warm free memory "
		   "grows under 1 MiB); one written through goes free warm and is refilled with "
		   "under 1/4 of its pages faulted in; %d replacements of 1-8 MiB buffers written "
		   "at their ends, %d live, keep those bytes; calloc of each reused reads zero",
		   ROUNDS, LIVE);
	/* Under the debug letters freed buffers wait in the quarantine. */
	bool plain = !getenv("USLUB_DEBUG") || !*getenv("USLUB_DEBUG");
	CHECK(TRIM_THRESHOLD(0) == 1);
	MALLOC_TRIM(0);
	unsigned char *full = MALLOC(8 * MIB), *ends = MALLOC(8 * MIB);
	CHECK(full != NULL && ends != NULL);
	if (full && ends) {
		memset(full, 3, 8 * MIB);
		ends[0] = ends[8 * MIB - 1] = 1;
		/* That one first: a cold block merged with a warm buddy counts warm. */
		uint64_t w0 = warm_free();
		FREE(ends);
		uint64_t w1 = warm_free();
		/* In its place: the zone's lowest fitting run, its pages cold. */
		unsigned char *q = CALLOC(1, 8 * MIB);
		CHECK(q != NULL);
		if (q) {
			CHECKF(first_nonzero(q, 8 * MIB) == (size_t)-1,
			       "calloc(8 MiB) after one written at its ends: byte %zu not zero",
			       first_nonzero(q, 8 * MIB));
			FREE(q);
		}
		FREE(full);
		uint64_t w2 = warm_free();
		printf("  warm free memory %+.1f MiB at the free of the one written at its ends, "
		       "%+.1f MiB at the other's\n",
		       ((double)w1 - (double)w0) / MIB, ((double)w2 - (double)w1) / MIB);
		if (plain) {
			CHECKF(w1 < w0 + MIB, "written at its ends: warm free memory +%.1f MiB",
			       ((double)w1 - (double)w0) / MIB);
			CHECKF(w2 >= w1 + 7 * MIB, "written through: warm free memory %+.1f MiB",
			       ((double)w2 - (double)w1) / MIB);
		}
		long faults0 = minor_faults();
		full = MALLOC(8 * MIB);
		CHECK(full != NULL);
		if (full) {
			memset(full, 4, 8 * MIB);
			long faults = minor_faults() - faults0;
			printf("  %ld page faults refilling it\n", faults);
#ifndef __SANITIZE_THREAD__ /* TSan's shadow pages fault in with the program's */
			if (plain)
				CHECKF(faults * 4 < 2048, "%ld faults refilling 8 MiB", faults);
#endif
			FREE(full);
		}
	}
	unsigned char *buf[LIVE] = {0};
	size_t len[LIVE] = {0};
	uint64_t seed = 29;
	for (int r = 0; r < ROUNDS + LIVE; r++) {
		int i = r < LIVE ? r : (int)(tu_rand(&seed) % LIVE);
		if (buf[i]) {
			CHECK(buf[i][0] == 1 && buf[i][len[i] - 1] == 2);
			FREE(buf[i]);
		}
		len[i] = MIB + tu_rand(&seed) % (7 * MIB);
		buf[i] = MALLOC(len[i]);
		CHECK(buf[i] != NULL);
		if (!buf[i])
			break;
		buf[i][0] = 1;
		buf[i][len[i] - 1] = 2;
	}
	for (int i = 0; i < LIVE && buf[i]; i++) {
		size_t n = len[i];
		FREE(buf[i]);
		unsigned char *q = CALLOC(1, n);
		CHECK(q != NULL);
		if (!q)
			continue;
		CHECKF(first_nonzero(q, n) == (size_t)-1,
		       "calloc(%zu) after buffers written at their ends: byte %zu not zero", n,
		       first_nonzero(q, n));
		FREE(q);
	}
	CHECK(TRIM_THRESHOLD(32 << 20) == 1);
	check_heap("after the unfilled buffers");
}

/* What the cache holds goes back: at once with malloc_trim, and after the decay period at
 * the next large allocation (the huge paths look at the clock too). */
static void give_back(void)
{
	enum { N = 3 };
	tu_section("malloc_trim gives cached mappings back (resident memory drops); so does "
		   "the next large allocation after the decay period");
	for (int round = 0; round < 2; round++) {
		MALLOC_TRIM(0);
		void *p[N];
		for (int i = 0; i < N; i++) {
			p[i] = MALLOC(40 * MIB);
			CHECK(p[i] != NULL);
			if (p[i])
				memset(p[i], 1, 40 * MIB);
		}
		for (int i = 0; i < N; i++)
			FREE(p[i]);
		size_t held = tu_rss_bytes();
		if (round == 0) {
			MALLOC_TRIM(0);
		} else {
			struct timespec ts = {1, 200 * 1000 * 1000};
			nanosleep(&ts, NULL);
			/* A large block's path looks too. A loaded machine (the test suite
			 * runs two tests at a time on two CPUs) once left two of the three
			 * mappings resident here: the next looks, 0.3 s apart, bound the
			 * decay to 2.4 s instead of failing on one look. */
			for (int look = 0; look < 5; look++) {
				FREE(MALLOC(256 * 1024));
				if (tu_rss_bytes() + (N - 1) * 40 * MIB <= held)
					break;
				struct timespec again = {0, 300 * 1000 * 1000};
				nanosleep(&again, NULL);
			}
		}
		size_t after = tu_rss_bytes();
		CHECKF(after + (N - 1) * 40 * MIB <= held, "%s: resident %zu MiB, then %zu MiB",
		       round ? "decay" : "malloc_trim", held / MIB, after / MIB);
	}
	check_heap("after the give-back");
}

static size_t vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb << 10;
}

/* Under RLIMIT_AS the cached mappings hold address space: a mapping (or a growth) the
 * kernel refuses gets it from them before malloc gives up. */
static void address_space(void)
{
	tu_section("RLIMIT_AS = VmSize + 20 MiB with 80 MiB cached: a 90 MiB block still "
		   "comes (the cache gives its address space back first)");
	MALLOC_TRIM(0);
	void *a = MALLOC(40 * MIB), *b = MALLOC(40 * MIB);
	CHECK(a != NULL && b != NULL);
	FREE(a);
	FREE(b);
	struct rlimit saved;
	CHECK(getrlimit(RLIMIT_AS, &saved) == 0);
	struct rlimit rl = saved;
	rl.rlim_cur = vm_size() + 20 * MIB; /* the 80 MiB cached are in VmSize */
	CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
	unsigned char *c = MALLOC(90 * MIB);
	CHECKF(c != NULL, "90 MiB under RLIMIT_AS: errno %d", errno);
	if (c) {
		c[0] = c[90 * MIB - 1] = 1;
		FREE(c);
	}
	CHECK(setrlimit(RLIMIT_AS, &saved) == 0);
	MALLOC_TRIM(0);
	check_heap("under RLIMIT_AS");
}

/* p holds n bytes of `seed`'s pattern from its start. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 4096)
		p[i] = (unsigned char)(seed + i / 4096);
	p[n - 1] = (unsigned char)seed;
}

static int holds(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 4096)
		if (p[i] != (unsigned char)(seed + i / 4096))
			return 0;
	return 1;
}

/* The usable size: the request under USLUB_DEBUG (checkers see the request), at least it
 * otherwise. Under Z or P a huge block begins a page into its mapping (page/huge.c). */
static int usable_ok(void *p, size_t n)
{
	const char *d = getenv("USLUB_DEBUG");
	return d && *d && strcmp(d, "0") ? USABLE_SIZE(p) == n : USABLE_SIZE(p) >= n;
}

/* A huge block keeps its bytes and its size through realloc - in place, grown (mremap,
 * which may move it), shrunk, to a span and to a large block and back - and memalign and
 * posix_memalign give aligned huge blocks; a forked child works on its copies. Run by default and
 * under USLUB_DEBUG=FZP (meson.build), where each block has red zones before and after it that
 * malloc_trim's sweep and every free check: a layout that broke them would abort. */
static void keep_contents(void)
{
	tu_section("huge blocks through realloc (same pages, grown, shrunk, to a 20 MiB span, to "
		   "100 KiB and back), memalign up to 2 MiB and fork: bytes, usable size and red "
		   "zones kept");
	size_t n = 33 * MIB + 100;
	unsigned char *p = MALLOC(n);
	CHECK(p != NULL && usable_ok(p, n));
	fill(p, n, 1);
	static const size_t steps[] = {33 * MIB + 200, 48 * MIB, 20 * MIB, 100 * 1024, 34 * MIB};
	size_t kept = n;
	for (unsigned k = 0; p && k < sizeof(steps) / sizeof(steps[0]); k++) {
		size_t m = steps[k];
		unsigned char *q = REALLOC(p, m);
		CHECKF(q != NULL, "realloc to %zu", m);
		if (!q)
			break;
		p = q;
		kept = kept < m ? kept : m;
		CHECKF(holds(p, kept - 1, 1), "realloc to %zu: bytes lost", m);
		CHECKF(usable_ok(p, m), "realloc to %zu: usable %zu", m, USABLE_SIZE(p));
		fill(p, m, 1);
		kept = m;
		MALLOC_TRIM(0); /* under Z: the sweep */
	}
	static const size_t aligns[] = {64, 4096, 2 * MIB};
	for (unsigned k = 0; k < sizeof(aligns) / sizeof(aligns[0]); k++) {
		void *a = NULL;
		CHECK(POSIX_MEMALIGN(&a, aligns[k], n) == 0 && a != NULL);
		CHECKF(a && (uintptr_t)a % aligns[k] == 0 && usable_ok(a, n),
		       "posix_memalign(%zu, %zu): %p, usable %zu", aligns[k], n, a,
		       a ? USABLE_SIZE(a) : 0);
		if (a)
			fill(a, n, 2);
		unsigned char *q = REALLOC(a, 2 * n);
		CHECK(q != NULL && holds(q, n - 1, 2) && usable_ok(q, 2 * n));
		FREE(q);
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int ok = p && holds(p, kept - 1, 1);
		unsigned char *q = ok ? REALLOC(p, 48 * MIB) : NULL;
		ok = q && holds(q, kept - 1, 1) && usable_ok(q, 48 * MIB);
		FREE(q);
		q = MALLOC(n);
		if (q)
			fill(q, n, 3);
		FREE(q);
		MALLOC_TRIM(0);
		_exit(ok ? 0 : 1);
	}
	int status = -1;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x", status);
	CHECK(p && holds(p, kept - 1, 1));
	FREE(p);
	MALLOC_TRIM(0);
	check_heap("after realloc, memalign and fork");
}

#ifdef USLUB_PREFIXED
/* At the cap, a cached mapping counts: a new block that needs room gets it from the
 * cache before ENOMEM. */
static void mem_limit(void)
{
	tu_section("USLUB_MEM_LIMIT: cached mappings count against the cap, and go back "
		   "before a huge allocation would fail");
	uslub_malloc_trim(0);
	uint64_t saved = uslub_config.mem_limit;
	uslub_config.mem_limit = atomic_load(&uslub_mapped_bytes) + 100 * MIB;
	void *a = uslub_malloc(40 * MIB), *b = uslub_malloc(40 * MIB);
	CHECK(a != NULL && b != NULL);
	uslub_free(a);
	uslub_free(b);
	CHECK(atomic_load(&uslub_huge_cached_bytes) >= 80 * MIB);
	void *c = uslub_malloc(90 * MIB);
	CHECK(c != NULL);
	CHECK(atomic_load(&uslub_mapped_bytes) <= uslub_config.mem_limit);
	uslub_free(c);
	errno = 0;
	void *d = uslub_malloc(110 * MIB);
	CHECK(d == NULL && errno == ENOMEM);
	uslub_config.mem_limit = saved;
	check_heap("at the cap");
	uslub_malloc_trim(0);
	CHECK_EQ(atomic_load(&uslub_huge_cached_bytes), 0);
}
#endif

/* Two threads replacing buffers of 64 KiB - 8 MiB at random, 16 live each - blocks of more
 * than 1 MiB placed in the tightest warm hole, spans, large blocks cut from their order,
 * all in one zone - by malloc of the new one before the old one's free, or by realloc;
 * each checked before it goes; at the end each thread's buffers are freed by the other
 * thread. Every byte pattern survives and (linked) the heap walker finds the zones
 * consistent. */
enum { MIX_LIVE = 16, MIX_ROUNDS = 250 };

struct mix {
	unsigned char *buf[MIX_LIVE];
	size_t len[MIX_LIVE];
	unsigned seed[MIX_LIVE];
	uint64_t rng;
	unsigned bad;
};

static size_t mix_size(uint64_t *rng)
{
	/* Log-uniform over 64 KiB - 8 MiB: two sevenths of the sizes between 1 and 4 MiB.
	 * A multiple of 16, so fill's last byte never lands on a page's first (holds). */
	unsigned shift = 16 + (unsigned)(tu_rand(rng) % 7);
	size_t base = (size_t)1 << shift;
	return base + (tu_rand(rng) % base & ~(size_t)15);
}

static void *mix_work(void *arg)
{
	struct mix *m = arg;
	for (int i = 0; i < MIX_LIVE; i++) {
		m->len[i] = mix_size(&m->rng);
		m->seed[i] = (unsigned)tu_rand(&m->rng);
		m->buf[i] = MALLOC(m->len[i]);
		if (!m->buf[i])
			return (void *)1;
		fill(m->buf[i], m->len[i], m->seed[i]);
	}
	for (int r = 0; r < MIX_ROUNDS; r++) {
		int i = (int)(tu_rand(&m->rng) % MIX_LIVE);
		size_t n = mix_size(&m->rng);
		unsigned seed = (unsigned)tu_rand(&m->rng);
		if (!holds(m->buf[i], m->len[i], m->seed[i]))
			m->bad++;
		unsigned char *p;
		if (r % 3 == 0) {
			/* realloc keeps the shorter length's bytes: the pattern's first pages. */
			p = REALLOC(m->buf[i], n);
			if (!p)
				return (void *)1;
			size_t kept = n < m->len[i] ? n : m->len[i];
			for (size_t k = 0; k + 1 < kept; k += 4096)
				if (p[k] != (unsigned char)(m->seed[i] + k / 4096))
					m->bad++;
		} else {
			p = MALLOC(n);
			if (!p)
				return (void *)1;
			FREE(m->buf[i]);
		}
		fill(p, n, seed);
		m->buf[i] = p;
		m->len[i] = n;
		m->seed[i] = seed;
	}
	return NULL;
}

static void *mix_free_other(void *arg)
{
	struct mix *m = arg;
	for (int i = 0; i < MIX_LIVE; i++) {
		if (!holds(m->buf[i], m->len[i], m->seed[i]))
			m->bad++;
		FREE(m->buf[i]);
	}
	return NULL;
}

static void two_threads_mixed(void)
{
	tu_section("two threads replacing 16 buffers each of 64 KiB - 8 MiB (%d times, a third "
		   "by realloc), then freeing each other's: every pattern kept, the heap "
		   "consistent",
		   MIX_ROUNDS);
	static struct mix m[2];
	pthread_t t[2];
	for (int k = 0; k < 2; k++) {
		m[k] = (struct mix){.rng = 101 + (uint64_t)k * 7919};
		CHECK(pthread_create(&t[k], NULL, mix_work, &m[k]) == 0);
	}
	for (int k = 0; k < 2; k++) {
		void *rc = NULL;
		pthread_join(t[k], &rc);
		CHECKF(rc == NULL, "thread %d got every buffer it asked for", k);
		CHECKF(m[k].bad == 0, "thread %d: %u patterns lost", k, m[k].bad);
	}
	check_heap("after two threads' replacements");
	for (int k = 0; k < 2; k++)
		CHECK(pthread_create(&t[k], NULL, mix_free_other, &m[1 - k]) == 0);
	for (int k = 0; k < 2; k++) {
		pthread_join(t[k], NULL);
		CHECKF(m[k].bad == 0, "buffers of thread %d freed by the other: %u patterns lost",
		       k, m[k].bad);
	}
	check_heap("after the other thread's frees");
}

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	printf("test_big_buffers (%s)\n", VARIANT);
	CHECK(tu_totals_fn() != NULL);
	replace_buffers();
	pay_moves();
	unfilled_buffers();
#ifdef USLUB_PREFIXED
	placed_unfilled();
#endif
	/* With almost nothing in use the cache keeps no more than 16 MiB (uslub_keep_bound),
	 * so the tests of what it keeps hold a block in use: never touched, so it costs no
	 * resident memory. */
	void *ballast = MALLOC(512 * MIB);
	CHECK(ballast != NULL);
	span_reused();
	calloc_reused();
	give_back();
	address_space();
	keep_contents();
	two_threads_mixed();
#ifdef USLUB_PREFIXED
	mem_limit();
#endif
	FREE(ballast);
	return tu_summary("test_big_buffers");
}
