/* test_thread_exit.c: a thread's state is released whenever in its life it was made.
 *
 *   test_thread_exit [THREADS]   (default 10,000)
 *
 * 1. Normal exit: threads allocate over the size classes (slab objects, a cached large
 *    block, objects of other threads' slabs in their sheaves), hand a few objects to the
 *    main thread and exit. Right after the joins the registry is back where it was (the
 *    key destructor tore each state down) and, once main freed the handed objects, the
 *    heap walker finds no live object.
 * 2. First allocation in the second round of key destructors: the state made there
 *    re-arms uslub's key, so its destructor runs in the third round; the registry is back
 *    right after the joins, as in 1.
 * 3. First allocation in the last (fourth) round of key destructors - the test's own key
 *    re-sets itself three times - where no destructor of uslub's can run any more. THREADS
 *    threads, eight at a time, each leaving a cached large block, a sheaf, slabs and page
 *    caches in its state and handing one object to main. Memory taken from the OS
 *    (uslub_get_totals' mapped) may not grow by more than MAX_GROWTH_MIB over the run, and
 *    after malloc_trim the registry holds no state of a thread that is gone.
 *
 * Linked (uslub_ names), it also sees the engine: each thread's first allocation is
 * checked to have made its state in the round it should, exactly the late states are
 * counted as reaped, the heap walker (core/debug/check.c) runs at the end, and 4. below
 * runs. Both ways 5. runs first: three rounds of eight threads, each round's states on the
 * pages the round before left, may grow the process by 40 pages at most - a state made on
 * warm pages is cleared without writing the pages still zero (page/zero.c).
 * Preloaded it checks the totals. Without uslub (run it plainly) it prints the resident-set growth
 * under glibc, for comparison. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "test_util.h"

#ifdef USLUB_PREFIXED
#include <urcu/urcu-bp.h>
#endif

#ifdef USLUB_PREFIXED
#include "debug/check.h"
#include "thread/thread.h"
#endif

enum {
	BATCH = 8,
	NORMAL_THREADS = 256,
	ROUND2_THREADS = 256,
	MAX_GROWTH_MIB = 16,
	LARGE_SIZE = 40 << 10, /* a large block: its thread caches it when freed */
};

static const size_t sizes[] = {16, 24, 100, 256, 700, 1500, 5000, 8192};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

struct job {
	pthread_t thread;
	unsigned first_round; /* destructor round of the first allocation; 0: thread body */
	unsigned rounds;      /* destructor rounds seen */
	unsigned long index;
	int made_state; /* linked: the first allocation made a live state */
	int failed;
	void *handed;
};

static pthread_key_t test_key;
static __thread struct job *my_job;
static _Atomic unsigned long bad_patterns;

/* 5. Threads made in rounds, eight at a time: each round's states lie on the pages the
 * round before left, and the pages no thread wrote stay untouched (page/zero.c). Compared
 * by resident memory: a page the allocator only read maps the kernel's zero page, which
 * mincore would count as resident. */
enum { STATE_THREADS = 8 };
static pthread_barrier_t state_barrier;

static void *state_probe(void *arg)
{
	(void)arg;
	void *p = MALLOC(24);
	pthread_barrier_wait(&state_barrier); /* all eight states live at once */
	FREE(p);
	return NULL;
}

static void state_round(void)
{
	pthread_t th[STATE_THREADS];
	pthread_barrier_init(&state_barrier, NULL, STATE_THREADS);
	for (int i = 0; i < STATE_THREADS; i++)
		if (pthread_create(&th[i], NULL, state_probe, NULL) != 0)
			abort();
	for (int i = 0; i < STATE_THREADS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&state_barrier);
}

/* First of all the sections, so the states' blocks are the only ones that come and go. */
static void state_pages_test(int have_uslub)
{
	state_round(); /* the stacks glibc keeps, the first states' cold pages */
	size_t before = tu_rss_bytes();
	for (int round = 1; round < 4; round++)
		state_round();
	size_t after = tu_rss_bytes();
	unsigned grown = (unsigned)(after > before ? (after - before) / 4096 : 0);
	printf("    grown by %u pages\n", grown);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* The sanitizer's shadow of each new thread's stack grows the process too (64
	 * pages under ASan): not a figure of the states. */
	have_uslub = 0;
#endif
	/* 16-24 pages here, 0-16 under glibc; 74 when each reused state was cleared with a
	 * memset, which made all its pages resident. */
	if (have_uslub)
		CHECKF(
		    grown <= 5 * STATE_THREADS,
		    "3 rounds of %d threads on the pages of the round before grew the process by "
		    "%u pages",
		    STATE_THREADS, grown);
}

#ifdef USLUB_PREFIXED
static int state_is(int state)
{
	return uslub_tls_thread->state == state;
}

/* 4. A forked child's state is its own: made by a thread that then exits in the parent,
 * it is not taken for that thread's and torn down under the child, which goes on
 * allocating, sweeps (malloc_trim) and walks its heap. */
struct fork_job {
	int pipe[2];
	pid_t child, tid;
};

static void *forking_thread(void *arg)
{
	struct fork_job *job = arg;
	FREE(MALLOC(32));
	job->tid = gettid();
	job->child = fork();
	if (job->child != 0)
		return NULL;
	char go;
	if (read(job->pipe[0], &go, 1) != 1)
		_exit(2);
	unsigned long reaped = atomic_load(&uslub_threads_reaped);
	MALLOC_TRIM(0);
	int ok = state_is(THREAD_LIVE) && atomic_load(&uslub_threads_reaped) == reaped;
	void *p = MALLOC(100);
	FREE(p);
	struct uslub_check c;
	ok = ok && p && uslub_check_heap(&c, 2) == 0 && state_is(THREAD_LIVE);
	_exit(ok ? 0 : 1);
}

static void fork_test(void)
{
	struct fork_job job;
	memset(&job, 0, sizeof(job));
	CHECK_EQ(pipe(job.pipe), 0);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, forking_thread, &job), 0);
	pthread_join(t, NULL);
	CHECK(job.child > 0);
	/* Until the kernel has let the forking thread go (tgkill's ESRCH, as the sweep sees). */
	for (int tries = 0; tries < 1000 && tgkill(getpid(), job.tid, 0) == 0; tries++) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	CHECK_EQ(write(job.pipe[1], "g", 1), 1);
	int status = 0;
	CHECK_EQ(waitpid(job.child, &status, 0), job.child);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child: status %#x (exit 1: its state was torn down or its heap is wrong)", status);
	close(job.pipe[0]);
	close(job.pipe[1]);
}
#endif

/* The allocations of one thread's life: every size class group, a large block freed
 * into the thread's cache, and one object handed on. Each block is filled and checked. */
static void work(struct job *job)
{
	void *keep[NSIZES];
	for (unsigned i = 0; i < NSIZES; i++) {
		keep[i] = MALLOC(sizes[i]);
		if (!keep[i]) {
			job->failed = 1;
			continue;
		}
		tu_fill(keep[i], 0, sizes[i], job->index + i);
	}
	void *large = MALLOC(LARGE_SIZE);
	if (large) {
		tu_fill(large, 0, LARGE_SIZE, job->index);
		if (tu_verify(large, LARGE_SIZE, job->index) != (size_t)-1)
			atomic_fetch_add(&bad_patterns, 1);
		FREE(large);
	} else {
		job->failed = 1;
	}
	for (unsigned i = 0; i < NSIZES; i++) {
		if (!keep[i])
			continue;
		if (tu_verify(keep[i], sizes[i], job->index + i) != (size_t)-1)
			atomic_fetch_add(&bad_patterns, 1);
		if (i == 2) {
			job->handed = keep[i];
			continue;
		}
		FREE(keep[i]);
	}
}

/* The test key's destructor: glibc runs it once per round while the value is set again,
 * four rounds at most (PTHREAD_DESTRUCTOR_ITERATIONS). */
static void destructor(void *arg)
{
	struct job *job = my_job;
	unsigned round = (unsigned)(uintptr_t)arg;
	job->rounds = round;
	if (round == job->first_round) {
#ifdef USLUB_PREFIXED
		int was_empty = state_is(THREAD_EMPTY);
#endif
		work(job);
#ifdef USLUB_PREFIXED
		job->made_state = was_empty && state_is(THREAD_LIVE);
#endif
	}
	if (round < 4)
		pthread_setspecific(test_key, (void *)(uintptr_t)(round + 1));
}

static void *thread_main(void *arg)
{
	struct job *job = arg;
	my_job = job;
	pthread_setspecific(test_key, (void *)(uintptr_t)1);
	if (job->first_round == 0) {
#ifdef USLUB_PREFIXED
		int was_empty = state_is(THREAD_EMPTY);
#endif
		work(job);
#ifdef USLUB_PREFIXED
		job->made_state = was_empty && state_is(THREAD_LIVE);
#endif
	}
	return NULL;
}

static struct uslub_totals totals(void)
{
	struct uslub_totals t;
	memset(&t, 0, sizeof(t));
	tu_get_totals_fn fn = tu_totals_fn();
	if (fn)
		fn(&t);
	return t;
}

/* Thread states in the registry (the shared orphan's included); 0 when not linked. */
static uint64_t registry_threads(void)
{
#ifdef USLUB_PREFIXED
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	CHECK_EQ(errors, 0);
	return c.threads;
#else
	return 0;
#endif
}

/* Runs `count` threads, BATCH at a time, whose first allocation is in destructor round
 * `first_round` (0: in the thread's body). Returns the number of threads that saw all
 * they should. */
static unsigned long run_threads(unsigned long count, unsigned first_round)
{
	struct job jobs[BATCH];
	unsigned long ok = 0;
	for (unsigned long done = 0; done < count;) {
		unsigned n = count - done < BATCH ? (unsigned)(count - done) : BATCH;
		for (unsigned j = 0; j < n; j++) {
			memset(&jobs[j], 0, sizeof(jobs[j]));
			jobs[j].first_round = first_round;
			jobs[j].index = done + j;
			if (pthread_create(&jobs[j].thread, NULL, thread_main, &jobs[j]) != 0) {
				CHECKF(0, "pthread_create failed at thread %lu", done + j);
				return ok;
			}
		}
		for (unsigned j = 0; j < n; j++) {
			pthread_join(jobs[j].thread, NULL);
			struct job *job = &jobs[j];
			int good = !job->failed && job->rounds == 4 && job->handed;
#ifdef USLUB_PREFIXED
			good = good && job->made_state;
#endif
			static unsigned reported;
			if (good)
				ok++;
			else if (reported++ < 4)
				CHECKF(
				    0,
				    "thread %lu (first allocation in round %u): rounds %u, failed "
				    "%d, handed %p, made its state %d",
				    done + j, first_round, job->rounds, job->failed, job->handed,
				    job->made_state);
			if (job->handed) {
				if (tu_verify(job->handed, sizes[2], job->index + 2) != (size_t)-1)
					atomic_fetch_add(&bad_patterns, 1);
				FREE(job->handed);
			}
		}
		done += n;
	}
	return ok;
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	unsigned long late = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000;
	int have_uslub = tu_totals_fn() != NULL;
	printf("test_thread_exit (%s): %lu threads allocating first in the last round of key "
	       "destructors%s\n",
	       VARIANT, late, have_uslub ? "" : "; uslub not loaded: figures only");
	/* Created first, so it is one of the keys that never allocate to store a value. */
	if (pthread_key_create(&test_key, destructor) != 0) {
		CHECK(0);
		return tu_summary("test_thread_exit");
	}
	tu_section("a state made on an earlier state's pages leaves their untouched pages so");
	state_pages_test(have_uslub);
	/* The main thread's state exists before any count is taken. */
	FREE(MALLOC(1));

	uint64_t reg0 = registry_threads();
	struct uslub_totals t0 = totals();
	size_t rss0 = tu_rss_bytes();

	tu_section("%d threads exiting normally: registry back right after the joins",
		   NORMAL_THREADS);
	CHECK_EQ(run_threads(NORMAL_THREADS, 0), NORMAL_THREADS);
	CHECK_EQ(registry_threads(), reg0);

	tu_section("%d threads allocating first in destructor round 2: the re-armed key "
		   "tears their state down",
		   ROUND2_THREADS);
	CHECK_EQ(run_threads(ROUND2_THREADS, 2), ROUND2_THREADS);
	CHECK_EQ(registry_threads(), reg0);

	tu_section("%lu threads allocating first in destructor round 4, %d at a time", late, BATCH);
	double start = tu_now();
	CHECK_EQ(run_threads(late, 4), late);
	double secs = tu_now() - start;
	struct uslub_totals t1 = totals();
	size_t rss1 = tu_rss_bytes();
#ifdef USLUB_PREFIXED
	printf("    registry: %lu states; %lu reaped so far\n", (unsigned long)registry_threads(),
	       atomic_load(&uslub_threads_reaped));
#endif
	double growth = ((double)t1.mapped - (double)t0.mapped) / (double)TU_MIB;
	printf("    %.2f s; taken from the OS: %.1f MiB before, %.1f MiB after (%+.1f MiB), "
	       "peak %.1f MiB; resident: %+.1f MiB\n",
	       secs, (double)t0.mapped / (double)TU_MIB, (double)t1.mapped / (double)TU_MIB, growth,
	       (double)t1.peak_mapped / (double)TU_MIB,
	       ((double)rss1 - (double)rss0) / (double)TU_MIB);
	if (have_uslub)
		CHECKF(t1.mapped <= t0.mapped + ((uint64_t)MAX_GROWTH_MIB << 20),
		       "mapped grew by %.1f MiB over %lu late threads (bound %d MiB)", growth, late,
		       MAX_GROWTH_MIB);
	CHECK_EQ(atomic_load(&bad_patterns), 0);

#ifdef USLUB_PREFIXED
	tu_section("after malloc_trim, no state of a gone thread in the registry; heap walker");
	/* A joined thread may linger in the kernel a moment after its join returned; the
	 * sweep skips a thread that still exists, so give it a few tries. */
	uint64_t reg = 0;
	for (int tries = 0; tries < 100; tries++) {
		MALLOC_TRIM(0);
		reg = registry_threads();
		if (reg == reg0 || reg > reg0 + 1000)
			break;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	CHECKF(reg == reg0, "%lu thread states in the registry, %lu before the threads ran",
	       (unsigned long)reg, (unsigned long)reg0);
	/* Exactly the late states were torn down by a sweep; the others by their thread. */
	CHECK_EQ(atomic_load(&uslub_threads_reaped), late);
	struct uslub_check c;
	uint64_t errors = uslub_check_heap(&c, 2);
	uslub_check_print(&c, 1);
	CHECK_EQ(errors, 0);
	CHECK_EQ(c.live_objects, 0);
	CHECK_EQ(c.large_blocks, 0);

	tu_section("a forked child's state outlives the parent's thread that forked it");
	fork_test();

	/* A sweep tears a state down with synchronize_rcu (urcu-bp, the flavour a program may
	 * use too): from inside an urcu-bp read-side section of the caller it would wait for
	 * the caller itself. malloc_trim there must skip the sweep, not hang. */
	tu_section("malloc_trim inside the program's own urcu-bp read-side section returns");
	unsigned long reaped0 = atomic_load(&uslub_threads_reaped);
	run_threads(16, 4); /* their creation sweeps may reap some of them already */
	unsigned long before = atomic_load(&uslub_threads_reaped);
	alarm(20); /* a hang is a failure, not a stuck CI */
	urcu_bp_read_lock();
	MALLOC_TRIM(0);
	urcu_bp_read_unlock();
	alarm(0);
	CHECK_EQ(atomic_load(&uslub_threads_reaped), before);
	/* Outside it the same call reaps them (once their threads are gone from the kernel). */
	for (int tries = 0; tries < 100 && atomic_load(&uslub_threads_reaped) < reaped0 + 16;
	     tries++) {
		MALLOC_TRIM(0);
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	CHECK_EQ(atomic_load(&uslub_threads_reaped), reaped0 + 16);
#endif
	return tu_summary("test_thread_exit");
}
