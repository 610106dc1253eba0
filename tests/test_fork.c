/* test_fork.c: fork() while other threads are inside malloc and free.
 *
 * Four threads allocate, fill, check and free without pause; the main thread forks
 * FORKS times (argv[1], default 200). Each child, born with whatever allocator locks
 * the threads held at that instant:
 *   - checks and frees blocks the parent allocated before the fork, some of them by
 *     the (now absent in the child) worker threads;
 *   - mallocs, fills, checks and frees a few hundred blocks of 16 B .. 4 MiB;
 *   - every tenth child also starts a thread that does the same;
 *   - ends with _exit(0), or for the last few children with exit(0), which runs the
 *     atexit handlers and library destructors.
 * The parent waits for each child with a watchdog: a child (or the parent) stuck for
 * WATCHDOG_S seconds is killed and the test fails with "deadlock". A child reports a bad
 * block with exit status 2. Runs under LD_PRELOAD (standard names). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_util.h"

enum {
	NWORKERS = 4,
	WORKER_SLOTS = 128,
	GIFTS = 8, /* blocks per worker that children free */
	CHILD_BLOCKS = 300,
	EXIT_CHILDREN = 5, /* the last ones leave through exit() */
	WATCHDOG_S = 60,
};

struct block {
	unsigned char *p;
	size_t size;
	uint64_t key;
};

static atomic_int stop;
static atomic_int workers_ready;
static atomic_ulong worker_errors;
static struct block gifts[NWORKERS][GIFTS];
static struct block parent_blocks[64];
static volatile pid_t current_child;

static size_t pick_size(uint64_t *rng)
{
	uint64_t r = tu_rand(rng);
	switch (r & 63) {
	case 0: /* large and huge: 64 KiB .. 4 MiB */
		return 64 * TU_KIB + (size_t)((r >> 8) % (4 * TU_MIB - 64 * TU_KIB));
	case 1:
	case 2:
	case 3:
	case 4:
		return 1 + (size_t)((r >> 8) % (32 * TU_KIB));
	default:
		return 16 + (size_t)((r >> 8) % 1024);
	}
}

static int make_block(struct block *b, size_t size, uint64_t salt)
{
	b->size = size;
	b->p = malloc(size);
	if (b->p == NULL)
		return -1;
	b->key = tu_mix((uint64_t)(uintptr_t)b->p ^ size ^ salt);
	tu_fill(b->p, 0, size, b->key);
	return 0;
}

static int block_ok(const struct block *b)
{
	return tu_verify(b->p, b->size, b->key) == (size_t)-1;
}

static void *worker_main(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t rng = tu_mix(0xf0f0 + (uint64_t)id) | 1;
	struct block slots[WORKER_SLOTS];
	memset(slots, 0, sizeof(slots));

	for (int i = 0; i < GIFTS; i++)
		if (make_block(&gifts[id][i], pick_size(&rng), 0x61f7) != 0)
			atomic_fetch_add(&worker_errors, 1);
	atomic_fetch_add(&workers_ready, 1);

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct block *b = &slots[tu_rand(&rng) % WORKER_SLOTS];
		if (b->p != NULL) {
			if (!block_ok(b))
				atomic_fetch_add(&worker_errors, 1);
			free(b->p);
			b->p = NULL;
		} else if (make_block(b, pick_size(&rng), 0x3a3a) != 0) {
			atomic_fetch_add(&worker_errors, 1);
		}
	}
	for (int i = 0; i < WORKER_SLOTS; i++) {
		if (slots[i].p == NULL)
			continue;
		if (!block_ok(&slots[i]))
			atomic_fetch_add(&worker_errors, 1);
		free(slots[i].p);
	}
	return NULL;
}

/* The child's own work: a few hundred blocks, filled, checked, freed in a shuffled
 * order. Returns the number of bad blocks. */
static int child_work(uint64_t seed)
{
	static struct block blocks[CHILD_BLOCKS];
	uint64_t rng = tu_mix(seed) | 1;
	int bad = 0;
	for (int i = 0; i < CHILD_BLOCKS; i++)
		if (make_block(&blocks[i], pick_size(&rng), seed) != 0)
			bad++;
	for (int i = CHILD_BLOCKS - 1; i > 0; i--) {
		int j = (int)(tu_rand(&rng) % (uint64_t)(i + 1));
		struct block t = blocks[i];
		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	for (int i = 0; i < CHILD_BLOCKS; i++) {
		if (blocks[i].p == NULL)
			continue;
		if (!block_ok(&blocks[i]))
			bad++;
		free(blocks[i].p);
	}
	return bad;
}

static void *child_thread_main(void *arg)
{
	return (void *)(intptr_t)child_work((uint64_t)(uintptr_t)arg);
}

/* Returns the number of bad blocks the child found. */
static int run_child(int n)
{
	struct rlimit no_core = {0, 0};
	setrlimit(RLIMIT_CORE, &no_core);
	int bad = 0;

	/* blocks from before the fork: the workers' gifts and the parent's own */
	for (int w = 0; w < NWORKERS; w++)
		for (int i = 0; i < GIFTS; i++) {
			if (gifts[w][i].p == NULL)
				continue;
			if (!block_ok(&gifts[w][i]))
				bad++;
			free(gifts[w][i].p);
		}
	for (size_t i = 0; i < sizeof(parent_blocks) / sizeof(parent_blocks[0]); i++) {
		if (parent_blocks[i].p == NULL)
			continue;
		if (!block_ok(&parent_blocks[i]))
			bad++;
		free(parent_blocks[i].p);
	}

	bad += child_work(0xc41d + (uint64_t)n);

	if (n % 10 == 0) {
		pthread_t t;
		void *res = NULL;
		if (pthread_create(&t, NULL, child_thread_main, (void *)(uintptr_t)(n + 77)) != 0)
			bad++;
		else if (pthread_join(t, &res) != 0)
			bad++;
		else
			bad += (int)(intptr_t)res;
	}
	if (bad != 0) {
		char msg[96];
		int len = snprintf(msg, sizeof(msg), "child %d: %d bad blocks\n", n, bad);
		if (len > 0)
			(void)!write(2, msg, (size_t)len);
	}
	return bad;
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL test_fork.c: watchdog: no progress for 60 s: "
				  "deadlock (child killed)\n";
	(void)sig;
	if (current_child > 0)
		kill(current_child, SIGKILL);
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	int forks = argc > 1 ? atoi(argv[1]) : 200;
	if (forks < EXIT_CHILDREN + 1)
		forks = EXIT_CHILDREN + 1;
	printf("test_fork: %d forks while %d threads malloc and free; children check and "
	       "free the parent's blocks, allocate %d blocks of their own, every tenth "
	       "starts a thread, the last %d leave with exit()\n",
	       forks, NWORKERS, CHILD_BLOCKS, EXIT_CHILDREN);
	fflush(stdout);

	CHECKF(tu_totals_fn() != NULL, "uslub_get_totals not found: libuslub.so is not "
				       "preloaded");

	signal(SIGALRM, on_alarm);
	uint64_t rng = 0xfeed;
	for (size_t i = 0; i < sizeof(parent_blocks) / sizeof(parent_blocks[0]); i++)
		CHECK(make_block(&parent_blocks[i], pick_size(&rng), 0x9a9a) == 0);

	pthread_t threads[NWORKERS];
	for (int i = 0; i < NWORKERS; i++)
		CHECK(pthread_create(&threads[i], NULL, worker_main, (void *)(intptr_t)i) == 0);
	while (atomic_load(&workers_ready) < NWORKERS)
		usleep(1000);

	double t0 = tu_now();
	int ok_children = 0;
	for (int n = 0; n < forks; n++) {
		alarm(WATCHDOG_S);
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			CHECKF(pid >= 0, "fork #%d: %s", n, strerror(errno));
			break;
		}
		if (pid == 0) {
			int bad = run_child(n);
			if (n >= forks - EXIT_CHILDREN)
				exit(bad ? 2 : 0);
			_exit(bad ? 2 : 0);
		}
		current_child = pid;
		int status = 0;
		pid_t got;
		do
			got = waitpid(pid, &status, 0);
		while (got < 0 && errno == EINTR);
		current_child = 0;
		CHECKF(got == pid, "waitpid: %s", strerror(errno));
		if (WIFSIGNALED(status))
			CHECKF(0, "child %d killed by signal %d (%s)", n, WTERMSIG(status),
			       strsignal(WTERMSIG(status)));
		else
			CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			       "child %d (%s) exit status %d", n,
			       n >= forks - EXIT_CHILDREN ? "exit()" : "_exit()",
			       WEXITSTATUS(status));
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			ok_children++;

		/* the parent allocates between forks too */
		struct block *b = &parent_blocks[(size_t)n % 64];
		CHECK(block_ok(b));
		free(b->p);
		CHECK(make_block(b, pick_size(&rng), 0x9a9a) == 0);
	}
	alarm(0);
	double elapsed = tu_now() - t0;

	atomic_store(&stop, 1);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(threads[i], NULL);
	for (int w = 0; w < NWORKERS; w++)
		for (int i = 0; i < GIFTS; i++) {
			CHECK(gifts[w][i].p == NULL || block_ok(&gifts[w][i]));
			free(gifts[w][i].p);
		}
	for (size_t i = 0; i < sizeof(parent_blocks) / sizeof(parent_blocks[0]); i++) {
		CHECK(parent_blocks[i].p == NULL || block_ok(&parent_blocks[i]));
		free(parent_blocks[i].p);
	}
	unsigned long werr = atomic_load(&worker_errors);
	CHECKF(werr == 0, "%lu bad blocks or failed mallocs in the parent's workers", werr);
	printf("  %d of %d children exited cleanly in %.2f s (%.1f ms per fork)\n", ok_children,
	       forks, elapsed, elapsed * 1000.0 / forks);
	CHECK_EQ(ok_children, forks);
	return tu_summary("test_fork");
}
