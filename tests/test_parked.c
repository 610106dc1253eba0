/* test_parked: the idle drain takes a parked thread's sheaves (core/thread/thread.c, "a
 * parked thread's sheaves"), and a thread that wakes finds its blocks and its state whole.
 *
 * Preloaded, with the background thread at the shortest period (meson.build):
 *   - Parked: threads fill their small and medium sheaves, keep a few blocks, and wait on
 *     a condition variable; the drain takes every one's sheaves (threads_parked in the
 *     JSON dump goes up by the threads, and the waiting main thread). Woken, they find
 *     their kept blocks as they wrote them, allocate and free again, park again, and are
 *     taken again: the state was published anew.
 *   - Between sleeps: threads replace blocks of 16 B - 128 KiB at random (every block
 *     filled with a pattern of its own and checked before its free) in bursts of fast
 *     paths with sleeps of 0-60 ms between, for RACE_S seconds, while the drain keeps
 *     unpublishing them: no block is handed out twice or written by anyone else, and the
 *     drain took sheaves during the run.
 *   - Stopped by signals: threads replacing blocks are stopped one at a time for 50 ms by
 *     a signal whose handler waits in sigsuspend (a fast path may be half done under it),
 *     for RACE_S seconds: no block lost.
 *
 * Linked (-DUSLUB_PREFIXED), the test calls the drain's looks itself (no background
 * thread) and looks at the states:
 *   - a thread parked in read: after the looks its sheaves are empty, its state
 *     unpublished; woken, it publishes it again and allocates;
 *   - a thread blocked in a call the allocator made (uslub_rcu_barrier into an RCU
 *     flavour that waits on a pipe): its sheaves stay;
 *   - a thread stopped by a signal whose handler waits in sigsuspend, as a garbage
 *     collector stops threads: linked, "our code" is the whole program, so the frame of
 *     the interrupted code is always ours and the sheaves stay. */
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#ifdef USLUB_PREFIXED
#include "thread/thread.h"
#endif
#if defined(__SANITIZE_THREAD__)
#define TSAN_BUILD 1
#else
#define TSAN_BUILD 0
#endif

#define THREADS 4
#define KEPT	8
#define RACE_S	3
#define SLOTS	48

#ifdef USLUB_PREFIXED
static void *(*volatile do_malloc)(size_t) = uslub_malloc;
static void (*volatile do_free)(void *) = uslub_free;
#else
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
#endif

#ifndef USLUB_PREFIXED
/* ---- threads_parked from the JSON dump ---------------------------------------------- */

typedef void (*stats_print_fn)(int fd, int json);
static char dump[1 << 20];

static long threads_parked(void)
{
	void *sym = dlsym(RTLD_DEFAULT, "uslub_stats_print");
	stats_print_fn print = NULL;
	memcpy(&print, &sym, sizeof(print));
	FILE *f = tmpfile();
	if (!print || !f) {
		if (f)
			fclose(f);
		return -1;
	}
	print(fileno(f), 1);
	rewind(f);
	size_t len = fread(dump, 1, sizeof(dump) - 1, f);
	fclose(f);
	dump[len] = '\0';
	const char *k = strstr(dump, "\"threads_parked\":");
	return k ? strtol(k + strlen("\"threads_parked\":"), NULL, 10) : -1;
}

/* Waits up to `seconds` for the count to reach `want`; returns what it last read. */
static long wait_parked(long want, double seconds)
{
	long n = threads_parked();
	for (int i = 0; n < want && i < seconds * 50; i++) {
		usleep(20000);
		n = threads_parked();
	}
	return n;
}

#endif

/* ---- patterns ------------------------------------------------------------------------ */

/* The first and the last 64 bytes of a block (all of a small one), by position and tag. */
static unsigned char pattern(size_t i, unsigned tag)
{
	return (unsigned char)(i < 64 ? tag + i : tag ^ i);
}

static size_t tail_start(size_t size)
{
	return size < 128 ? 64 : size - 64;
}

static void fill(unsigned char *p, size_t size, unsigned tag)
{
	for (size_t i = 0; i < size && i < 64; i++)
		p[i] = pattern(i, tag);
	for (size_t i = tail_start(size); i < size; i++)
		p[i] = pattern(i, tag);
}

static int intact(const unsigned char *p, size_t size, unsigned tag)
{
	for (size_t i = 0; i < size && i < 64; i++)
		if (p[i] != pattern(i, tag))
			return 0;
	for (size_t i = tail_start(size); i < size; i++)
		if (p[i] != pattern(i, tag))
			return 0;
	return 1;
}

static atomic_uint bad;

/* Fills the sheaves: blocks of several small sizes and of 16-64 KiB freed after use. */
static void churn(unsigned tag)
{
	void *p[64];
	for (unsigned i = 0; i < 64; i++) {
		size_t size = i % 2 ? 16384 + (i % 7) * 8192 : 32 + i * 24;
		p[i] = do_malloc(size);
		if (!p[i]) {
			atomic_fetch_add(&bad, 1);
			continue;
		}
		fill(p[i], size, tag + i);
		if (!intact(p[i], size, tag + i))
			atomic_fetch_add(&bad, 1);
	}
	for (unsigned i = 0; i < 64; i++)
		do_free(p[i]);
}

#ifndef USLUB_PREFIXED
/* ---- parked -------------------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned parked, round_no;

static void park(unsigned round)
{
	pthread_mutex_lock(&lock);
	parked++;
	pthread_cond_broadcast(&cv);
	while (round_no < round)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
}

static void *parked_worker(void *arg)
{
	unsigned tag = (unsigned)(uintptr_t)arg * 37;
	unsigned char *kept[KEPT];
	size_t kept_size[KEPT];
	for (unsigned i = 0; i < KEPT; i++) {
		kept_size[i] = i % 2 ? 20000 + i * 3000 : 40 + i * 100;
		kept[i] = do_malloc(kept_size[i]);
		if (kept[i])
			fill(kept[i], kept_size[i], tag + i);
	}
	for (unsigned round = 1; round <= 2; round++) {
		churn(tag);
		park(round);
		for (unsigned i = 0; i < KEPT; i++)
			if (!kept[i] || !intact(kept[i], kept_size[i], tag + i))
				atomic_fetch_add(&bad, 1);
	}
	churn(tag + 1);
	for (unsigned i = 0; i < KEPT; i++)
		do_free(kept[i]);
	return NULL;
}

static void wait_all_parked(unsigned want)
{
	pthread_mutex_lock(&lock);
	while (parked < want)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
}

static void wake(unsigned round)
{
	pthread_mutex_lock(&lock);
	round_no = round;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
}

static void parked_threads(void)
{
	tu_section("%d parked threads' sheaves are taken, and again after they run", THREADS);
	pthread_t t[THREADS];
	long before = threads_parked();
	CHECKF(before >= 0, "threads_parked is in the JSON dump");
	for (unsigned i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, parked_worker, (void *)(uintptr_t)(i + 1));
	wait_all_parked(THREADS);
	/* The main thread, waiting too, is taken as well whenever it parks between looks. */
	long first = wait_parked(before + THREADS, 10);
	CHECKF(first >= before + THREADS, "every parked thread's sheaves taken: %ld, want %ld",
	       first - before, (long)THREADS);
	wake(1);
	wait_all_parked(2 * THREADS);
	long second = wait_parked(first + THREADS, 10);
	CHECKF(second >= first + THREADS,
	       "woken, they ran on a state published again and were taken again: %ld, want %ld",
	       second - first, (long)THREADS);
	wake(2);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECKF(atomic_load(&bad) == 0, "%u blocks lost their contents or were not given",
	       atomic_load(&bad));
	printf("    taken %ld times\n", second - before);
}

/* ---- between sleeps -------------------------------------------------------------------- */

static atomic_int racing;

static uint64_t next_random(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A thread's blocks: SLOTS places, each empty or holding a block of `size` bytes filled
 * with the pattern of `tag`. */
struct slots {
	unsigned char *p[SLOTS];
	size_t size[SLOTS];
	unsigned tag[SLOTS];
	uint64_t rng;
};

/* One step at a random place: its block checked and freed, or a new one of 16 B - 2 KiB
 * (three in four) or 8-128 KiB allocated and filled. */
static void replace_one(struct slots *s)
{
	unsigned i = (unsigned)(next_random(&s->rng) % SLOTS);
	if (s->p[i]) {
		if (!intact(s->p[i], s->size[i], s->tag[i]))
			atomic_fetch_add(&bad, 1);
		do_free(s->p[i]);
		s->p[i] = NULL;
		return;
	}
	uint64_t r = next_random(&s->rng);
	s->size[i] = r % 4 ? 16 + r % 2048 : 8193 + r % (120 << 10);
	s->tag[i] = (unsigned)(r >> 32);
	if ((s->p[i] = do_malloc(s->size[i])) == NULL) {
		atomic_fetch_add(&bad, 1);
		return;
	}
	fill(s->p[i], s->size[i], s->tag[i]);
}

static void free_all(struct slots *s)
{
	for (unsigned i = 0; i < SLOTS; i++)
		if (s->p[i]) {
			if (!intact(s->p[i], s->size[i], s->tag[i]))
				atomic_fetch_add(&bad, 1);
			do_free(s->p[i]);
		}
}

static void *race_worker(void *arg)
{
	struct slots s = {.rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1)};
	unsigned long ops = 0;
	while (atomic_load(&racing)) {
		unsigned burst = (unsigned)(next_random(&s.rng) % 3000);
		for (unsigned k = 0; k < burst; k++, ops++)
			replace_one(&s);
		unsigned nap = (unsigned)(next_random(&s.rng) % 8);
		usleep(nap < 2 ? 0 : nap < 7 ? 5000 * nap : 60000);
	}
	free_all(&s);
	return (void *)(uintptr_t)ops;
}

static void between_sleeps(void)
{
	tu_section(
	    "%d threads replace blocks between sleeps for %d s while the drain unpublishes them",
	    THREADS, RACE_S);
	atomic_store(&bad, 0);
	atomic_store(&racing, 1);
	long before = threads_parked();
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, race_worker, (void *)(uintptr_t)i);
	sleep(RACE_S);
	atomic_store(&racing, 0);
	unsigned long ops = 0;
	for (unsigned i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		ops += (unsigned long)(uintptr_t)r;
	}
	long taken = threads_parked() - before;
	CHECKF(atomic_load(&bad) == 0, "%u blocks lost their contents or were not given",
	       atomic_load(&bad));
	CHECKF(taken > 0, "the drain took sheaves during the run (%ld times)", taken);
	printf("    %lu replacements, sheaves taken %ld times\n", ops, taken);
}

/* ---- stopped by signals ----------------------------------------------------------------- */

/* A collector's stop: the handler waits in sigsuspend until the resume signal, with
 * whatever the thread was doing - often a fast path of malloc or free - half done under
 * it. The drain must leave such a thread's sheaves. */
static sigset_t stop_mask;
static __thread volatile sig_atomic_t stop_over;

static void stop_handler(int sig)
{
	(void)sig;
	stop_over = 0;
	while (!stop_over)
		sigsuspend(&stop_mask);
}

static void resume_handler(int sig)
{
	(void)sig;
	stop_over = 1;
}

static void *stopped_worker(void *arg)
{
	struct slots s = {.rng = 0x2545f4914f6cdd1dULL * ((uintptr_t)arg + 1)};
	while (atomic_load(&racing))
		replace_one(&s);
	free_all(&s);
	return NULL;
}

static void stopped_by_signals(void)
{
	tu_section("%d threads replacing blocks, stopped by a signal for 50 ms at a time for %d s",
		   THREADS, RACE_S);
	sigfillset(&stop_mask);
	sigdelset(&stop_mask, SIGUSR2);
	struct sigaction stop = {.sa_handler = stop_handler};
	struct sigaction resume = {.sa_handler = resume_handler};
	sigfillset(&stop.sa_mask);
	sigaction(SIGUSR1, &stop, NULL);
	sigaction(SIGUSR2, &resume, NULL);
	atomic_store(&bad, 0);
	atomic_store(&racing, 1);
	long before = threads_parked();
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, stopped_worker, (void *)(uintptr_t)i);
	unsigned stops = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		pthread_t victim = t[stops % THREADS];
		pthread_kill(victim, SIGUSR1);
		usleep(50000);
		pthread_kill(victim, SIGUSR2);
		stops++;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - start.tv_sec < RACE_S);
	atomic_store(&racing, 0);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	long taken = threads_parked() - before;
	CHECKF(atomic_load(&bad) == 0, "%u blocks lost their contents or were not given",
	       atomic_load(&bad));
	printf("    %u stops, sheaves taken %ld times\n", stops, taken);
}

#endif

#ifdef USLUB_PREFIXED
/* ---- the drain's looks, one by one (linked) --------------------------------------------- */

/* Objects and medium blocks in a state's sheaves. */
static unsigned held(const struct uslub_thread *t)
{
	unsigned n = 0;
	for (unsigned i = 0; i < uslub_caches_in_use(); i++)
		n += t->cpu[i].sheaf_count;
	for (unsigned k = 0; k < NR_MSHEAVES; k++)
		n += t->mcpu[k].sheaf_count;
	return n;
}

/* Three looks: active, one idle period, idle (drained, sheaves tried). */
static void drain_looks(void)
{
	for (int i = 0; i < 3; i++)
		uslub_threads_drain_idle();
}

enum { HOLD_PARK, HOLD_BARRIER, HOLD_SIGNAL };

struct holder {
	int how;
	struct uslub_thread *state;
	atomic_int phase; /* 1: filled and about to wait; 2: go on; 3: done */
	int pipe[2];
	bool republished;
};

static struct holder *barrier_holder;

static void blocking_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *))
{
	func(head); /* no readers in this test: the grace period is over at once */
}

static void blocking_barrier(void)
{
	char c;
	atomic_store(&barrier_holder->phase, 1);
	while (read(barrier_holder->pipe[0], &c, 1) < 0)
		;
}

static sigset_t wait_mask;
static volatile sig_atomic_t resumed;

static void on_stop(int sig)
{
	(void)sig;
	atomic_store(&barrier_holder->phase, 1);
	while (!resumed)
		sigsuspend(&wait_mask);
}

static void on_resume(int sig)
{
	(void)sig;
	resumed = 1;
}

static void *holder_thread(void *arg)
{
	struct holder *h = arg;
	churn(7);
	h->state = uslub_tls_thread;
	if (h->how == HOLD_BARRIER) {
		uslub_rcu_barrier();
	} else if (h->how == HOLD_SIGNAL) {
		while (atomic_load(&h->phase) < 2)
			churn(9); /* stopped somewhere in here by the signal */
	} else {
		/* Parked for good in one call, not in a loop of short sleeps that a look
		 * could find between two. */
		char c;
		atomic_store(&h->phase, 1);
		while (read(h->pipe[0], &c, 1) < 0)
			;
	}
	churn(11);
	h->republished = uslub_tls_thread == h->state && !h->state->parked;
	atomic_store(&h->phase, 3);
	return NULL;
}

static void wait_phase(struct holder *h, int phase)
{
	while (atomic_load(&h->phase) < phase)
		usleep(1000);
	usleep(20000); /* into its system call */
}

static void looks_one_by_one(void)
{
	tu_section("the drain's looks: a parked thread's sheaves go, one blocked in our call or "
		   "stopped by a signal keep theirs");
	struct holder h = {.how = HOLD_PARK};
	pthread_t t;
	unsigned long taken = uslub_threads_parked;

	CHECK(pipe(h.pipe) == 0);
	pthread_create(&t, NULL, holder_thread, &h);
	wait_phase(&h, 1);
	if (!held(h.state) || TSAN_BUILD) {
		/* ASan makes every cache a debug cache, which has no sheaves; under
		 * ThreadSanitizer the drain leaves them (thread.c). */
		printf("    no sheaves to take in this build: skipped\n");
		CHECK(write(h.pipe[1], "x", 1) == 1);
		pthread_join(t, NULL);
		return;
	}
	drain_looks();
	CHECKF(held(h.state) == 0, "parked in read: its sheaves taken (%u left)", held(h.state));
	CHECKF(h.state->parked, "... and its state unpublished");
	/* Its medium sheaves (blocks of 16-64 KiB, churn) are flushed: it no longer takes a
	 * share of their bound (medium_sheaf.c, msheaf_user). */
	CHECKF(!atomic_load(&h.state->medium_user), "... and no longer a medium sheaves' user");
	CHECK_EQ(uslub_threads_parked, taken + 1);
	CHECK(write(h.pipe[1], "x", 1) == 1);
	pthread_join(t, NULL);
	close(h.pipe[0]);
	close(h.pipe[1]);
	CHECKF(h.republished, "woken, it published its state again");

	h = (struct holder){.how = HOLD_BARRIER};
	barrier_holder = &h;
	CHECK(pipe(h.pipe) == 0);
	uslub_set_rcu(blocking_call_rcu, blocking_barrier);
	pthread_create(&t, NULL, holder_thread, &h);
	wait_phase(&h, 1);
	unsigned before = held(h.state);
	drain_looks();
	drain_looks();
	CHECKF(held(h.state) == before && before > 0 && !h.state->parked,
	       "blocked in uslub_rcu_barrier's call out: its sheaves stay (%u of %u)",
	       held(h.state), before);
	CHECK_EQ(uslub_threads_parked, taken + 1);
	CHECK(write(h.pipe[1], "x", 1) == 1);
	pthread_join(t, NULL);
	close(h.pipe[0]);
	close(h.pipe[1]);

	h = (struct holder){.how = HOLD_SIGNAL};
	barrier_holder = &h;
	sigfillset(&wait_mask);
	sigdelset(&wait_mask, SIGUSR2);
	struct sigaction stop = {.sa_handler = on_stop}, resume = {.sa_handler = on_resume};
	sigaction(SIGUSR1, &stop, NULL);
	sigaction(SIGUSR2, &resume, NULL);
	resumed = 0;
	pthread_create(&t, NULL, holder_thread, &h);
	usleep(20000);
	pthread_kill(t, SIGUSR1);
	wait_phase(&h, 1);
	before = held(h.state);
	drain_looks();
	drain_looks();
	CHECKF(held(h.state) == before && !h.state->parked,
	       "stopped by a signal inside the program (ours, linked): its sheaves stay (%u of %u)",
	       held(h.state), before);
	CHECK_EQ(uslub_threads_parked, taken + 1);
	atomic_store(&h.phase, 2);
	pthread_kill(t, SIGUSR2);
	pthread_join(t, NULL);
	CHECKF(atomic_load(&bad) == 0, "%u blocks lost their contents", atomic_load(&bad));
}
#endif

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	(void)argc;
	printf("test_parked (%s)\n", VARIANT);
#ifdef USLUB_PREFIXED
	looks_one_by_one();
#else
	parked_threads();
	between_sleeps();
	stopped_by_signals();
#endif
	return tu_summary("test_parked");
}
