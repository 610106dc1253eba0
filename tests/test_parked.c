/* test_parked: the idle drain takes a parked thread's sheaves (core/thread/thread.c, "a
 * parked thread's sheaves"), and a thread that wakes finds its blocks and its state whole.
 *
 *   - Parked: threads fill their small and medium sheaves, keep a few blocks, and wait on
 *     a condition variable; the drain takes every one's sheaves (threads_parked in the
 *     JSON dump goes up by the threads, and the waiting main thread). Woken, they find their kept
 * blocks as they wrote them, allocate and free again, park again, and are taken again: the state
 * was published anew.
 *   - Between sleeps: threads replace blocks of 16 B - 128 KiB at random (every block
 *     filled with a pattern of its own and checked before its free) in bursts of fast
 *     paths with sleeps of 0-60 ms between, for RACE_S seconds, while the drain keeps
 *     unpublishing them: no block is handed out twice or written by anyone else, and the
 *     drain took sheaves during the run.
 *
 * Only under LD_PRELOAD: linked into the test, "our code" is the whole program, whose
 * return addresses every stack holds, and the drain rightly takes nothing. Run with the
 * background thread started at once and the shortest period (meson.build). */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS 4
#define KEPT	8
#define RACE_S	3
#define SLOTS	48

static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

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

/* ---- parked -------------------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned parked, round_no;
static atomic_uint bad;

static void park(unsigned round)
{
	pthread_mutex_lock(&lock);
	parked++;
	pthread_cond_broadcast(&cv);
	while (round_no < round)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
}

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

static void *race_worker(void *arg)
{
	uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
	unsigned char *slot[SLOTS] = {0};
	size_t size[SLOTS];
	unsigned tag[SLOTS];
	unsigned long ops = 0;
	while (atomic_load(&racing)) {
		unsigned burst = (unsigned)(next_random(&rng) % 3000);
		for (unsigned k = 0; k < burst; k++, ops++) {
			unsigned i = (unsigned)(next_random(&rng) % SLOTS);
			if (slot[i]) {
				if (!intact(slot[i], size[i], tag[i]))
					atomic_fetch_add(&bad, 1);
				do_free(slot[i]);
				slot[i] = NULL;
				continue;
			}
			uint64_t r = next_random(&rng);
			size[i] = r % 4 ? 16 + r % 2048 : 8193 + r % (120 << 10);
			tag[i] = (unsigned)(r >> 32);
			slot[i] = do_malloc(size[i]);
			if (!slot[i]) {
				atomic_fetch_add(&bad, 1);
				continue;
			}
			fill(slot[i], size[i], tag[i]);
		}
		unsigned nap = (unsigned)(next_random(&rng) % 8);
		usleep(nap < 2 ? 0 : nap < 7 ? 5000 * nap : 60000);
	}
	for (unsigned i = 0; i < SLOTS; i++)
		if (slot[i]) {
			if (!intact(slot[i], size[i], tag[i]))
				atomic_fetch_add(&bad, 1);
			do_free(slot[i]);
		}
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

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	(void)argc;
	printf("test_parked (%s)\n", VARIANT);
	parked_threads();
	between_sleeps();
	return tu_summary("test_parked");
}
