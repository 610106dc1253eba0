/* Lazy carving (core/slab/slab.c, section 9): a new slab threads its free list a step at a
 * time, so the pages its first allocations do not reach stay untouched.
 *
 * On a cache with order-3 slabs (USLUB_MIN_ORDER=3, kmalloc-2k: 16 objects in 32 KiB):
 *   - after the thread's first allocation, the new slab's pages past the first step are
 *     not resident (mincore), and the slab counts fewer objects carved than it holds;
 *   - a free of one of its untouched objects is reported as an invalid pointer, in a child;
 *   - the heap walker's counts are exact while the slab is partly carved;
 *   - allocating on hands out every object of the slab exactly once (distinct addresses,
 *     none missing), and the live counts match along the way and after everything is
 *     freed again. */
#include "debug/check.h"
#include "thread/thread.h"
#include "slab/slab.h"
#include "test_util.h"
#include "uslub.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE 2048
#define MAX  4096 /* allocations at most: far more than the slab holds */

/* Through volatile pointers: the compiler may not drop or merge the calls. */
static void *(*volatile do_malloc)(size_t) = uslub_malloc;
static void (*volatile do_free)(void *) = uslub_free;

static unsigned cls;

static uint64_t live_of_class(void)
{
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	CHECKF(errors == 0, "heap walk: %lu inconsistencies", (unsigned long)errors);
	return c.live_by_class[cls];
}

/* Pages of [base, base + bytes) resident now, as a bit set. */
static unsigned resident_pages(void *base, size_t bytes)
{
	unsigned char vec[64];
	long page = sysconf(_SC_PAGESIZE);
	if (mincore(base, bytes, vec) != 0) {
		CHECKF(0, "mincore failed");
		return ~0u;
	}
	unsigned set = 0;
	for (size_t i = 0; i < bytes / (size_t)page && i < 32; i++)
		if (vec[i] & 1)
			set |= 1u << i;
	return set;
}

/* A free of an object the slab never carved: the program stops with a report. */
static void bad_free_in_child(void *object)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);
		do_free(object);
		_exit(0);
	}
	int status;
	CHECKF(pid > 0 && waitpid(pid, &status, 0) == pid, "child ran");
	CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	       "free of an untouched object stops the program (status %#x)", status);
}

int main(void)
{
	uslub_free(uslub_malloc(16)); /* start-up and this thread's state */
	cls = uslub_size_to_class(SIZE);
	struct uslub_cache *c = &uslub_caches[cls];
	if (c->order != 3 || c->debug) {
		printf("test_lazy: kmalloc-2k at order %u%s; run with USLUB_MIN_ORDER=3\n",
		       c->order, c->debug ? ", a debug cache" : "");
		return 77;
	}
	size_t bytes = (size_t)USLUB_PAGE_SIZE << c->order;

	static void *objs[MAX];
	unsigned n = 0;
	objs[n++] = do_malloc(SIZE);
	struct page_desc *s = block_of(objs[0]);
	CHECKF(s && s->kind == PAGE_SLAB && s->cls == cls, "a slab of kmalloc-2k");
	char *base = page_address(s);
	unsigned capacity = uslub_slab_capacity(c, s);
	CHECK_EQ(capacity, (unsigned)(bytes / SIZE));
	/* One step: 4 KiB of objects, at least four (slab.c, CARVE_*): 8 KiB here. */
	CHECKF(s->objects < capacity, "%u of %u objects carved", s->objects, capacity);
	unsigned carved_pages = (unsigned)(((size_t)s->objects * SIZE + 4095) / 4096);
	unsigned resident = resident_pages(base, bytes);
	unsigned untouched = ~0u << carved_pages & ((1u << (bytes / 4096)) - 1);
	CHECKF((resident & untouched) == 0,
	       "pages past the first step untouched: resident %#x, %u objects carved", resident,
	       s->objects);
	CHECK_EQ(live_of_class(), 1);

	/* The last object is not carved yet: freeing it is a bad free, not a way in. */
	bad_free_in_child(base + (capacity - 1) * SIZE);

	/* Use the slab up, checking the walker's counts on the way. */
	unsigned mine = 1;
	while (n < MAX && mine < capacity) {
		void *p = do_malloc(SIZE);
		CHECKF(p != NULL, "malloc(%d)", SIZE);
		if (!p)
			break;
		objs[n++] = p;
		if (block_of(p) == s)
			mine++;
		if (n % 3 == 0)
			CHECK_EQ(live_of_class(), n);
	}
	CHECK_EQ(mine, capacity);
	CHECK_EQ(s->objects, capacity);
	CHECK_EQ(live_of_class(), n);
	/* Each object of the slab once, and no address twice among all. */
	unsigned seen = 0, dups = 0;
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < i; j++)
			dups += objs[i] == objs[j];
		uintptr_t off = (uintptr_t)objs[i] - (uintptr_t)base;
		if (off < bytes) {
			CHECKF(off % SIZE == 0, "object %p at an object's start", objs[i]);
			seen |= 1u << (off / SIZE);
		}
	}
	CHECK_EQ(dups, 0);
	CHECK_EQ(seen, (1u << capacity) - 1);

	/* Half back, then the rest: the counts follow. */
	for (unsigned i = 0; i < n; i += 2)
		do_free(objs[i]);
	CHECK_EQ(live_of_class(), n / 2);
	for (unsigned i = 1; i < n; i += 2)
		do_free(objs[i]);
	CHECK_EQ(live_of_class(), 0);
	uslub_malloc_trim(0);
	CHECK_EQ(live_of_class(), 0);
	CHECKF(uslub_pages_check(0) == 0, "page allocator consistent at the end");
	return tu_summary("test_lazy");
}
