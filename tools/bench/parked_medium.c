/* parked_medium: what threads that used medium blocks keep once they park (issue 24,
 * "memory held by those caches ... returned when the thread idles").
 *
 * N threads (default 8, argv[1]) each allocate and free, four times over, 64 blocks of
 * 16-72 KiB and 64 small ones - so their sheaves and caches fill - and then wait on a
 * condition variable. The main thread reads the resident set size (/proc/self/statm)
 * before it starts them, 0.3 s after they started, and 2 s later; then wakes them, and
 * each allocates and frees once more. Run it under each allocator with LD_PRELOAD; for
 * uslub, USLUB_BACKGROUND=1 USLUB_DECAY_MS=400 makes the idle drain's period 50 ms.
 *
 * Output: one line, "threads N before_kib N parked_kib N after_2s_kib N". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rss.h"

/* Through volatile pointers: the compiler may not drop or merge the calls. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int wake;

static void churn(void)
{
	void *p[64];
	for (int i = 0; i < 64; i++) {
		p[i] = do_malloc(16384 + (i % 8) * 8192);
		if (p[i] == NULL)
			exit(1);
		memset(p[i], i, 16384);
	}
	for (int i = 0; i < 64; i++)
		do_free(p[i]);
	for (int i = 0; i < 64; i++)
		if ((p[i] = do_malloc(64 + i * 16)) == NULL)
			exit(1);
	for (int i = 0; i < 64; i++)
		do_free(p[i]);
}

static void *worker(void *arg)
{
	(void)arg;
	for (int r = 0; r < 4; r++)
		churn();
	pthread_mutex_lock(&lock);
	while (!wake)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
	churn();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8;
	if (n < 1 || n > 1024)
		n = 8;
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	long before = rss_kib();
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, NULL) != 0)
			return 1;
	usleep(300000);
	long parked = rss_kib();
	sleep(2);
	long later = rss_kib();
	pthread_mutex_lock(&lock);
	wake = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
	printf("threads %d before_kib %ld parked_kib %ld after_2s_kib %ld\n", n, before, parked,
	       later);
	return 0;
}
