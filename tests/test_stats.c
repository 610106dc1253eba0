/* test_stats.c: the statistics are exact, and the dump appears where it must.
 *
 * Linked with the engine and calling the prefixed API, so glibc's malloc serves libc and
 * every event in uslub's caches is one of this program's: the counters can be compared
 * for equality. tests/test_stats.py runs the modes and reads what they write:
 *
 *   counts TEXT JSON  threads allocate and free known numbers of objects of known classes,
 *                     locally and remotely; checks uslub_cache_info while the threads are
 *                     parked (counters unfolded) and after they exit (folded); writes the
 *                     table to TEXT and the JSON dump to JSON, and the expected figures
 *                     as one JSON line on stdout
 *   exit-thread       a second thread allocates EXIT_OBJECTS of kmalloc-1k and calls
 *                     exit() while main waits in pthread_join (run with USLUB_STATS=json)
 *   fork              allocates, forks while a thread allocates and frees, the child
 *                     allocates more and calls exit(); prints both pids and counts
 *   live SECONDS      (USLUB_STATS=live) creates and destroys threads for SECONDS, then
 *                     keeps LIVE_KEEP objects of kmalloc-256 and waits for a line on
 *                     stdin; prints its figures on stdout as it goes */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "test_util.h"

enum {
	NTHREADS = 4,
	EXIT_OBJECTS = 777,
	LIVE_KEEP = 500,
	CHURN_OBJECTS = 40,
};

static struct uslub_cache_info info(const char *name)
{
	struct uslub_cache_info ci;
	memset(&ci, 0, sizeof(ci));
	CHECKF(uslub_cache_info(name, &ci) == 0, "no cache %s", name);
	return ci;
}

/* ---- counts ----------------------------------------------------------------------- */

/* Thread i: ALLOCS[c] * (i + 1) objects of class c; frees FREES_LOCAL[c] * (i + 1) of
 * them itself, hands FREES_REMOTE[c] * (i + 1) to main, keeps the rest. Requests are
 * REQ[c] bytes, so the sampled mean - and the estimate of bytes requested - is exact. */
static const char *const NAMES[] = {"kmalloc-64", "kmalloc-192", "kmalloc-1k"};
static const size_t REQ[] = {50, 192, 1000};
static const unsigned ALLOCS[] = {1000, 300, 90};
static const unsigned FREES_LOCAL[] = {400, 100, 30};
static const unsigned FREES_REMOTE[] = {100, 50, 30};
#define NCLS 3

struct worker {
	unsigned id;
	void **remote[NCLS];
	unsigned nremote[NCLS];
};

static pthread_barrier_t parked, release;

static void *worker(void *arg)
{
	struct worker *w = arg;
	unsigned k = w->id + 1;
	for (unsigned c = 0; c < NCLS; c++) {
		unsigned n = ALLOCS[c] * k;
		void **p = malloc(n * sizeof(*p)); /* glibc's: not counted */
		for (unsigned i = 0; i < n; i++) {
			p[i] = uslub_malloc(REQ[c]);
			memset(p[i], 1, REQ[c]);
		}
		for (unsigned i = 0; i < FREES_LOCAL[c] * k; i++)
			uslub_free(p[i]);
		w->remote[c] = p + FREES_LOCAL[c] * k;
		w->nremote[c] = FREES_REMOTE[c] * k;
		/* the rest stays allocated, leaked on purpose */
	}
	pthread_barrier_wait(&parked);
	pthread_barrier_wait(&release);
	return NULL;
}

static int mode_counts(const char *text_path, const char *json_path)
{
	tu_section("exact counters: %d threads, 3 classes, local and remote frees", NTHREADS);
	pthread_t tid[NTHREADS];
	struct worker w[NTHREADS];
	uint64_t allocs[NCLS] = {0}, frees[NCLS] = {0};
	pthread_barrier_init(&parked, NULL, NTHREADS + 1);
	pthread_barrier_init(&release, NULL, NTHREADS + 1);
	for (unsigned i = 0; i < NTHREADS; i++) {
		w[i].id = i;
		pthread_create(&tid[i], NULL, worker, &w[i]);
		for (unsigned c = 0; c < NCLS; c++) {
			allocs[c] += ALLOCS[c] * (i + 1);
			frees[c] += FREES_LOCAL[c] * (i + 1);
		}
	}
	pthread_barrier_wait(&parked);
	/* The threads are alive: their counters are only in their own state. */
	for (unsigned c = 0; c < NCLS; c++) {
		struct uslub_cache_info ci = info(NAMES[c]);
		CHECK_EQ(ci.alloc_fastpath + ci.alloc_slowpath, allocs[c]);
		CHECK_EQ(ci.free_fastpath + ci.free_slowpath, frees[c]);
		CHECK_EQ(ci.active_objects, allocs[c] - frees[c]);
	}
	/* Remote frees by main, while the owners still hold their slabs. */
	for (unsigned i = 0; i < NTHREADS; i++)
		for (unsigned c = 0; c < NCLS; c++) {
			for (unsigned j = 0; j < w[i].nremote[c]; j++)
				uslub_free(w[i].remote[c][j]);
			frees[c] += w[i].nremote[c];
		}
	for (unsigned c = 0; c < NCLS; c++) {
		struct uslub_cache_info ci = info(NAMES[c]);
		CHECK_EQ(ci.free_fastpath + ci.free_slowpath, frees[c]);
		CHECKF(ci.free_slowpath >= 1, "%s: remote frees took no slow path", NAMES[c]);
		CHECK_EQ(ci.active_objects, allocs[c] - frees[c]);
	}
	pthread_barrier_wait(&release);
	for (unsigned i = 0; i < NTHREADS; i++)
		pthread_join(tid[i], NULL);

	tu_section("after the threads exit (counters folded) the figures are the same");
	for (unsigned c = 0; c < NCLS; c++) {
		struct uslub_cache_info ci = info(NAMES[c]);
		CHECK_EQ(ci.alloc_fastpath + ci.alloc_slowpath, allocs[c]);
		CHECK_EQ(ci.free_fastpath + ci.free_slowpath, frees[c]);
		CHECK_EQ(ci.active_objects, allocs[c] - frees[c]);
		CHECKF(ci.request_samples > 0, "%s: no request sampled", NAMES[c]);
		CHECK_EQ(ci.requested_bytes, ci.active_objects * REQ[c]);
		uint64_t by_order = 0;
		for (unsigned o = 0; o < 8; o++)
			by_order += ci.slabs_by_order[o];
		CHECK_EQ(by_order, ci.slabs);
		CHECKF(ci.total_objects >= ci.active_objects,
		       "%s: total %" PRIu64 " < active %" PRIu64, NAMES[c], ci.total_objects,
		       ci.active_objects);
	}
	struct uslub_totals t;
	uslub_get_totals(&t);
	uint64_t in_use = 0;
	for (unsigned c = 0; c < NCLS; c++)
		in_use += (allocs[c] - frees[c]) * info(NAMES[c]).object_size;
	CHECK_EQ(t.in_use, in_use);
	CHECKF(t.slabs >= in_use && t.mapped >= t.slabs, "slabs %" PRIu64 ", mapped %" PRIu64,
	       t.slabs, t.mapped);

	/* Both dumps of the same state: nothing is allocated in between. */
	int fd = open(text_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int fj = open(json_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && fj >= 0);
	uslub_stats_print(fd, 0);
	uslub_stats_print(fj, 1);
	close(fd);
	close(fj);
	printf("{");
	for (unsigned c = 0; c < NCLS; c++)
		printf("%s\"%s\": {\"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
		       ", \"active\": %" PRIu64 ", \"requested\": %zu}",
		       c ? ", " : "", NAMES[c], allocs[c], frees[c], allocs[c] - frees[c],
		       (size_t)(allocs[c] - frees[c]) * REQ[c]);
	printf("}\n");
	return tu_summary("stats-counts") ? 1 : 0;
}

/* ---- exit from a second thread ------------------------------------------------------ */

static void *exiter(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < EXIT_OBJECTS; i++)
		(void)tu_opaque(uslub_malloc(1024));
	exit(0);
}

static int mode_exit_thread(void)
{
	pthread_t t;
	pthread_create(&t, NULL, exiter, NULL);
	pthread_join(t, NULL);
	return 3; /* not reached: the thread's exit() ends the process with 0 */
}

/* ---- fork --------------------------------------------------------------------------- */

static _Atomic int spin_stop;

static void *spinner(void *arg)
{
	(void)arg;
	while (!atomic_load(&spin_stop))
		uslub_free(tu_opaque(uslub_malloc(100)));
	return NULL;
}

static int mode_fork(void)
{
	enum { A = 123, B = 45, C = 67 };
	pthread_t t;
	pthread_create(&t, NULL, spinner, NULL);
	for (unsigned i = 0; i < A; i++)
		(void)tu_opaque(uslub_malloc(192));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		for (unsigned i = 0; i < B; i++)
			(void)tu_opaque(uslub_malloc(192));
		exit(0);
	}
	for (unsigned i = 0; i < C; i++)
		(void)tu_opaque(uslub_malloc(192));
	int status = -1;
	waitpid(pid, &status, 0);
	atomic_store(&spin_stop, 1);
	pthread_join(t, NULL);
	printf("{\"parent\": %d, \"child\": %d, \"child_status\": %d, \"parent_active\": %d, "
	       "\"child_active\": %d}\n",
	       (int)getpid(), (int)pid, status, A + C, A + B);
	return 0;
}

/* ---- live --------------------------------------------------------------------------- */

static void *churner(void *arg)
{
	(void)arg;
	void *p[CHURN_OBJECTS];
	for (unsigned i = 0; i < CHURN_OBJECTS; i++)
		p[i] = uslub_malloc(96);
	for (unsigned i = 0; i < CHURN_OBJECTS; i++)
		uslub_free(p[i]);
	struct timespec ts = {0, 2 * 1000 * 1000};
	nanosleep(&ts, NULL);
	return NULL;
}

static int mode_live(double seconds)
{
	printf("{\"pid\": %d}\n", (int)getpid());
	fflush(stdout);
	uint64_t threads = 0;
	double end = tu_now() + seconds;
	while (tu_now() < end) {
		pthread_t t[8];
		for (unsigned i = 0; i < 8; i++)
			pthread_create(&t[i], NULL, churner, NULL);
		for (unsigned i = 0; i < 8; i++)
			pthread_join(t[i], NULL);
		threads += 8;
	}
	for (unsigned i = 0; i < LIVE_KEEP; i++)
		(void)tu_opaque(uslub_malloc(256));
	printf("{\"ready\": true, \"churn_threads\": %" PRIu64 ", \"kmalloc-96\": %" PRIu64
	       ", \"kmalloc-256\": %d}\n",
	       threads, threads * CHURN_OBJECTS, LIVE_KEEP);
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 4 && strcmp(argv[1], "counts") == 0)
		return mode_counts(argv[2], argv[3]);
	if (argc >= 2 && strcmp(argv[1], "exit-thread") == 0)
		return mode_exit_thread();
	if (argc >= 2 && strcmp(argv[1], "fork") == 0)
		return mode_fork();
	if (argc >= 3 && strcmp(argv[1], "live") == 0)
		return mode_live(atof(argv[2]));
	fprintf(stderr, "usage: %s counts TEXT JSON | exit-thread | fork | live SECONDS\n",
		argv[0]);
	return 2;
}
