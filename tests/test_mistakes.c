/* test_mistakes.c: the classic heap mistakes of issue 26, one by one, at 8 B, 4 KiB and
 * 384 KiB, by default and under USLUB_DEBUG=1 (every letter but T), and what uslub says of
 * each. The table below is the README's (Checkers, "What is caught"): a row that says
 * "caught" must end the child by SIGABRT with a report whose first line has "uslub:" and
 * whose text names the fault; a row that says "not caught" must exit 0, so a change of
 * either kind shows here and the README's table is kept true.
 *
 * Then single letters: P alone lets a freed block come straight back (the write after free
 * lands in the new block, unseen), Q alone holds it back and finds the write, and Z alone
 * has the background sweep find an overflow of a block the program keeps while it sleeps.
 *
 * Each mistake runs in a child that re-executes this program under LD_PRELOAD with the
 * row's settings; its stderr goes into a pipe. Standard names, built with
 * -fno-builtin-malloc and friends, and every stray access through a volatile pointer, so
 * the compiler keeps each mistake as written. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_util.h"

extern char **environ;

/* ---- the mistakes, run in the child ------------------------------------------------ */

static char src[(40 << 20) + 64]; /* up to HUGE_SIZE and past it */

/* Keeps the compiler from reasoning about p. */
static void *launder(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* A size the compiler cannot see, so memcpy stays a call (which B's library checks). */
static size_t opaque(size_t n)
{
	__asm__ volatile("" : "+r"(n));
	return n;
}

static void poke(void *p, long at)
{
	volatile char *b = launder(p);
	b[at] = 'x';
}

static void m_overflow1(size_t n)
{
	char *p = malloc(n);
	poke(p, (long)n);
	free(p);
}

static void m_overflow32(size_t n)
{
	char *p = malloc(n);
	poke(p, (long)n + 31);
	free(p);
}

static void m_underflow1(size_t n)
{
	char *p = malloc(n);
	poke(p, -1);
	free(p);
}

static void m_underflow32(size_t n)
{
	char *p = malloc(n);
	poke(p, -32);
	free(p);
}

/* An overflow of a block kept to the end: found only by a check at exit. */
static void m_overflow_kept(size_t n)
{
	char *p = malloc(n);
	poke(p, (long)n);
}

static void m_memcpy_over(size_t n)
{
	char *p = launder(malloc(n));
	memcpy(p, src, n + 32);
}

static void m_memcpy_under(size_t n)
{
	char *p = launder(malloc(n));
	memcpy(p - 32, src, opaque(32));
}

static void m_memcpy_over1(size_t n)
{
	char *p = launder(malloc(n));
	memcpy(p, src, n + 1);
}

static void m_memset_over1(size_t n)
{
	char *p = launder(malloc(n));
	memset(p, 1, n + 1);
}

static void m_memmove_over1(size_t n)
{
	char *p = launder(malloc(n));
	memmove(p + 1, p, n);
}

static void m_memcpy_freed(size_t n)
{
	char *p = malloc(n);
	free(p);
	memcpy(launder(p), src, opaque(8));
}

/* Every write inside the request: nothing to say. */
static void m_memcpy_inside(size_t n)
{
	char *p = launder(malloc(n));
	memcpy(p, src, n);
	memmove(p + n / 2, p, n - n / 2);
	memset(p, 0, n);
	free(p);
}

/* An overflow found by malloc_trim's check: the program goes on, so "not caught" prints. */
static void m_overflow_trim(size_t n)
{
	char *p = malloc(n);
	poke(p, (long)n);
	malloc_trim(0);
	fprintf(stderr, "trim passed\n");
}

static void m_uaf_write(size_t n)
{
	char *p = malloc(n);
	free(p);
	poke(p, 0);
}

/* The size's sheaf opened first: a thread's first frees of small objects from a slab other
 * threads take from send them back to their slab (sheaf.c), whose free list a write after
 * free then corrupts, and the malloc after it stops the program. Here the block goes
 * where a thread's frees go from then on. */
static void m_uaf_write_malloc(size_t n)
{
	for (int i = 0; i < 4; i++)
		free(launder(malloc(n)));
	char *p = malloc(n);
	free(p);
	poke(p, 0);
	launder(malloc(n));
}

/* A write after free once malloc_trim has handed the freed memory back to the OS. */
static void m_uaf_trim(size_t n)
{
	char *p = malloc(n);
	free(p);
	malloc_trim(0);
	poke(p, 0);
}

/* The block freed is asked for again at once; a write through the old pointer then lands
 * in the new block, unless the quarantine holds the freed one back. */
static void m_uaf_reuse(size_t n)
{
	char *p = malloc(n);
	free(p);
	char *q = launder(malloc(n));
	fprintf(stderr, "reused: %s\n", q == p ? "yes" : "no");
	poke(p, 0);
}

static void m_double_free(size_t n)
{
	char *p = malloc(n);
	free(p);
	free(launder(p));
}

static void m_double_free_between(size_t n)
{
	char *p = malloc(n), *q = malloc(n);
	free(p);
	free(q);
	free(launder(p));
}

static void m_free_interior(size_t n)
{
	char *p = malloc(n);
	free(launder(p + n / 2));
}

static void m_free_unaligned(size_t n)
{
	char *p = malloc(n);
	free(launder(p + 1));
}

static void m_free_stack(size_t n)
{
	char local[64];
	(void)n;
	free(launder(local));
}

static void m_free_foreign(size_t n)
{
	void *m = mmap(NULL, n + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	free(launder(m));
}

static void m_realloc_freed(size_t n)
{
	char *p = malloc(n);
	free(p);
	launder(realloc(launder(p), n * 2));
}

/* ---- the table ----------------------------------------------------------------------- */

#define SMALL (1u << 0) /* 8 B */
#define PAGE  (1u << 1) /* 4 KiB */
#define LARGE (1u << 2) /* 384 KiB: a large block, past the medium blocks' 256 */
#define ALL   (SMALL | PAGE | LARGE)

struct mistake {
	const char *name;
	void (*run)(size_t);
	/* Sizes at which each setting catches it, and what its report says. */
	unsigned by_default, with_letters;
	const char *report_default, *report_letters;
	/* Sizes at which the access faults (SIGSEGV) instead by default: the page after
	 * the block is not mapped. Under the letters the block has a red zone there. */
	unsigned faults;
	/* What stderr must also hold under the letters. */
	const char *also;
};

static const struct mistake mistakes[] = {
    {"overflow by 1, then free", m_overflow1, 0, ALL, NULL, "Redzone overwritten", 0, NULL},
    {"overflow by 32, then free", m_overflow32, 0, ALL, NULL, "Redzone overwritten", 0, NULL},
    {"underflow by 1, then free", m_underflow1, 0, ALL, NULL, "Redzone overwritten", 0, NULL},
    {"underflow by 32, then free", m_underflow32, 0, ALL, NULL, "Redzone overwritten", 0, NULL},
    {"overflow by 1, kept to exit", m_overflow_kept, 0, ALL, NULL, "Found in exit()", 0, NULL},
    {"memcpy 32 past, kept to exit", m_memcpy_over, 0, ALL, NULL, "Found in exit()", 0, NULL},
    {"memcpy 32 before, kept to exit", m_memcpy_under, 0, ALL, NULL, "Found in exit()", 0, NULL},
    {"overflow by 1, then malloc_trim", m_overflow_trim, 0, ALL, NULL, "Found in malloc_trim()", 0,
     NULL},
    {"write after free, then exit", m_uaf_write, 0, ALL, NULL, "Poison overwritten", 0, NULL},
    {"write after free, then malloc", m_uaf_write_malloc, 0, ALL, NULL, "Poison overwritten", 0,
     NULL},
    {"write after free, malloc_trim, then write", m_uaf_trim, 0, SMALL | PAGE, NULL,
     "Poison overwritten", LARGE, NULL},
    {"write after free into a reused block", m_uaf_reuse, 0, ALL, NULL, "Poison overwritten", 0,
     "reused: no"},
    {"double free", m_double_free, ALL, ALL, "double free", "double free", 0, NULL},
    {"double free, another free between", m_double_free_between, ALL, ALL, "double free",
     "double free", 0, NULL},
    {"free of an interior pointer", m_free_interior, ALL, ALL, "invalid pointer", "invalid pointer",
     0, NULL},
    {"free of an unaligned pointer", m_free_unaligned, ALL, ALL, "invalid pointer",
     "invalid pointer", 0, NULL},
    {"free of a stack address", m_free_stack, ALL, ALL, "invalid pointer", "invalid pointer", 0,
     NULL},
    {"free of a foreign mapping", m_free_foreign, ALL, ALL, "invalid pointer", "invalid pointer", 0,
     NULL},
    {"realloc of a freed block", m_realloc_freed, ALL, ALL, "double free", "double free", 0, NULL},
};
#define NR_MISTAKES (sizeof(mistakes) / sizeof(mistakes[0]))

static const size_t sizes[] = {8, 4096, 384 << 10};

/* malloc(0): a block with no byte to use. */
static void m_zero_write(size_t n)
{
	(void)n;
	char *p = malloc(0);
	poke(p, 0);
	free(p);
}

static void m_zero_write_kept(size_t n)
{
	(void)n;
	char *p = malloc(0);
	poke(p, 0);
}

/* An overflow of a block kept while the program sleeps, which then ends without the check
 * at exit: only the background sweep can find it. */
static void m_overflow_sleep(size_t n)
{
	char *p = malloc(n);
	poke(p, (long)n);
	for (int i = 0; i < 50; i++)
		usleep(100 * 1000);
	_exit(0); /* not found */
}

/* Single letters and settings: which of them catches what (table index 2). */
static const struct mistake extra[] = {
    /* P alone: the freed block comes straight back, and the write lands in it, unseen. */
    {"write after free into a reused block, P", m_uaf_reuse, 0, 0, NULL, NULL, 0, "reused: yes"},
    /* Q alone: held back, its poison checked at exit. */
    {"write after free into a reused block, Q", m_uaf_reuse, 0, ALL, NULL, "Poison overwritten", 0,
     "reused: no"},
    {"overflow by 1 kept, found by the background sweep", m_overflow_sleep, 0, ALL, NULL,
     "Found in the background sweep()", 0, NULL},
    /* Z alone: a large block's page before it. */
    {"underflow by 32, then free, Z", m_underflow32, 0, ALL, NULL, "Redzone overwritten", 0, NULL},
};
static const char *const extra_env[] = {"USLUB_DEBUG=P", "USLUB_DEBUG=Q", "USLUB_DEBUG=Z",
					"USLUB_DEBUG=Z"};

static const struct mistake zero[] = {
    {"malloc(0), write, free", m_zero_write, 0, SMALL, NULL, "Redzone overwritten", 0, NULL},
    {"malloc(0), write, kept to exit", m_zero_write_kept, 0, SMALL, NULL, "Found in exit()", 0,
     NULL},
};

/* Huge blocks (40 MiB, a mapping of their own) under USLUB_DEBUG=1: the mapping holds a page
 * of red zone before the block and red zone after the request, checked at free and by the
 * sweep (table index 3); the report gives the offset before the block. */
#define HUGE_SIZE ((size_t)40 << 20)
static const struct mistake huge[] = {
    {"overflow by 1, then free", m_overflow1, 0, SMALL, NULL, "Redzone overwritten", 0, NULL},
    {"overflow by 32, then free", m_overflow32, 0, SMALL, NULL, "Redzone overwritten", 0, NULL},
    {"underflow by 1, then free", m_underflow1, 0, SMALL, NULL, "@offset=-1, before the block", 0,
     "BUG huge block (uslub): Redzone overwritten"},
    {"underflow by 32, then free", m_underflow32, 0, SMALL, NULL, "@offset=-32, before the block",
     0, "BUG huge block (uslub): Redzone overwritten"},
    {"memcpy 32 before, kept to exit", m_memcpy_under, 0, SMALL, NULL, "Found in exit()", 0,
     "@offset=-32, before the block"},
    {"overflow by 1, kept to exit", m_overflow_kept, 0, SMALL, NULL, "Found in exit()", 0, NULL},
    {"memcpy 32 past, kept to exit", m_memcpy_over, 0, SMALL, NULL, "Found in exit()", 0, NULL},
    {"overflow by 1, then malloc_trim", m_overflow_trim, 0, SMALL, NULL, "Found in malloc_trim()",
     0, NULL},
};

/* USLUB_DEBUG=B with libuslub_bounds.so preloaded (table index 4): each write is checked as
 * it is made, so the report names the function ("Found in memcpy()") and the program's
 * line, and the program stops there. The "by default" column is B alone (large blocks:
 * no page before them, and a freed one's pages go back), the letters' is USLUB_DEBUG=1
 * (Z's page before a large block, Q's held blocks). */
static const struct mistake bounds[] = {
    {"memcpy 1 past", m_memcpy_over1, ALL, ALL, "memcpy(): ", "memcpy(): ", 0, "Found in memcpy()"},
    {"memcpy 32 past", m_memcpy_over, ALL, ALL, "out of bounds", "out of bounds", 0, NULL},
    {"memcpy 32 before", m_memcpy_under, SMALL | PAGE, ALL, "out of bounds", "out of bounds", 0,
     NULL},
    {"memset 1 past", m_memset_over1, ALL, ALL, "memset(): ", "memset(): ", 0, NULL},
    {"memmove 1 past", m_memmove_over1, ALL, ALL, "memmove(): ", "memmove(): ", 0, NULL},
    {"memcpy into a freed block", m_memcpy_freed, SMALL | PAGE, ALL, "write into a freed",
     "write into a freed", 0, NULL},
    {"memcpy, memmove, memset inside the block", m_memcpy_inside, 0, 0, NULL, NULL, 0, NULL},
};

/* ---- the parent ------------------------------------------------------------------ */

/* LD_PRELOAD's second library for table 4 (TEST_BOUNDS_LIB, from meson), else NULL. */
static const char *bounds_lib;

/* Re-executes this program for one mistake at size n with USLUB_DEBUG=`debug` (NULL:
 * none); returns the wait status, and stderr in out. */
static int run_child(const char *self, int table, size_t i, size_t n, const char *setting,
		     char *out, size_t cap)
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
		static char preload[4096];
		size_t k = 0;
		for (char **e = environ; *e && k < 60; e++) {
			if (strncmp(*e, "USLUB_", 6) == 0)
				continue;
			if (table == 4 && strncmp(*e, "LD_PRELOAD=", 11) == 0) {
				snprintf(preload, sizeof(preload), "%s %s", *e, bounds_lib);
				env[k++] = preload;
			} else {
				env[k++] = *e;
			}
		}
		if (setting)
			env[k++] = (char *)setting;
		env[k] = NULL;
		char a1[16], a2[32];
		snprintf(a1, sizeof(a1), "%d:%zu", table, i);
		snprintf(a2, sizeof(a2), "%zu", n);
		char *argv[] = {(char *)self, "--mistake", a1, a2, NULL};
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

/* `env`: the child's one USLUB_ setting, NULL for the default; with one, the row's
 * with_letters column applies. */
static void check_one(const struct mistake *m, int table, size_t i, unsigned bit, size_t n,
		      const char *env)
{
	static char out[65536];
	int status = run_child("/proc/self/exe", table, i, n, env, out, sizeof(out));
	/* Table 4's first column is USLUB_DEBUG=B's. */
	int letters = env && (table != 4 || strcmp(env, "USLUB_DEBUG=B") != 0);
	unsigned caught = letters ? m->with_letters : m->by_default;
	const char *want = letters ? m->report_letters : m->report_default;
	const char *setting = env ? env : "default";
	if (env && m->also && ((caught & bit) || !m->with_letters))
		CHECKF(strstr(out, m->also) != NULL, "%s at %zu B (%s): no \"%s\" in:\n%s", m->name,
		       n, setting, m->also, out);
	if ((m->faults & bit) && !(env && (caught & bit))) {
		CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
		       "%s at %zu B (%s): status %#x, expected SIGSEGV; stderr:\n%s", m->name, n,
		       setting, status, out);
	} else if (caught & bit) {
		CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
		       "%s at %zu B (%s): status %#x, expected SIGABRT; stderr:\n%s", m->name, n,
		       setting, status, out);
		/* The report's first line (after what the program wrote) says who speaks. */
		CHECKF(strncmp(out, "uslub:", 6) == 0 || strstr(out, "\nuslub:"),
		       "%s at %zu B (%s): no line starting \"uslub:\" in:\n%s", m->name, n, setting,
		       out);
		CHECKF(strstr(out, want) != NULL, "%s at %zu B (%s): no \"%s\" in:\n%s", m->name, n,
		       setting, want, out);
	} else {
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		       "%s at %zu B (%s): status %#x, expected exit 0 (not caught); stderr:\n%s",
		       m->name, n, setting, status, out);
	}
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--mistake") == 0) {
		int z = atoi(argv[2]);
		size_t i = strtoul(strchr(argv[2], ':') + 1, NULL, 10);
		signal(SIGABRT, SIG_DFL);
		const struct mistake *m = z == 4   ? &bounds[i]
					  : z == 3 ? &huge[i]
					  : z == 2 ? &extra[i]
					  : z	   ? &zero[i]
						   : &mistakes[i];
		m->run(strtoul(argv[3], NULL, 10));
		exit(0); /* through the destructors: the check at exit */
	}
	tu_clean_env(argv);
	printf("test_mistakes: %zu mistakes at 8 B, 4 KiB, 384 KiB and malloc(0), by default "
	       "and under USLUB_DEBUG=1\n",
	       NR_MISTAKES);
	for (int d = 0; d < 2; d++) {
		const char *env = d ? "USLUB_DEBUG=1" : NULL;
		for (size_t i = 0; i < NR_MISTAKES; i++)
			for (size_t s = 0; s < 3; s++)
				check_one(&mistakes[i], 0, i, 1u << s, sizes[s], env);
		for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
			check_one(&zero[i], 1, i, SMALL, 0, env);
	}
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++)
		check_one(&huge[i], 3, i, SMALL, HUGE_SIZE, "USLUB_DEBUG=1");
	bounds_lib = getenv("TEST_BOUNDS_LIB");
	for (int b = 0; bounds_lib && b < 2; b++)
		for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
			for (size_t s = 0; s < 3; s++)
				check_one(&bounds[i], 4, i, 1u << s, sizes[s],
					  b ? "USLUB_DEBUG=1" : "USLUB_DEBUG=B");
	/* One letter at a time. */
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
		for (size_t s = 0; s < 3; s++)
			check_one(&extra[i], 2, i, 1u << s, sizes[s], extra_env[i]);
	return tu_summary("test_mistakes");
}
