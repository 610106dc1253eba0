/* libFuzzer target: the malloc family against a shadow model.
 *
 * The input is a program: each step is an operation byte, a slot byte and two size bytes
 * (missing bytes read as zero). Operations on NSLOTS slots: malloc, calloc, realloc,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc, free, a usable-size check
 * (the bytes between the size asked for and the usable size are written), a hand-off to
 * a second thread (which frees the block, or allocates one for the slot, so frees cross
 * threads both ways), malloc_trim, and an injected double free (a block freed, another
 * one freed, then the first again in a forked child, which must stop with the report). The model
 * holds each slot's size, alignment and pattern seed; after every step the slot is checked -
 * contents, alignment, usable size, no overlap with another live block - and at the end every block
 * is checked and freed, and the heap walker (core/debug/check.c) must find every page accounted for
 * and nothing left live. Any disagreement aborts, which libFuzzer reports with the input.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by tests/fuzz/build.sh, the core
 * sources compiled in: ASan and UBSan watch the engine's own code; the heap it manages
 * is its own mappings, which the shadow model watches instead. */
#include "debug/check.h"
#include "uslub.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSLOTS	32
#define CHECKED 4096 /* pattern bytes at each end of a block */

#define REQUIRE(cond)                                                                              \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_alloc: %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

struct slot {
	unsigned char *p;
	size_t size;  /* asked for */
	size_t align; /* promised */
	uint8_t seed;
};

static struct slot slots[NSLOTS];

static unsigned char pat(uint8_t seed, size_t i)
{
	return (unsigned char)(seed * 31u + (i * 7u) + (i >> 8));
}

static void fill(struct slot *s)
{
	size_t head = s->size < CHECKED ? s->size : CHECKED;
	for (size_t i = 0; i < head; i++)
		s->p[i] = pat(s->seed, i);
	for (size_t i = s->size > CHECKED ? s->size - CHECKED : head; i < s->size; i++)
		s->p[i] = pat(s->seed, i);
}

/* The first n bytes (within the checked ranges) still hold the pattern. */
static void verify(const struct slot *s, size_t n)
{
	size_t head = n < CHECKED ? n : CHECKED;
	for (size_t i = 0; i < head; i++)
		REQUIRE(s->p[i] == pat(s->seed, i));
	if (n == s->size)
		for (size_t i = n > CHECKED ? n - CHECKED : head; i < n; i++)
			REQUIRE(s->p[i] == pat(s->seed, i));
}

static void check_slot(const struct slot *s)
{
	if (!s->p)
		return;
	REQUIRE(((uintptr_t)s->p & (s->align - 1)) == 0);
	REQUIRE(uslub_malloc_usable_size(s->p) >= s->size);
	verify(s, s->size);
}

/* A new block overlaps no live one: the allocator handed out nothing twice. */
static void check_disjoint(unsigned k)
{
	uintptr_t a = (uintptr_t)slots[k].p, ae = a + (slots[k].size ? slots[k].size : 1);
	for (unsigned i = 0; i < NSLOTS; i++) {
		if (i == k || !slots[i].p)
			continue;
		uintptr_t b = (uintptr_t)slots[i].p, be = b + (slots[i].size ? slots[i].size : 1);
		REQUIRE(ae <= b || be <= a);
	}
}

/* ---- the second thread ----------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static enum { IDLE, DO_FREE, DO_MALLOC, DONE } request;
static void *req_ptr;
static size_t req_size;

static void *helper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		while (request == IDLE || request == DONE)
			pthread_cond_wait(&cond, &lock);
		if (request == DO_FREE)
			uslub_free(req_ptr);
		else
			req_ptr = uslub_malloc(req_size);
		request = DONE;
		pthread_cond_broadcast(&cond);
	}
	return NULL;
}

static void *on_helper(int what, void *p, size_t size)
{
	static pthread_t th;
	static bool started;
	if (!started) {
		REQUIRE(pthread_create(&th, NULL, helper, NULL) == 0);
		started = true;
	}
	pthread_mutex_lock(&lock);
	request = what;
	req_ptr = p;
	req_size = size;
	pthread_cond_broadcast(&cond);
	while (request != DONE)
		pthread_cond_wait(&cond, &lock);
	request = IDLE;
	p = req_ptr;
	pthread_mutex_unlock(&lock);
	return p;
}

/* ---- decoding -------------------------------------------------------------------- */

struct input {
	const uint8_t *data;
	size_t len, pos;
};

static unsigned byte(struct input *in)
{
	return in->pos < in->len ? in->data[in->pos++] : 0;
}

/* Mostly small, some up to 8 KiB, some large, a few huge (own mapping). */
static size_t decode_size(unsigned sel, unsigned v)
{
	switch (sel % 16) {
	case 0:
		return v % 17; /* 0..16, zero included */
	case 1:
	case 2:
	case 3:
	case 4:
	case 5:
	case 6:
		return v % 512;
	case 7:
	case 8:
	case 9:
	case 10:
		return v % 8193;
	case 11:
	case 12:
	case 13:
		return 8192 + (size_t)v * 7;
	case 14:
		return (size_t)v * 61; /* to 4 MiB */
	default:
		return (v & 7) == 0 ? (4u << 20) + (size_t)v * 13 : (size_t)v * 3;
	}
}

static void release(unsigned k)
{
	check_slot(&slots[k]);
	uslub_free(slots[k].p);
	slots[k].p = NULL;
}

/* The injected double free: slot k's block is freed, then slot j's (if live, so the
 * second free of k does not follow the first), and a forked child frees k's pointer
 * again. The child must stop with "double free" on stderr and SIGABRT; the parent's heap
 * is untouched by it. Forking is slow, so only one step in 32 or so gets here. */
static void inject_double_free(unsigned k, unsigned j)
{
	unsigned char *stale = slots[k].p;
	release(k);
	if (j != k && slots[j].p)
		release(j);
	int fds[2];
	REQUIRE(pipe(fds) == 0);
	fflush(stderr);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		signal(SIGABRT, SIG_DFL);
		dup2(fds[1], 2);
		uslub_free(stale);
		_exit(0);
	}
	close(fds[1]);
	char out[1024];
	size_t len = 0;
	ssize_t n;
	/* libFuzzer's timer (SIGALRM, -timeout) may interrupt the read and the wait. */
	while (len < sizeof(out) - 1 && ((n = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0 ||
					 (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	out[len] = '\0';
	close(fds[0]);
	int status;
	pid_t w;
	while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (w != pid) {
		/* Reaped by someone else (SIGCHLD ignored): what it printed has to do. */
		fprintf(stderr, "fuzz_alloc: waitpid: %s\n", strerror(errno));
		REQUIRE(errno == ECHILD && strstr(out, "double free"));
		return;
	}
	if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(out, "double free"))) {
		fprintf(stderr, "fuzz_alloc: double free of %p not reported (status %#x): %s\n",
			(void *)stale, status, out);
		abort();
	}
}

static void step(struct input *in, uint8_t seq)
{
	unsigned op = byte(in) % 13, k = byte(in) % NSLOTS;
	unsigned sel = byte(in), v = byte(in) | byte(in) << 8;
	size_t size = decode_size(sel, v);
	size_t align = 1;
	struct slot *s = &slots[k];
	void *p = NULL;

	if (op < 8 && op != 2 && s->p)
		release(k);
	switch (op) {
	case 0:
		p = uslub_malloc(size);
		break;
	case 1:
		p = uslub_calloc(1 + (sel >> 6), size);
		if (p)
			for (size_t i = 0; i < size * (1 + (sel >> 6)) && i < 65536; i++)
				REQUIRE(((unsigned char *)p)[i] == 0);
		size *= 1 + (sel >> 6);
		break;
	case 2: {
		size_t old = s->size;
		check_slot(s);
		p = uslub_realloc(s->p, size);
		if (s->p && size == 0) {
			s->p = NULL; /* glibc's realloc(p, 0): freed, NULL back */
			REQUIRE(p == NULL);
			return;
		}
		REQUIRE(p != NULL);
		if (s->p) {
			/* The kept bytes are the old block's. */
			struct slot moved = *s;
			moved.p = p;
			verify(&moved, old < size ? old : size);
		}
		align = 16;
		break;
	}
	case 3:
		align = (size_t)8 << (sel % 14);
		REQUIRE(uslub_posix_memalign(&p, align, size) == 0);
		break;
	case 4:
		align = (size_t)1 << (sel % 17);
		p = uslub_aligned_alloc(align, size);
		break;
	case 5: {
		/* Any alignment: one that is not a power of two is rounded up to one. */
		size_t a = 1 + (size_t)(v >> 4) % 9000;
		align = 1;
		while (align < a)
			align <<= 1;
		p = uslub_memalign(a, size);
		break;
	}
	case 6:
		align = 4096;
		p = uslub_valloc(size);
		break;
	case 7:
		align = 4096;
		p = uslub_pvalloc(size);
		if (p)
			REQUIRE(uslub_malloc_usable_size(p) >= ((size + 4095) & ~(size_t)4095));
		break;
	case 8:
		if (s->p)
			release(k);
		return;
	case 9:
		if (s->p) {
			/* Bytes up to the usable size are the program's to write. */
			size_t usable = uslub_malloc_usable_size(s->p);
			REQUIRE(usable >= s->size);
			size_t end = usable - s->size > 65536 ? s->size + 65536 : usable;
			memset(s->p + s->size, 0xa5, end - s->size);
			check_slot(s);
		}
		return;
	case 10:
		if (s->p) {
			check_slot(s);
			on_helper(DO_FREE, s->p, 0); /* freed from another thread */
			s->p = NULL;
		} else {
			p = on_helper(DO_MALLOC, NULL, size); /* made there, freed here later */
			align = 16;
			break;
		}
		return;
	case 11:
		uslub_malloc_trim(sel & 1 ? 0 : (size_t)v << 12);
		return;
	default:
		if (s->p && sel % 3 == 0)
			inject_double_free(k, v % NSLOTS);
		return;
	}
	REQUIRE(p != NULL); /* nothing asked for here is beyond memory */
	if (align < 16 && size > 8)
		align = 16; /* malloc's own promise */
	s->p = p;
	s->size = size;
	s->align = align;
	s->seed = (uint8_t)(seq * 13 + k);
	check_disjoint(k);
	fill(s);
	check_slot(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct input in = {data, len, 0};
	uint8_t seq = 0;
	while (in.pos < in.len)
		step(&in, seq++);
	for (unsigned k = 0; k < NSLOTS; k++)
		if (slots[k].p)
			release(k);
	struct uslub_check c;
	REQUIRE(uslub_check_heap(&c, 2) == 0);
	REQUIRE(c.live_objects == 0 && c.large_blocks == 0 && c.huge_bytes == 0);
	return 0;
}
