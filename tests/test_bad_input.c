/* test_bad_input.c: a pointer that is not a live block stops the program with a clear
 * message, never with silent corruption.
 *
 * Each case runs in a forked child whose stderr goes into a pipe; the child must die by
 * SIGABRT and the text must name the fault, and for slab objects the cache:
 *   free(stack address)          "uslub: free(): invalid pointer 0x"
 *   free(global)                 "uslub: free(): invalid pointer 0x"
 *   free(p + 8), p 64-byte block "invalid pointer", "kmalloc-64"
 *   free(p); free(p), 64 bytes   "double free", "kmalloc-64"
 *   realloc(stack address)       "invalid pointer"
 * and the double frees DESIGN.md section 6 names: free(a); free(b); free(a) in one thread
 * (16 and 64 bytes), of a running thread's objects and of an exited thread's, into a slab
 * emptied by remote frees, of large blocks (cached, and with their pages given back), of
 * a huge block, and through realloc - each "double free" with the cache or block kind.
 * A pointer inside a large block or a big buffer (a span) given to free, realloc or
 * malloc_usable_size: "invalid pointer", "inside a large block".
 * A use after free that overwrites a free pointer must be reported as a corrupted free
 * list, both when malloc would follow it (to a global) and when a thread's exit walks it.
 * meson runs the file again with USLUB_SHEAVES=0 (frees go onto remote lists),
 * USLUB_HARDEN=off (free pointers stored in the clear) and USLUB_DEBUG=FZPU (debug caches,
 * where the kernel-style report says the same).
 * A last case frees and reallocs valid blocks the same way and must exit 0, so a child
 * that aborts for any reason cannot pass for a detection.
 *
 * Built linked (-DUSLUB_PREFIXED: uslub_free, uslub_realloc) and plain (run under
 * LD_PRELOAD); the messages are the same. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_util.h"

static char global_buffer[256];

/* A case's exit status when what it needs is not there (reported, not failed). */
#define CASE_SKIPPED 77

static void case_free_stack(void)
{
	char local[64];
	memset(local, 1, sizeof(local));
	FREE(tu_opaque(local + 16));
}

static void case_free_global(void)
{
	FREE(tu_opaque(global_buffer + 32));
}

static void case_free_interior(void)
{
	unsigned char *p = MALLOC(64);
	if (p == NULL)
		_exit(3);
	memset(p, 2, 64);
	FREE(tu_opaque(p + 8));
}

/* The cache's geometry, or the case skips when the cache has a debug layout (USLUB_DEBUG,
 * or every cache in a sanitizer build), where free pointers live outside the object and
 * slots carry red zones. */
static void plain_cache(const char *name, size_t size, struct uslub_cache_info *ci)
{
	typedef int (*info_fn)(const char *, struct uslub_cache_info *);
#ifdef USLUB_PREFIXED
	info_fn info = uslub_cache_info;
#else
	info_fn info = NULL;
	void *sym = dlsym(RTLD_DEFAULT, "uslub_cache_info");
	memcpy(&info, &sym, sizeof(info));
#endif
	memset(ci, 0, sizeof(*ci));
	if (info == NULL)
		return; /* another allocator (`--case N` without uslub): no geometry to check */
	if (info(name, ci) != 0)
		_exit(3);
	if (ci->objects_per_slab != ((size_t)4096 << ci->order) / size)
		_exit(CASE_SKIPPED);
}

/* A slab's objects rarely fill it: kmalloc-96 leaves a tail. Its first byte is a multiple
 * of 96 from the slab's start, but no object's; freeing it must not hand the tail out. */
static void case_free_slab_tail(void)
{
	struct uslub_cache_info ci;
	plain_cache("kmalloc-96", 96, &ci);
	unsigned char *p = MALLOC(96);
	if (p == NULL || ci.objects_per_slab == 0)
		_exit(3);
	/* A fresh process's first kmalloc-96 slab has the preferred order, and slabs are
	 * aligned to their size. */
	uintptr_t bytes = (uintptr_t)4096 << ci.order;
	uintptr_t base = (uintptr_t)p & ~(bytes - 1);
	uintptr_t tail = base + (uintptr_t)ci.objects_per_slab * 96;
	if (tail >= base + bytes)
		_exit(CASE_SKIPPED);
	FREE(tu_opaque((void *)tail));
}

static void case_double_free(void)
{
	unsigned char *p = MALLOC(64);
	if (p == NULL)
		_exit(3);
	memset(p, 3, 64);
	FREE(p);
	FREE(tu_opaque(p));
}

static void *allocate_64(void *arg)
{
	*(void **)arg = MALLOC(64);
	return NULL;
}

/* Another thread's object, freed twice by this one: the first free keeps it in this
 * thread's sheaf, the second must still be caught. */
static void case_double_free_sheaf(void)
{
	void *p = NULL;
	pthread_t t;
	if (pthread_create(&t, NULL, allocate_64, &p) != 0)
		_exit(3);
	pthread_join(t, NULL);
	FREE(MALLOC(64)); /* this thread's state, and its sheaves */
	if (p == NULL)
		_exit(3);
	FREE(p);
	FREE(tu_opaque(p));
}

/* free(a); free(b); free(a): the second free of a comes after another free, so a is not
 * at the head of any list - glibc's tcache key case. `size` picks the cache; 16 bytes is
 * the smallest object, where the mark fills the second of its two words. */
static void double_free_between(size_t size)
{
	unsigned char *a = MALLOC(size), *b = MALLOC(size);
	if (a == NULL || b == NULL)
		_exit(3);
	memset(a, 3, size);
	memset(b, 3, size);
	FREE(a);
	FREE(b);
	FREE(tu_opaque(a));
}

static void case_double_free_between_64(void)
{
	double_free_between(64);
}

static void case_double_free_between_16(void)
{
	double_free_between(16);
}

/* Objects of another thread's slab, on different pages (so the sheaf takes both), made by
 * a thread that then waits (hold = 1) or exits (hold = 0). */
struct foreign {
	void *a, *b;
	size_t size;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;
};

static void *make_foreign(void *arg)
{
	struct foreign *f = arg;
	void *objs[512];
	unsigned n = 0;
	for (; n < 512; n++)
		objs[n] = MALLOC(f->size);
	f->a = objs[0];
	/* objs[1] stays too, so freeing a and b never empties the slab (an empty slab may
	 * go back to the page allocator, and the case is about a slab that stays). */
	for (unsigned i = 2; i < n; i++)
		if (((uintptr_t)objs[i] ^ (uintptr_t)objs[0]) >= 4096 && !f->b)
			f->b = objs[i];
		else
			FREE(objs[i]);
	pthread_mutex_lock(&f->lock);
	f->stop = f->stop == 0 ? 1 : f->stop;
	pthread_cond_broadcast(&f->cond);
	while (f->stop == 1)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

static struct foreign foreign;

static void start_foreign(size_t size, int exit_first)
{
	pthread_t t;
	foreign.size = size;
	pthread_mutex_init(&foreign.lock, NULL);
	pthread_cond_init(&foreign.cond, NULL);
	foreign.stop = exit_first ? 2 : 0; /* 2: return as soon as the objects are made */
	if (pthread_create(&t, NULL, make_foreign, &foreign) != 0)
		_exit(3);
	if (exit_first) {
		pthread_join(t, NULL);
	} else {
		pthread_mutex_lock(&foreign.lock);
		while (foreign.stop == 0)
			pthread_cond_wait(&foreign.cond, &foreign.lock);
		pthread_mutex_unlock(&foreign.lock);
	}
	if (foreign.a == NULL || foreign.b == NULL)
		_exit(3);
	FREE(MALLOC(size)); /* this thread's own state and sheaves */
}

/* Another thread's objects, the thread still running: with sheaves the frees go to this
 * thread's sheaf, without them onto the slab's remote list. */
static void case_double_free_foreign(void)
{
	start_foreign(64, 0);
	FREE(foreign.a);
	FREE(foreign.b);
	FREE(tu_opaque(foreign.a));
}

/* The same after the owning thread exited. */
static void case_double_free_orphan(void)
{
	start_foreign(64, 1);
	FREE(foreign.a);
	FREE(foreign.b);
	FREE(tu_opaque(foreign.a));
}

/* Every object of another thread's slab freed by this one, then one of them again: the
 * slab's inuse would underflow into its frozen bit. */
static void *fill_slab(void *arg)
{
	void **objs = arg;
	for (unsigned i = 0; i < 64; i++)
		objs[i] = MALLOC(256);
	return NULL;
}

static void case_double_free_empty_slab(void)
{
	void *objs[64];
	pthread_t t;
	if (pthread_create(&t, NULL, fill_slab, objs) != 0)
		_exit(3);
	pthread_join(t, NULL);
	for (unsigned i = 0; i < 64; i++)
		FREE(objs[i]);
	/* Let the sheaf go, so the objects reach their slabs. */
	MALLOC_TRIM(0);
	FREE(tu_opaque(objs[17]));
}

/* free(p); free(p) of a block of `size` bytes. */
static void double_free_of(size_t size)
{
	void *p = MALLOC(size);
	FREE(p);
	FREE(tu_opaque(p));
}

static void case_double_free_large(void)
{
	if (strpbrk(getenv("USLUB_DEBUG") ? getenv("USLUB_DEBUG") : "", "ZPQ1"))
		_exit(CASE_SKIPPED); /* Z, P: large blocks kept out of the thread's cache */
	FREE(MALLOC(16));	     /* the thread's state, with its large-block cache */
	double_free_of(20000);
}

/* The medium sheaves (core/thread/medium_sheaf.c): a 20 KiB block waits in the thread's
 * sheaf of 5-page blocks, marked free. Freed again by a thread whose sheaf of that size
 * is not open yet, so its free takes the slow path. */
static void *free_again(void *p)
{
	FREE(tu_opaque(p));
	return NULL;
}

static void double_free_medium_other(size_t size)
{
	if (strpbrk(getenv("USLUB_DEBUG") ? getenv("USLUB_DEBUG") : "", "ZPQ1"))
		_exit(CASE_SKIPPED);
	void *p = MALLOC(size);
	if (p == NULL)
		_exit(3);
	FREE(p);
	pthread_t t;
	if (pthread_create(&t, NULL, free_again, p) != 0)
		_exit(3);
	pthread_join(t, NULL);
}
static void case_double_free_medium_other(void)
{
	double_free_medium_other(20000);
}
/* The largest medium blocks have sheaves too (32 pages). */
static void case_double_free_medium_other_100k(void)
{
	double_free_medium_other(100000);
}

/* ... and once the sheaf has spilled it into the medium-block cache. */
static void double_free_medium_spilled(size_t size)
{
	if (strpbrk(getenv("USLUB_DEBUG") ? getenv("USLUB_DEBUG") : "", "ZPQ1"))
		_exit(CASE_SKIPPED);
	void *p[40];
	for (unsigned i = 0; i < 40; i++)
		if ((p[i] = MALLOC(size)) == NULL)
			_exit(3);
	for (unsigned i = 0; i < 40; i++)
		FREE(p[i]);
	FREE(tu_opaque(p[0]));
}
static void case_double_free_medium_spilled(void)
{
	double_free_medium_spilled(20000);
}
static void case_double_free_medium_spilled_100k(void)
{
	double_free_medium_spilled(100000);
}

/* A 100 KiB block freed twice in a row: the second free finds it in the thread's sheaf
 * on the fast path. */
static void case_double_free_medium_100k(void)
{
	if (strpbrk(getenv("USLUB_DEBUG") ? getenv("USLUB_DEBUG") : "", "ZPQ1"))
		_exit(CASE_SKIPPED);
	FREE(MALLOC(16));
	double_free_of(100000);
}

/* A 200 KiB block freed twice in a row: the second free finds it in the thread's
 * medium-block cache (a count past the sheaves', slab.h: medium_count). */
static void case_double_free_medium_200k(void)
{
	if (strpbrk(getenv("USLUB_DEBUG") ? getenv("USLUB_DEBUG") : "", "ZPQ1"))
		_exit(CASE_SKIPPED);
	FREE(MALLOC(16));
	double_free_of(200000);
}

static void case_realloc_freed_medium(void)
{
	void *p = MALLOC(20000);
	if (p == NULL)
		_exit(3);
	FREE(p);
	FREE(REALLOC(tu_opaque(p), 30000));
}

/* Blocks of 12-128 KiB freed by a thread (each carrying the free mark in its sheaf), whose
 * exit gives them back to the zone, then made again where they lay: a mark an earlier
 * block left must not make a live block's free look like a second one. */
enum { REUSED = 48 };
static size_t reused_size(unsigned i)
{
	return 8200 + ((i * 7) % 30) * 4096;
}

static void *mark_and_exit(void *arg)
{
	(void)arg;
	void *p[REUSED];
	for (unsigned i = 0; i < REUSED; i++)
		if ((p[i] = MALLOC(reused_size(i))) == NULL)
			_exit(3);
	for (unsigned i = 0; i < REUSED; i++)
		FREE(p[(i * 5) % REUSED]);
	return NULL;
}

static void case_medium_reused(void)
{
	for (unsigned round = 0; round < 4; round++) {
		pthread_t t;
		if (pthread_create(&t, NULL, mark_and_exit, NULL) != 0)
			_exit(3);
		pthread_join(t, NULL);
		/* Made where they lay at their size, or larger and then shrunk into a
		 * sheaf's sizes in place. */
		void *p[REUSED];
		for (unsigned i = 0; i < REUSED; i++)
			if ((p[i] = MALLOC(reused_size(i) + (round & 1) * 200000)) == NULL)
				_exit(3);
		for (unsigned i = 0; i < REUSED; i++)
			if ((round & 1) && (p[i] = REALLOC(p[i], reused_size(i))) == NULL)
				_exit(3);
		for (unsigned i = 0; i < REUSED; i++)
			FREE(p[i]);
		MALLOC_TRIM(0);
	}
	fputs("medium blocks reused\n", stderr);
}

/* Above the per-thread large cache: the pages go straight back. */
static void case_double_free_large_uncached(void)
{
	double_free_of(300000);
}

/* Two neighbouring blocks of more than 1 MiB freed: the zone keeps their pages as one
 * free run (core/page/extent.c), headed by the first; a second free of the other finds
 * a page that names nothing, inside that run. Also with a block cut from the run between
 * (the run's start). */
static void case_double_free_in_run(void)
{
	unsigned char *a = MALLOC(1500000), *b = MALLOC(1500000);
	FREE(a);
	FREE(b);
	void *c = MALLOC(1200000);
	FREE(tu_opaque(b));
	FREE(c);
}

/* A 10 MiB buffer is a span of the large zone, whose pages past the first name no block
 * in a plain run (slab.h, PF_BARE): a pointer inside one is still reported as inside a
 * large block, and a second free as a double free. */
static void case_double_free_span(void)
{
	double_free_of(10 << 20);
}

static unsigned char *filled(size_t size)
{
	unsigned char *p = MALLOC(size);
	if (p == NULL)
		_exit(3);
	memset(p, 4, size);
	return p;
}

static void case_free_inside_span(void)
{
	FREE(tu_opaque(filled(10 << 20) + (5 << 20)));
}

static void case_realloc_inside_span(void)
{
	unsigned char *p = REALLOC(tu_opaque(filled(10 << 20) + (5 << 20)), 100);
	fprintf(stderr, "realloc returned %p\n", (void *)p);
}

static void case_usable_inside_span(void)
{
	fprintf(stderr, "usable %zu\n", USABLE_SIZE(tu_opaque(filled(10 << 20) + (6 << 20))));
}

/* uslub_free_rcu reports a pointer that is no block at once, not after the grace
 * period: the child exits right after the call. */
static void case_free_rcu_inside_span(void)
{
#ifdef USLUB_PREFIXED
	uslub_free_rcu(tu_opaque(filled(10 << 20) + (5 << 20)));
	_exit(4);
#else
	_exit(CASE_SKIPPED); /* the prefixed API: the linked build */
#endif
}

/* The same inside a large block below a span, whose every page names it. */
static void case_free_inside_large(void)
{
	FREE(tu_opaque(filled(300000) + 3 * 4096));
}

/* Past HUGE_THRESHOLD (32 MiB): a mapping of its own. */
static void case_double_free_huge(void)
{
	double_free_of(40 << 20);
}

/* Freed into the huge cache, the mapping then grown for a larger block and freed again:
 * the first pointer is still known as freed. */
static void case_double_free_huge_reused(void)
{
	void *p = MALLOC(40 << 20);
	if (p == NULL)
		_exit(3);
	FREE(p);
	void *q = MALLOC(60 << 20);
	if (q == NULL)
		_exit(3);
	FREE(q);
	FREE(tu_opaque(p));
}

static void case_realloc_freed(void)
{
	void *a = MALLOC(64), *b = MALLOC(64);
	if (a == NULL || b == NULL)
		_exit(3);
	FREE(a);
	FREE(b);
	void *q = REALLOC(tu_opaque(a), 200);
	FREE(q);
}

/* A use after free that overwrites free pointers with the address of a global: the next
 * allocations must not hand out the global (glibc's safe-linking catches this). Under
 * uslub a freed object waits in the thread's sheaf, an array outside the object, so its
 * first word is never read; so every free object of a fresh slab is overwritten too, and
 * those still on the thread's freelist, whose links the sheaf's refill reads, must be
 * caught there. */
static void case_steer_freelist(void)
{
	struct uslub_cache_info ci;
	plain_cache("kmalloc-64", 64, &ci);
	uintptr_t bytes = (uintptr_t)4096 << ci.order;
	void *p = NULL, *prev = NULL;
	/* The first object of a new slab: every other object of it is free. */
	for (unsigned i = 0; i < 100000; i++) {
		p = MALLOC(64);
		if (p == NULL)
			_exit(3);
		if (!ci.objects_per_slab || (i > 64 && ((uintptr_t)p ^ (uintptr_t)prev) >= bytes))
			break;
		prev = p;
	}
	uintptr_t base = (uintptr_t)p & ~(bytes - 1);
	for (unsigned i = 0; i < ci.objects_per_slab; i++) {
		void *o = (void *)(base + (uintptr_t)i * 64);
		if (o != p)
			*(void *volatile *)tu_opaque(o) = global_buffer;
	}
	FREE(p);
	void *volatile *slot = tu_opaque(p);
	*slot = global_buffer;
	for (unsigned i = 0; i < 1000; i++) {
		void *q = MALLOC(64);
		if ((char *)q >= global_buffer &&
		    (char *)q < global_buffer + sizeof(global_buffer)) {
			fputs("malloc handed out a global\n", stderr);
			_exit(4);
		}
	}
	_exit(5);
}

/* Every free object of a thread's current slab overwritten with its own address (with
 * USLUB_HARDEN=off that is a cycle of one; with the links protected, a link out of the
 * slab): the thread's exit, which walks its freelist, must report it, not follow it
 * forever. */
static void *smash_freelist(void *arg)
{
	struct uslub_cache_info *ci = arg;
	uintptr_t bytes = (uintptr_t)4096 << ci->order;
	/* The first object of a slab of the thread's own (its first few objects come from
	 * shared slabs): the rest of the slab is on its freelist and in its sheaf. */
	unsigned char *a = NULL, *prev = NULL;
	for (unsigned i = 0; i < 100000; i++) {
		a = MALLOC(64);
		if (a == NULL)
			_exit(3);
		if (i > 64 && ((uintptr_t)a ^ (uintptr_t)prev) >= bytes)
			break;
		prev = a;
	}
	uintptr_t base = (uintptr_t)a & ~(bytes - 1);
	for (unsigned i = 0; i < ci->objects_per_slab; i++) {
		void *volatile *o = tu_opaque((void *)(base + (uintptr_t)i * 64));
		if ((unsigned char *)o != a)
			*o = (void *)o;
	}
	return a;
}

static void case_corrupt_list_exit(void)
{
	static struct uslub_cache_info ci;
	plain_cache("kmalloc-64", 64, &ci);
	if (ci.objects_per_slab == 0)
		_exit(CASE_SKIPPED); /* needs uslub's slab geometry */
	pthread_t t;
	if (pthread_create(&t, NULL, smash_freelist, &ci) != 0)
		_exit(3);
	pthread_join(t, NULL);
	_exit(6);
}

static void case_realloc_stack(void)
{
	char local[64];
	memset(local, 4, sizeof(local));
	void *q = REALLOC(tu_opaque(local), 128);
	FREE(q);
}

/* The control: the same operations on valid blocks must not abort. */
static void case_valid(void)
{
	unsigned char *p = MALLOC(64);
	unsigned char *q = MALLOC(64);
	if (p == NULL || q == NULL)
		_exit(3);
	memset(p, 5, 64);
	FREE(p);
	q = REALLOC(q, 128);
	FREE(q);
	fputs("valid operations done\n", stderr);
}

struct bad_case {
	const char *name;
	void (*run)(void);
	int expect_abort;
	const char *expect[2]; /* texts that must appear on stderr */
};

static const struct bad_case cases[] = {
    {"free(stack address)", case_free_stack, 1, {"uslub: free(): invalid pointer 0x", NULL}},
    {"free(global)", case_free_global, 1, {"uslub: free(): invalid pointer 0x", NULL}},
    {"free(p + 8) of a 64-byte block", case_free_interior, 1, {"invalid pointer", "kmalloc-64"}},
    {"free(the tail of a kmalloc-96 slab)",
     case_free_slab_tail,
     1,
     {"invalid pointer", "kmalloc-96"}},
    {"double free of a 64-byte block", case_double_free, 1, {"double free", "kmalloc-64"}},
    {"double free of another thread's 64-byte block",
     case_double_free_sheaf,
     1,
     {"double free", "kmalloc-64"}},
    {"free(a); free(b); free(a), 64 bytes",
     case_double_free_between_64,
     1,
     {"double free", "kmalloc-64"}},
    {"free(a); free(b); free(a), 16 bytes",
     case_double_free_between_16,
     1,
     {"double free", "kmalloc-16"}},
    {"free(a); free(b); free(a) of a running thread's objects",
     case_double_free_foreign,
     1,
     {"double free", "kmalloc-64"}},
    {"free(a); free(b); free(a) of an exited thread's objects",
     case_double_free_orphan,
     1,
     {"double free", "kmalloc-64"}},
    {"double free into another thread's slab emptied by this one",
     case_double_free_empty_slab,
     1,
     {"double free", "kmalloc-256"}},
    {"double free of a large block (cached)",
     case_double_free_large,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 20 KiB block by a thread whose sheaf is not open",
     case_double_free_medium_other,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 20 KiB block its sheaf spilled",
     case_double_free_medium_spilled,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 100 KiB block",
     case_double_free_medium_100k,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 100 KiB block by a thread whose sheaf is not open",
     case_double_free_medium_other_100k,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 100 KiB block its sheaf spilled",
     case_double_free_medium_spilled_100k,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"double free of a 200 KiB block",
     case_double_free_medium_200k,
     1,
     {"uslub: free(): double free 0x", "large block"}},
    {"realloc of a freed 20 KiB block", case_realloc_freed_medium, 1, {"realloc", "double free"}},
    {"medium blocks made where freed ones lay (control)",
     case_medium_reused,
     0,
     {"medium blocks reused", NULL}},
    {"double free of a large block (pages given back)",
     case_double_free_large_uncached,
     1,
     {"uslub: free(): double free 0x", NULL}},
    {"double free of a large block kept in a free run with the block before it",
     case_double_free_in_run,
     1,
     {"uslub: free(): double free 0x", NULL}},
    {"double free of a 10 MiB buffer (a span)",
     case_double_free_span,
     1,
     {"uslub: free(): double free 0x", NULL}},
    {"free(p + 5 MiB) of a 10 MiB buffer",
     case_free_inside_span,
     1,
     {"uslub: free(): invalid pointer 0x", "inside a large block of"}},
    {"realloc(p + 5 MiB) of a 10 MiB buffer",
     case_realloc_inside_span,
     1,
     {"uslub: realloc(): invalid pointer 0x", "inside a large block of"}},
    {"malloc_usable_size(p + 6 MiB) of a 10 MiB buffer",
     case_usable_inside_span,
     1,
     {"invalid pointer 0x", "inside a large block of"}},
    {"uslub_free_rcu(p + 5 MiB) of a 10 MiB buffer",
     case_free_rcu_inside_span,
     1,
     {"uslub_free_rcu(): invalid pointer 0x", "inside a large block of"}},
    {"free(p + 12 KiB) of a 300,000-byte block",
     case_free_inside_large,
     1,
     {"uslub: free(): invalid pointer 0x", "inside a large block of"}},
    {"double free of a huge block",
     case_double_free_huge,
     1,
     {"uslub: free(): double free 0x", "huge"}},
    {"double free of a huge block whose cached mapping was reused",
     case_double_free_huge_reused,
     1,
     {"uslub: free(): double free 0x", "huge"}},
    {"realloc of a freed block", case_realloc_freed, 1, {"realloc", "double free"}},
    {"free pointer overwritten with a global's address",
     case_steer_freelist,
     1,
     {"corrupted free list in cache kmalloc-64", NULL}},
    {"free pointer overwritten, then the thread exits",
     case_corrupt_list_exit,
     1,
     {"corrupted free list in cache kmalloc-64", NULL}},
    {"realloc(stack address)", case_realloc_stack, 1, {"invalid pointer", NULL}},
    {"valid free and realloc (control)", case_valid, 0, {"valid operations done", NULL}},
};

/* Runs one case in a child; returns its wait status and what it wrote to stderr. */
static int run_case(const struct bad_case *c, char *out, size_t cap)
{
	int fds[2];
	out[0] = '\0';
	if (pipe(fds) != 0) {
		perror("pipe");
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return -1;
	}
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		signal(SIGABRT, SIG_DFL);
		close(fds[0]);
		dup2(fds[1], 2);
		close(fds[1]);
		alarm(20);
		c->run();
		_exit(0);
	}
	close(fds[1]);
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fds[0], out + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap - 1)
			break; /* enough to judge; closing below unblocks a chatty child */
	}
	out[len] = '\0';
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/* A one-line, printable copy of the child's stderr for the report. */
static void one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r' || *s == '\t')
			*s = ' ';
}

int main(int argc, char **argv)
{
	/* `--case N` runs case N alone, in this process, under whatever allocator is loaded:
	 * how the README's table puts glibc's outcome beside uslub's. */
	if (argc == 3 && strcmp(argv[1], "--case") == 0) {
		size_t i = (size_t)atoi(argv[2]);
		if (i >= sizeof(cases) / sizeof(cases[0]))
			return 2;
		fprintf(stderr, "case %zu: %s\n", i, cases[i].name);
		alarm(20);
		cases[i].run();
		return 0;
	}
	(void)argc;
	tu_clean_env(argv);
	printf("test_bad_input (%s): bad frees and reallocs abort with a message that names "
	       "the fault and the cache\n",
	       VARIANT);
	CHECKF(tu_totals_fn() != NULL, "uslub_get_totals not found: libuslub.so is not "
				       "preloaded");

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad_case *c = &cases[i];
		char out[8192];
		int status = run_case(c, out, sizeof(out));
		one_line(out);
		if (WIFEXITED(status) && WEXITSTATUS(status) == CASE_SKIPPED) {
			tu_section("%s: skipped, the layout it needs is not in use", c->name);
			continue;
		}
		if (c->expect_abort) {
			tu_section("%s: SIGABRT, stderr has \"%s\"%s%s%s", c->name, c->expect[0],
				   c->expect[1] ? " and \"" : "", c->expect[1] ? c->expect[1] : "",
				   c->expect[1] ? "\"" : "");
			if (WIFSIGNALED(status))
				CHECKF(WTERMSIG(status) == SIGABRT,
				       "%s: killed by signal %d (%s), "
				       "expected SIGABRT; stderr: \"%s\"",
				       c->name, WTERMSIG(status), strsignal(WTERMSIG(status)), out);
			else
				CHECKF(0,
				       "%s: exited with status %d instead of dying by SIGABRT; "
				       "stderr: \"%s\"",
				       c->name, WEXITSTATUS(status), out);
		} else {
			tu_section("%s: exits 0", c->name);
			CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			       "%s: status %#x; stderr: \"%s\"", c->name, status, out);
		}
		for (int k = 0; k < 2; k++)
			if (c->expect[k] != NULL)
				CHECKF(strstr(out, c->expect[k]) != NULL,
				       "%s: stderr lacks \"%s\": "
				       "\"%s\"",
				       c->name, c->expect[k], out);
	}
	return tu_summary("test_bad_input");
}
