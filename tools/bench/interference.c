/* interference: what a second thread of the same process costs the first. Thread A keeps
 * 1024 blocks of sizes uniform in [A_LO, A_HI] (8200 B - 32 KiB unless given) and
 * replaces a random one per step, writing its first byte; thread B meanwhile spins
 * (`idle`), replaces blocks of [B_LO, B_HI] the same way (`replace`), or writes the first
 * line of random pages of a 24 MiB mapping of its own, allocating nothing (`hog`). Each
 * thread's rate is per second of its own CPU time (CLOCK_THREAD_CPUTIME_ID), so time the
 * host steals from the VM does not count. Two processes of `replace 1` side by side show
 * what the machine shares; A here against A under `idle` shows what the allocator
 * shares between its threads (tools/bench/results/medium-two-threads.md).
 *
 * Usage: interference idle|replace|hog [B_LO B_HI [A_LO A_HI [A_STEPS]]] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { LIVE = 1024, HOG_PAGES = 6144 };
enum mode { IDLE, REPLACE, HOG };

/* Called through volatile pointers: the compiler may not pair malloc with free. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
static _Atomic int stop;

struct worker {
	enum mode mode;
	size_t lo, hi;
	uint64_t steps; /* 0: until A is done */
	uint64_t seed;
	double rate; /* millions of steps a CPU second */
};

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *made(struct worker *w)
{
	size_t n = w->lo + next(&w->seed) % (w->hi - w->lo + 1);
	char *p = do_malloc(n);
	if (!p) {
		fprintf(stderr, "interference: malloc(%zu) failed\n", n);
		exit(1);
	}
	*p = 1;
	return p;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t k = 0;
	if (w->mode == IDLE) {
		while (!atomic_load(&stop))
			;
		return NULL;
	}
	if (w->mode == HOG) {
		size_t len = (size_t)HOG_PAGES << 12;
		char *m =
		    mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			perror("interference: mmap");
			exit(1);
		}
		memset(m, 1, len);
		double t = cpu_seconds();
		for (; !atomic_load(&stop); k++)
			m[(next(&w->seed) % HOG_PAGES) << 12]++;
		w->rate = (double)k / (cpu_seconds() - t) / 1e6;
		munmap(m, len);
		return NULL;
	}
	void *blocks[LIVE];
	for (unsigned i = 0; i < LIVE; i++)
		blocks[i] = made(w);
	double t = cpu_seconds();
	for (; w->steps ? k < w->steps : !atomic_load(&stop); k++) {
		unsigned i = (unsigned)(next(&w->seed) % LIVE);
		do_free(blocks[i]);
		blocks[i] = made(w);
	}
	w->rate = (double)k / (cpu_seconds() - t) / 1e6;
	for (unsigned i = 0; i < LIVE; i++)
		do_free(blocks[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("usage: interference idle|replace|hog [B_LO B_HI [A_LO A_HI [A_STEPS]]]\n",
		      stderr);
		return 2;
	}
	enum mode mode = !strcmp(argv[1], "idle")      ? IDLE
			 : !strcmp(argv[1], "replace") ? REPLACE
			 : !strcmp(argv[1], "hog")     ? HOG
						       : (enum mode) - 1;
	if ((int)mode < 0) {
		fprintf(stderr, "interference: unknown mode '%s'\n", argv[1]);
		return 2;
	}
	struct worker a = {REPLACE, 8200, 32768, 20000000, 0x9e3779b97f4a7c15ULL, 0};
	struct worker b = {mode, 8200, 32768, 0, 0xd1b54a32d192ed03ULL, 0};
	if (argc > 3) {
		b.lo = strtoull(argv[2], NULL, 0);
		b.hi = strtoull(argv[3], NULL, 0);
	}
	if (argc > 5) {
		a.lo = strtoull(argv[4], NULL, 0);
		a.hi = strtoull(argv[5], NULL, 0);
	}
	if (argc > 6)
		a.steps = strtoull(argv[6], NULL, 0);
	if (!a.lo || a.lo > a.hi || !b.lo || b.lo > b.hi || !a.steps) {
		fputs("interference: sizes must be 0 < LO <= HI, steps > 0\n", stderr);
		return 2;
	}
	pthread_t ta, tb;
	if (pthread_create(&tb, NULL, run, &b) || pthread_create(&ta, NULL, run, &a)) {
		fputs("interference: pthread_create failed\n", stderr);
		return 1;
	}
	pthread_join(ta, NULL);
	atomic_store(&stop, 1);
	pthread_join(tb, NULL);
	printf("A %zu-%zu: %.1f M/s; B %s: %.1f M/s (per CPU second of each)\n", a.lo, a.hi, a.rate,
	       argv[1], b.rate);
	return 0;
}
