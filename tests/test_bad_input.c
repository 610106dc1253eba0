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

/* A slab's objects rarely fill it: kmalloc-96 leaves a tail. Its first byte is a multiple
 * of 96 from the slab's start, but no object's; freeing it must not hand the tail out. */
static void case_free_slab_tail(void)
{
	typedef int (*info_fn)(const char *, struct uslub_cache_info *);
#ifdef USLUB_PREFIXED
	info_fn info = uslub_cache_info;
#else
	info_fn info = NULL;
	void *sym = dlsym(RTLD_DEFAULT, "uslub_cache_info");
	memcpy(&info, &sym, sizeof(info));
#endif
	struct uslub_cache_info ci;
	unsigned char *p = MALLOC(96);
	if (p == NULL || info == NULL || info("kmalloc-96", &ci) != 0)
		_exit(3);
	/* A fresh process's first kmalloc-96 slab has the preferred order, and slabs are
	 * aligned to their size. */
	uintptr_t bytes = (uintptr_t)4096 << ci.order;
	uintptr_t base = (uintptr_t)p & ~(bytes - 1);
	uintptr_t tail = base + (uintptr_t)ci.objects_per_slab * 96;
	/* A debug cache (USLUB_DEBUG, or every cache under a sanitizer) lays out slots with
	 * red zones: there this address is inside the objects, and the case cannot be made. */
	if (ci.objects_per_slab != bytes / 96 || tail >= base + bytes)
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
