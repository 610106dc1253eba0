/* test_api.c: the malloc family's contract, with glibc's semantics as the reference.
 *
 * Built twice from this source:
 *   api-linked   -DUSLUB_PREFIXED, linked with the engine: MALLOC() is uslub_malloc()
 *                and glibc's malloc stays beside it;
 *   api-preload  standard names, run with LD_PRELOAD=libuslub.so: MALLOC() is malloc(),
 *                and the test first proves that the preloaded library answers.
 * mallinfo2() and mallopt() exist only under their standard names, so they are checked
 * in the preload build only.
 *
 * Prints "test_api: N checks passed", or each failure with file:line and the values and
 * exits 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <limits.h>
#include <malloc.h>
#include <stddef.h>

#include "test_util.h"

static size_t page_size;

/* Byte i of the content that realloc must carry along. */
static unsigned char content_byte(size_t i)
{
	return (unsigned char)(i * 31u + 7u + (i >> 8));
}

static void fill_content(unsigned char *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		p[i] = content_byte(i);
}

/* Returns the first offset in [0, n) that lost its content, or (size_t)-1. */
static size_t check_content(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != content_byte(i))
			return i;
	return (size_t)-1;
}

/* Returns the first non-zero offset in [0, n), or (size_t)-1. */
static size_t first_nonzero(const unsigned char *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		if (w != 0)
			break;
	}
	for (; i < n; i++)
		if (p[i] != 0)
			return i;
	return (size_t)-1;
}

/* Returns the first offset in [0, n) that does not hold byte c, or (size_t)-1. */
static size_t first_not(const unsigned char *p, size_t n, unsigned char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return i;
	return (size_t)-1;
}

/* ---- the library answering ---------------------------------------------------------- */

/* libuslub.so does not bring the C++ runtime into a C program (preload/new_handler.c):
 * 1.5 MiB resident and 0.6 ms an exec when it did. */
static void test_no_cxx_runtime(void)
{
	tu_section("a C program with uslub maps no libstdc++, libm or libgcc_s");
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL);
	if (f == NULL)
		return;
	char line[512];
	unsigned found = 0, lines = 0, sanitizer = 0;
	while (fgets(line, sizeof(line), f)) {
		lines++;
		/* The sanitizers' runtimes bring them along themselves. */
		if (strstr(line, "libasan") || strstr(line, "libtsan") || strstr(line, "libubsan"))
			sanitizer++;
		if (strstr(line, "libstdc++") || strstr(line, "libgcc_s") || strstr(line, "/libm."))
			found++;
	}
	fclose(f);
	if (sanitizer) {
		printf("  skipped: a sanitizer runtime is loaded\n");
		return;
	}
	CHECKF(lines > 0 && found == 0, "%u of %u mappings are the C++ runtime's", found, lines);
}

static void test_preload_active(void)
{
	tu_get_totals_fn fn = tu_totals_fn();
#ifdef USLUB_PREFIXED
	tu_section("uslub_get_totals reports a kept 1 MiB block in in_use");
#else
	tu_section("LD_PRELOAD active: dlsym(uslub_get_totals) found, in_use grows with malloc");
	CHECKF(fn != NULL,
	       "uslub_get_totals not found: libuslub.so is not preloaded "
	       "(LD_PRELOAD=%s)",
	       getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
#endif
	if (fn == NULL)
		return;
	uint64_t before = tu_in_use();
	unsigned char *p = MALLOC(TU_MIB);
	CHECK(p != NULL);
	if (p == NULL)
		return;
	memset(p, 0x5a, TU_MIB);
	uint64_t after = tu_in_use();
	CHECKF(after >= before + TU_MIB,
	       "in_use before %" PRIu64 ", after a 1 MiB malloc %" PRIu64 " (grew by %" PRId64 ")",
	       before, after, (int64_t)(after - before));
	FREE(p);
	uint64_t freed = tu_in_use();
	CHECKF(freed + TU_MIB <= after, "in_use with the block %" PRIu64 ", after free %" PRIu64,
	       after, freed);
}

/* ---- malloc ------------------------------------------------------------------------- */

static void test_malloc_zero(void)
{
	tu_section("malloc(0): unique, non-NULL, 16-byte aligned, freeable");
	void *a = MALLOC(tu_opaque_size(0));
	void *b = MALLOC(tu_opaque_size(0));
	CHECK(a != NULL);
	CHECK(b != NULL);
	CHECKF(a != b, "two malloc(0) gave the same pointer %p", a);
	CHECK_ALIGNED(a, 16);
	CHECK_ALIGNED(b, 16);
	FREE(a);
	FREE(b);
	tu_section("malloc_usable_size(NULL) is 0");
	CHECK_EQ(USABLE_SIZE(tu_opaque(NULL)), 0);
}

enum { SMALL_MAX = 10000 };

static void test_malloc_sizes(void)
{
	static unsigned char *blocks[SMALL_MAX + 1];
	static size_t usable[SMALL_MAX + 1];

	tu_section("malloc(1..%d): 16-byte aligned, usable_size >= size, writable to the "
		   "end, no overlap while all are alive",
		   SMALL_MAX);
	for (size_t n = 1; n <= SMALL_MAX; n++) {
		unsigned char *p = MALLOC(n);
		blocks[n] = p;
		usable[n] = 0;
		CHECKF(p != NULL, "malloc(%zu) returned NULL", n);
		if (p == NULL)
			continue;
		CHECK_ALIGNED(p, 16);
		usable[n] = USABLE_SIZE(p);
		CHECKF(usable[n] >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, usable[n]);
		if (usable[n] < n)
			usable[n] = n;
		memset(p, (int)(n * 7 % 251 + 1), usable[n]);
	}
	for (size_t n = 1; n <= SMALL_MAX; n++) {
		if (blocks[n] == NULL)
			continue;
		unsigned char tag = (unsigned char)(n * 7 % 251 + 1);
		size_t bad = first_not(blocks[n], usable[n], tag);
		CHECKF(bad == (size_t)-1,
		       "block of malloc(%zu) at %p (usable %zu) overwritten "
		       "at offset %zu: another block overlaps it",
		       n, (void *)blocks[n], usable[n], bad);
	}
	for (size_t n = 1; n <= SMALL_MAX; n++)
		FREE(blocks[n]);

	static const size_t large[] = {
	    16384,	    16385,	     65536,	65537,		131072 + 1,
	    262144,	    (1u << 20) - 1,  1u << 20,	(1u << 20) + 1, 4u << 20,
	    (4u << 20) + 3, (16u << 20) + 5, 64u << 20,
	};
	tu_section("malloc of %zu large and huge sizes (16 KiB .. 64 MiB): aligned, usable, "
		   "writable",
		   sizeof(large) / sizeof(large[0]));
	for (size_t i = 0; i < sizeof(large) / sizeof(large[0]); i++) {
		size_t n = large[i];
		unsigned char *p = MALLOC(n);
		CHECKF(p != NULL, "malloc(%zu) returned NULL", n);
		if (p == NULL)
			continue;
		CHECK_ALIGNED(p, 16);
		size_t us = USABLE_SIZE(p);
		CHECKF(us >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, us);
		memset(p, 0xc3, us >= n ? us : n);
		CHECK(p[0] == 0xc3 && p[n - 1] == 0xc3);
		FREE(p);
	}
}

static void test_malloc_enomem(void)
{
	static const size_t huge[] = {
	    SIZE_MAX,
	    SIZE_MAX - 4096,
	    SIZE_MAX / 2 + 1,
	    (size_t)PTRDIFF_MAX,
	    (size_t)PTRDIFF_MAX + 1,
	    (size_t)1 << 62,
	};
	tu_section("malloc of sizes no process can have (SIZE_MAX, PTRDIFF_MAX, 2^62): NULL "
		   "and errno ENOMEM");
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		errno = 0;
		void *p = MALLOC(tu_opaque_size(huge[i]));
		int err = errno;
		CHECKF(p == NULL, "malloc(%#zx) = %p", huge[i], p);
		CHECKF(err == ENOMEM, "malloc(%#zx): errno %d (%s)", huge[i], err, strerror(err));
		if (p != NULL)
			FREE(p);
	}
}

/* ---- calloc ------------------------------------------------------------------------- */

static void test_calloc(void)
{
	static const size_t sizes[] = {1,   8,	  16,	24,    64,    100,
				       200, 1000, 4096, 10000, 70000, 300000};
	enum { COUNT = 48 };
	void *blocks[COUNT];

	tu_section("calloc zeroes fresh memory and memory that was dirtied and freed");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		for (int i = 0; i < COUNT; i++) {
			blocks[i] = MALLOC(n);
			CHECK(blocks[i] != NULL);
			if (blocks[i] != NULL)
				memset(blocks[i], 0xa5, USABLE_SIZE(blocks[i]));
		}
		for (int i = 0; i < COUNT; i++)
			FREE(blocks[i]);
		for (int i = 0; i < COUNT; i++) {
			/* both argument orders: the product is what counts */
			unsigned char *p = (i & 1) ? CALLOC(n, 1) : CALLOC(1, n);
			blocks[i] = p;
			CHECKF(p != NULL, "calloc of %zu returned NULL", n);
			if (p == NULL)
				continue;
			CHECK_ALIGNED(p, 16);
			size_t bad = first_nonzero(p, n);
			CHECKF(bad == (size_t)-1, "calloc(%zu) after reuse: byte %zu is %#x", n,
			       bad, bad == (size_t)-1 ? 0 : p[bad]);
			memset(p, 0x77, n); /* dirty again for the next size's reuse */
		}
		for (int i = 0; i < COUNT; i++)
			FREE(blocks[i]);
	}

	tu_section("large calloc: 8 MiB after a dirtied 8 MiB block, 1024 x 32 KiB");
	unsigned char *d = MALLOC(8 * TU_MIB);
	CHECK(d != NULL);
	if (d != NULL) {
		memset(d, 0xff, 8 * TU_MIB);
		FREE(d);
	}
	unsigned char *z = CALLOC(1, 8 * TU_MIB);
	CHECK(z != NULL);
	if (z != NULL) {
		size_t bad = first_nonzero(z, 8 * TU_MIB);
		CHECKF(bad == (size_t)-1, "calloc(1, 8 MiB): byte %zu is %#x", bad,
		       bad == (size_t)-1 ? 0 : z[bad]);
		FREE(z);
	}
	z = CALLOC(1024, 32 * TU_KIB);
	CHECK(z != NULL);
	if (z != NULL) {
		size_t bad = first_nonzero(z, 32 * TU_MIB);
		CHECKF(bad == (size_t)-1, "calloc(1024, 32 KiB): byte %zu is %#x", bad,
		       bad == (size_t)-1 ? 0 : z[bad]);
		FREE(z);
	}

	tu_section("calloc(0, n) and calloc(n, 0): non-NULL and freeable");
	void *e1 = CALLOC(tu_opaque_size(0), 10);
	void *e2 = CALLOC(10, tu_opaque_size(0));
	CHECK(e1 != NULL);
	CHECK(e2 != NULL);
	CHECK(e1 != e2);
	FREE(e1);
	FREE(e2);

	static const size_t ovf[][2] = {
	    {SIZE_MAX / 2, 3}, {(size_t)1 << 33, (size_t)1 << 33}, {SIZE_MAX, SIZE_MAX},
	    {3, SIZE_MAX / 2}, {(size_t)PTRDIFF_MAX, 2},
	};
	tu_section("calloc whose product overflows: NULL and errno ENOMEM");
	for (size_t i = 0; i < sizeof(ovf) / sizeof(ovf[0]); i++) {
		errno = 0;
		void *p = CALLOC(tu_opaque_size(ovf[i][0]), tu_opaque_size(ovf[i][1]));
		int err = errno;
		CHECKF(p == NULL, "calloc(%#zx, %#zx) = %p", ovf[i][0], ovf[i][1], p);
		CHECKF(err == ENOMEM, "calloc(%#zx, %#zx): errno %d (%s)", ovf[i][0], ovf[i][1],
		       err, strerror(err));
		if (p != NULL)
			FREE(p);
	}
}

/* ---- realloc ------------------------------------------------------------------------ */

static void test_realloc(void)
{
	tu_section("realloc(NULL, n) acts as malloc(n)");
	unsigned char *p = REALLOC(NULL, tu_opaque_size(100));
	CHECK(p != NULL);
	if (p != NULL) {
		CHECK_ALIGNED(p, 16);
		CHECK(USABLE_SIZE(p) >= 100);
		memset(p, 1, 100);
		FREE(p);
	}

	static const size_t chain[] = {24, 5000, 200 * 1024, 8u << 20, 100, 16, 70000, 1};
	tu_section("realloc keeps the contents across small -> large -> huge -> small");
	size_t cur = chain[0];
	p = MALLOC(cur);
	CHECK(p != NULL);
	if (p != NULL) {
		fill_content(p, 0, cur);
		for (size_t i = 1; i < sizeof(chain) / sizeof(chain[0]); i++) {
			size_t n = chain[i];
			unsigned char *q = REALLOC(p, n);
			CHECKF(q != NULL, "realloc(%zu -> %zu) returned NULL", cur, n);
			if (q == NULL)
				break;
			p = q;
			CHECK_ALIGNED(p, 16);
			CHECKF(USABLE_SIZE(p) >= n, "usable %zu after realloc to %zu",
			       USABLE_SIZE(p), n);
			size_t keep = cur < n ? cur : n;
			size_t bad = check_content(p, keep);
			CHECKF(bad == (size_t)-1, "realloc %zu -> %zu lost byte %zu of %zu", cur, n,
			       bad, keep);
			fill_content(p, keep, n);
			cur = n;
		}
		FREE(p);
	}

	tu_section("600 reallocs of one block to random sizes 1 .. 300 KiB keep the contents");
	uint64_t rng = 0x1234567;
	cur = 1;
	p = MALLOC(cur);
	CHECK(p != NULL);
	if (p != NULL) {
		fill_content(p, 0, cur);
		for (int i = 0; i < 600; i++) {
			uint64_t r = tu_rand(&rng);
			size_t n = 1 + (size_t)(r % (300 * 1024)) / (1 + (r >> 60));
			unsigned char *q = REALLOC(p, n);
			CHECKF(q != NULL, "realloc(%zu -> %zu) returned NULL", cur, n);
			if (q == NULL)
				break;
			p = q;
			size_t keep = cur < n ? cur : n;
			size_t bad = check_content(p, keep);
			CHECKF(bad == (size_t)-1, "realloc #%d %zu -> %zu lost byte %zu", i, cur, n,
			       bad);
			fill_content(p, keep, n);
			cur = n;
		}
		FREE(p);
	}

	tu_section("realloc to the same size and to usable_size keeps the contents");
	p = MALLOC(300);
	CHECK(p != NULL);
	if (p != NULL) {
		fill_content(p, 0, 300);
		unsigned char *q = REALLOC(p, 300);
		CHECK(q != NULL);
		if (q != NULL) {
			p = q;
			CHECK(check_content(p, 300) == (size_t)-1);
			size_t us = USABLE_SIZE(p);
			q = REALLOC(p, us);
			CHECK(q != NULL);
			if (q != NULL) {
				p = q;
				CHECK(check_content(p, 300) == (size_t)-1);
			}
		}
		FREE(p);
	}

	tu_section("realloc(p, 0) frees p and returns NULL (glibc)");
	p = MALLOC(64);
	CHECK(p != NULL);
	void *r0 = REALLOC(p, tu_opaque_size(0));
	CHECKF(r0 == NULL, "realloc(small, 0) = %p", r0);
	if (r0 != NULL)
		FREE(r0);
	if (tu_totals_fn() != NULL) {
		p = MALLOC(TU_MIB);
		CHECK(p != NULL);
		if (p != NULL) {
			memset(p, 3, TU_MIB);
			uint64_t with = tu_in_use();
			r0 = REALLOC(p, tu_opaque_size(0));
			uint64_t without = tu_in_use();
			CHECKF(r0 == NULL, "realloc(1 MiB, 0) = %p", r0);
			CHECKF(without + TU_MIB <= with,
			       "in_use %" PRIu64 " with a 1 MiB block, %" PRIu64
			       " after realloc(p, 0): the block was not freed",
			       with, without);
			if (r0 != NULL)
				FREE(r0);
		}
	}

	static const size_t bad_sizes[] = {SIZE_MAX, (size_t)PTRDIFF_MAX, (size_t)1 << 62};
	tu_section("realloc to an impossible size: NULL, ENOMEM, the old block intact");
	for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
		static const size_t olds[] = {100, 100000, 3u << 20};
		for (size_t j = 0; j < sizeof(olds) / sizeof(olds[0]); j++) {
			p = MALLOC(olds[j]);
			CHECK(p != NULL);
			if (p == NULL)
				continue;
			fill_content(p, 0, olds[j]);
			errno = 0;
			unsigned char *q = REALLOC(tu_opaque(p), tu_opaque_size(bad_sizes[i]));
			int err = errno;
			CHECKF(q == NULL, "realloc(%zu-byte block, %#zx) = %p", olds[j],
			       bad_sizes[i], (void *)q);
			CHECKF(err == ENOMEM, "realloc(.., %#zx): errno %d", bad_sizes[i], err);
			if (q != NULL) {
				FREE(q);
				continue;
			}
			CHECK(check_content(p, olds[j]) == (size_t)-1);
			FREE(p);
		}
	}
}

static void test_reallocarray(void)
{
	tu_section("reallocarray: like realloc(n * size), NULL and ENOMEM on overflow with "
		   "the block intact");
	unsigned char *p = REALLOCARRAY(NULL, 10, 10);
	CHECK(p != NULL);
	if (p == NULL)
		return;
	fill_content(p, 0, 100);
	unsigned char *q = REALLOCARRAY(p, 1000, 10);
	CHECK(q != NULL);
	if (q == NULL) {
		FREE(p);
		return;
	}
	p = q;
	CHECK(USABLE_SIZE(p) >= 10000);
	CHECK(check_content(p, 100) == (size_t)-1);
	fill_content(p, 100, 10000);

	static const size_t ovf[][2] = {
	    {SIZE_MAX / 2, 3},
	    {(size_t)1 << 33, (size_t)1 << 33},
	    {3, SIZE_MAX / 2},
	};
	for (size_t i = 0; i < sizeof(ovf) / sizeof(ovf[0]); i++) {
		errno = 0;
		q = REALLOCARRAY(tu_opaque(p), tu_opaque_size(ovf[i][0]),
				 tu_opaque_size(ovf[i][1]));
		int err = errno;
		CHECKF(q == NULL, "reallocarray(p, %#zx, %#zx) = %p", ovf[i][0], ovf[i][1],
		       (void *)q);
		CHECKF(err == ENOMEM, "reallocarray(p, %#zx, %#zx): errno %d", ovf[i][0], ovf[i][1],
		       err);
		if (q != NULL)
			p = q;
	}
	CHECK(check_content(p, 10000) == (size_t)-1);
	FREE(p);

	errno = 0;
	p = REALLOCARRAY(NULL, tu_opaque_size(SIZE_MAX / 2), 3);
	CHECK(p == NULL && errno == ENOMEM);
	if (p != NULL)
		FREE(p);
}

/* ---- aligned allocation ------------------------------------------------------------- */

static void test_posix_memalign(void)
{
	static const size_t invalid[] = {0,  1,	 2,  3,	 4,   12,   20,
					 24, 40, 48, 96, 100, 4097, SIZE_MAX};
	tu_section("posix_memalign: EINVAL for alignment 0, 3, 24, < sizeof(void *), not a "
		   "power of two; errno untouched");
	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		void *p = (void *)0x1;
		errno = 4321;
		int rc = POSIX_MEMALIGN(&p, tu_opaque_size(invalid[i]), 64);
		CHECKF(rc == EINVAL, "posix_memalign(alignment %zu) = %d (%s)", invalid[i], rc,
		       strerror(rc));
		CHECKF(errno == 4321, "posix_memalign(alignment %zu) changed errno to %d",
		       invalid[i], errno);
		if (rc == 0 && p != (void *)0x1)
			FREE(p);
	}

	tu_section("posix_memalign: every power of two 8 .. 4 MiB, sizes 0, 1, < alignment, "
		   "= alignment, > alignment; aligned, usable, writable, errno untouched");
	enum { NSIZES = 10 };
	for (size_t a = 8; a <= 4 * TU_MIB; a *= 2) {
		size_t sizes[NSIZES] = {0, 1, a / 2, a - 1, a, a + 1, 3 * a, 100, 5000, 24};
		void *blocks[NSIZES];
		for (int i = 0; i < NSIZES; i++) {
			void *p = NULL;
			size_t n = sizes[i];
			errno = 4321;
			int rc = POSIX_MEMALIGN(&p, a, n);
			CHECKF(rc == 0, "posix_memalign(%zu, %zu) = %d (%s)", a, n, rc,
			       strerror(rc));
			CHECKF(errno == 4321, "posix_memalign(%zu, %zu) changed errno to %d", a, n,
			       errno);
			blocks[i] = rc == 0 ? p : NULL;
			if (rc != 0 || p == NULL)
				continue;
			CHECK_ALIGNED(p, a);
			size_t us = USABLE_SIZE(p);
			CHECKF(us >= n, "posix_memalign(%zu, %zu): usable %zu", a, n, us);
			memset(p, (int)(i + 1), n);
		}
		for (int i = 0; i < NSIZES; i++) {
			if (blocks[i] == NULL)
				continue;
			size_t bad = first_not(blocks[i], sizes[i], (unsigned char)(i + 1));
			CHECKF(bad == (size_t)-1,
			       "posix_memalign(%zu, %zu) block overwritten at "
			       "%zu",
			       a, sizes[i], bad);
			FREE(blocks[i]);
		}
	}

	tu_section("posix_memalign of an impossible size: ENOMEM");
	void *p = NULL;
	int rc = POSIX_MEMALIGN(&p, 64, tu_opaque_size(SIZE_MAX));
	CHECKF(rc == ENOMEM, "posix_memalign(64, SIZE_MAX) = %d", rc);
	if (rc == 0)
		FREE(p);
	rc = POSIX_MEMALIGN(&p, 4096, tu_opaque_size((size_t)PTRDIFF_MAX));
	CHECKF(rc == ENOMEM, "posix_memalign(4096, PTRDIFF_MAX) = %d", rc);
	if (rc == 0)
		FREE(p);
}

static void test_aligned_alloc_memalign(void)
{
	tu_section("aligned_alloc: powers of two 16 .. 1 MiB, sizes a, 3a, 1; aligned, "
		   "writable");
	for (size_t a = 16; a <= TU_MIB; a *= 2) {
		size_t sizes[] = {a, 3 * a, 1};
		for (size_t i = 0; i < 3; i++) {
			unsigned char *p = ALIGNED_ALLOC(a, sizes[i]);
			CHECKF(p != NULL, "aligned_alloc(%zu, %zu) = NULL", a, sizes[i]);
			if (p == NULL)
				continue;
			CHECK_ALIGNED(p, a);
			CHECK(USABLE_SIZE(p) >= sizes[i]);
			memset(p, 0x11, sizes[i]);
			FREE(p);
		}
	}
	errno = 0;
	void *p = ALIGNED_ALLOC(64, tu_opaque_size(SIZE_MAX));
	CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(64, SIZE_MAX) = %p, errno %d", p,
	       errno);
	if (p != NULL)
		FREE(p);

	tu_section("memalign: powers of two 8 .. 4 MiB, sizes 1, a + 1; aligned, writable");
	for (size_t a = 8; a <= 4 * TU_MIB; a *= 2) {
		size_t sizes[] = {1, a + 1};
		for (size_t i = 0; i < 2; i++) {
			unsigned char *q = MEMALIGN(a, sizes[i]);
			CHECKF(q != NULL, "memalign(%zu, %zu) = NULL", a, sizes[i]);
			if (q == NULL)
				continue;
			CHECK_ALIGNED(q, a);
			CHECK(USABLE_SIZE(q) >= sizes[i]);
			memset(q, 0x22, sizes[i]);
			FREE(q);
		}
	}
}

static void test_valloc_pvalloc(void)
{
	size_t ps = page_size;
	size_t vsizes[] = {1, 100, ps - 1, ps, ps + 1, 100000, 2 * TU_MIB + 3};
	tu_section("valloc: page-aligned (page %zu), usable, writable", ps);
	for (size_t i = 0; i < sizeof(vsizes) / sizeof(vsizes[0]); i++) {
		unsigned char *p = VALLOC(vsizes[i]);
		CHECKF(p != NULL, "valloc(%zu) = NULL", vsizes[i]);
		if (p == NULL)
			continue;
		CHECK_ALIGNED(p, ps);
		CHECK(USABLE_SIZE(p) >= vsizes[i]);
		memset(p, 0x33, vsizes[i]);
		FREE(p);
	}

	size_t psizes[] = {1, ps - 1, ps, ps + 1, 3 * ps + 5, 300000};
	tu_section("pvalloc: page-aligned, size rounded up to a whole page and writable");
	for (size_t i = 0; i < sizeof(psizes) / sizeof(psizes[0]); i++) {
		size_t rounded = (psizes[i] + ps - 1) / ps * ps;
		unsigned char *p = PVALLOC(psizes[i]);
		CHECKF(p != NULL, "pvalloc(%zu) = NULL", psizes[i]);
		if (p == NULL)
			continue;
		CHECK_ALIGNED(p, ps);
		size_t us = USABLE_SIZE(p);
		CHECKF(us >= rounded, "pvalloc(%zu): usable %zu, expected >= %zu", psizes[i], us,
		       rounded);
		memset(p, 0x44, rounded <= us ? rounded : us);
		FREE(p);
	}
}

/* ---- free and errno, trim ----------------------------------------------------------- */

static void test_free_errno(void)
{
	tu_section("free(NULL) is a no-op; free keeps errno for every kind of block");
	errno = 1234;
	FREE(NULL);
	FREE(tu_opaque(NULL));
	CHECK_EQ(errno, 1234);

	struct {
		const char *what;
		void *p;
	} blocks[8];
	int nb = 0;
	blocks[nb].what = "malloc(16)";
	blocks[nb++].p = MALLOC(16);
	blocks[nb].what = "malloc(3000)";
	blocks[nb++].p = MALLOC(3000);
	blocks[nb].what = "malloc(200 KiB)";
	blocks[nb++].p = MALLOC(200 * TU_KIB);
	blocks[nb].what = "malloc(16 MiB)";
	blocks[nb++].p = MALLOC(16 * TU_MIB);
	blocks[nb].what = "memalign(4096, 5000)";
	blocks[nb++].p = MEMALIGN(4096, 5000);
	blocks[nb].what = "calloc(1, 4 MiB)";
	blocks[nb++].p = CALLOC(1, 4 * TU_MIB);
	blocks[nb].what = "realloc(malloc(10), 100000)";
	blocks[nb++].p = REALLOC(MALLOC(10), 100000);
	blocks[nb].what = "valloc(10)";
	blocks[nb++].p = VALLOC(10);
	for (int i = 0; i < nb; i++) {
		CHECKF(blocks[i].p != NULL, "%s = NULL", blocks[i].what);
		errno = 1234;
		FREE(blocks[i].p);
		CHECKF(errno == 1234, "free of %s changed errno to %d", blocks[i].what, errno);
	}
}

static void test_trim(void)
{
	tu_section("malloc_trim(0) returns 0 or 1, also after freeing 64 MiB");
	int rc = MALLOC_TRIM(0);
	CHECKF(rc == 0 || rc == 1, "malloc_trim(0) = %d", rc);
	enum { N = 256 };
	void *blocks[N];
	for (int i = 0; i < N; i++) {
		blocks[i] = MALLOC(256 * TU_KIB);
		if (blocks[i] != NULL)
			memset(blocks[i], i, 256 * TU_KIB);
	}
	for (int i = 0; i < N; i++)
		FREE(blocks[i]);
	rc = MALLOC_TRIM(0);
	CHECKF(rc == 0 || rc == 1, "malloc_trim(0) = %d", rc);
}

#ifndef USLUB_PREFIXED
/* mallinfo2 and mallopt: standard names only. Fields are size_t, so "negative" shows as
 * a value past any real address space. */
static void test_mallinfo_mallopt(void)
{
	const size_t sane = (size_t)1 << 47;
	tu_section("mallinfo2: every field below 2^47 (no negative value cast to size_t); "
		   "uordblks follows 10 MiB of 1 KiB blocks");
	struct mallinfo2 before = mallinfo2();
	size_t fields[] = {before.arena,    before.ordblks, before.smblks,  before.hblks,
			   before.hblkhd,   before.usmblks, before.fsmblks, before.uordblks,
			   before.fordblks, before.keepcost};
	static const char *names[] = {"arena",	 "ordblks", "smblks",	"hblks",    "hblkhd",
				      "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		CHECKF(fields[i] < sane, "mallinfo2().%s = %zu (%#zx)", names[i], fields[i],
		       fields[i]);

	enum { N = 10240 };
	static void *blocks[N];
	for (int i = 0; i < N; i++) {
		blocks[i] = MALLOC(1024);
		CHECK(blocks[i] != NULL);
		if (blocks[i] != NULL)
			memset(blocks[i], 0x66, 1024);
	}
	struct mallinfo2 during = mallinfo2();
	CHECKF(during.uordblks >= before.uordblks + 9 * TU_MIB,
	       "uordblks %zu before, %zu with 10 MiB more allocated", before.uordblks,
	       during.uordblks);
	for (int i = 0; i < N; i++)
		FREE(blocks[i]);
	struct mallinfo2 after = mallinfo2();
	CHECKF(after.uordblks + 8 * TU_MIB <= during.uordblks,
	       "uordblks %zu with the 10 MiB, %zu after freeing it", during.uordblks,
	       after.uordblks);
	CHECKF(after.uordblks < sane, "uordblks after = %#zx", after.uordblks);

	tu_section("mallopt returns 0 or 1");
	int rc = mallopt(M_TRIM_THRESHOLD, 128 * 1024);
	CHECKF(rc == 0 || rc == 1, "mallopt(M_TRIM_THRESHOLD) = %d", rc);
	rc = mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	CHECKF(rc == 0 || rc == 1, "mallopt(M_MMAP_THRESHOLD) = %d", rc);
}
#endif

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	page_size = (size_t)sysconf(_SC_PAGESIZE);
	printf("test_api (%s): the malloc family against glibc's semantics\n", VARIANT);

	test_preload_active();
	test_no_cxx_runtime();
	test_malloc_zero();
	test_malloc_sizes();
	test_malloc_enomem();
	test_calloc();
	test_realloc();
	test_reallocarray();
	test_posix_memalign();
	test_aligned_alloc_memalign();
	test_valloc_pvalloc();
	test_free_errno();
	test_trim();
#ifndef USLUB_PREFIXED
	test_mallinfo_mallopt();
#endif
	return tu_summary("test_api");
}
