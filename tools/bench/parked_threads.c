/* parked_threads: what each thread of a program costs in resident memory when it holds a
 * few small blocks and waits (issue 13, "each thread costs a slab per cache").
 *
 * N threads (default 500, argv[1]) each allocate a dozen blocks of different sizes from
 * 16 B to 2 KiB, write every byte of them, and park on a condition variable. The main
 * thread reads the resident set size (/proc/self/statm) before it starts any thread and
 * again once all are parked, then wakes them; each checks its blocks, frees them and
 * exits. The figure includes each thread's stack and the C library's per-thread state, as
 * a program would see it; run it under each allocator with LD_PRELOAD.
 *
 * Output: one line, "threads N before_kib N parked_kib N per_thread_kib N". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rss.h"

#define BLOCKS 12

static const size_t sizes[BLOCKS] = {16, 24, 48, 64, 96, 128, 200, 256, 512, 768, 1024, 2048};

/* Through volatile pointers: the compiler may not drop or merge the calls. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static unsigned parked;
static int wake;

static void *worker(void *arg)
{
	unsigned char tag = (unsigned char)(uintptr_t)arg;
	unsigned char *p[BLOCKS];
	for (unsigned i = 0; i < BLOCKS; i++) {
		p[i] = do_malloc(sizes[i]);
		if (p[i] == NULL) {
			fprintf(stderr, "malloc(%zu) failed\n", sizes[i]);
			exit(1);
		}
		memset(p[i], tag + i, sizes[i]);
	}
	pthread_mutex_lock(&lock);
	parked++;
	pthread_cond_signal(&parked_cv);
	while (!wake)
		pthread_cond_wait(&wake_cv, &lock);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < BLOCKS; i++) {
		if (p[i][0] != (unsigned char)(tag + i) ||
		    p[i][sizes[i] - 1] != (unsigned char)(tag + i)) {
			fprintf(stderr, "block %u of a thread was overwritten\n", i);
			exit(1);
		}
		do_free(p[i]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 500;
	if (n == 0) {
		fprintf(stderr, "usage: %s [threads]\n", argv[0]);
		return 2;
	}
	pthread_t *tids = calloc(n, sizeof(*tids));
	if (tids == NULL)
		return 1;
	long before = rss_kib();
	for (unsigned i = 0; i < n; i++) {
		int err = pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
		if (err) {
			fprintf(stderr, "pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	pthread_mutex_lock(&lock);
	while (parked < n)
		pthread_cond_wait(&parked_cv, &lock);
	pthread_mutex_unlock(&lock);
	long after = rss_kib();
	pthread_mutex_lock(&lock);
	wake = 1;
	pthread_cond_broadcast(&wake_cv);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	printf("threads %u before_kib %ld parked_kib %ld per_thread_kib %.1f\n", n, before, after,
	       (double)(after - before) / n);
	return 0;
}
