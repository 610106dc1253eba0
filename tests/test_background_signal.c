/* test_background_signal.c: uslub's own threads take no signal meant for the program.
 *
 * Run with USLUB_BACKGROUND=1. The replenisher thread is started from inside whichever
 * malloc comes first - here one made before the program blocks SIGUSR1, as a library
 * constructor's would be. The program then blocks SIGUSR1 in every thread of its own and
 * takes it in a sigwait thread, the usual way to handle signals in a threaded program.
 *
 * 1. The replenisher ("uslub-replenish" in /proc/self/task) exists and its mask
 *    (SigBlk in its status file) blocks SIGUSR1 and the other catchable signals.
 * 2. SIGNALS times: kill(getpid(), SIGUSR1), then wait until the sigwait thread counted
 *    it. Right after it counts one, that thread is busy allocating for a while, so the
 *    next signal finds no program thread able to take it: the kernel keeps it pending
 *    for the next sigwait - or hands it to any thread that has it unblocked, and a
 *    replenisher that did would die of it with the whole process (default action). A
 *    worker allocates meanwhile, so the replenisher has work. Every signal must be
 *    counted by sigwait, and the process must live. Built linked and preloaded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <sys/auxv.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "test_util.h"

enum { SIGNALS = 2000, WAIT_SECONDS = 5 };

static _Atomic unsigned long received;
static _Atomic int stop;
static sigset_t usr1;

/* The tid of the thread named `name` in this process, or 0. */
static long find_thread(const char *name)
{
	DIR *dir = opendir("/proc/self/task");
	if (dir == NULL)
		return 0;
	long found = 0;
	struct dirent *e;
	while (found == 0 && (e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[320], comm[64] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof(comm), f) != NULL) {
			comm[strcspn(comm, "\n")] = '\0';
			if (strcmp(comm, name) == 0)
				found = strtol(e->d_name, NULL, 10);
		}
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* The thread's blocked-signal mask (SigBlk), or 0 when unreadable. */
static uint64_t blocked_mask(long tid)
{
	char path[96], line[128];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	FILE *f = fopen(path, "r");
	uint64_t mask = 0;
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "SigBlk:", 7) == 0)
			mask = strtoull(line + 7, NULL, 16);
	fclose(f);
	return mask;
}

/* Keeps the allocator busy between two sigwaits: the window in which a signal finds no
 * program thread to take it. */
static void busy(uint64_t *rng)
{
	void *p[64];
	for (int i = 0; i < 64; i++)
		p[i] = MALLOC(16 + (size_t)(tu_rand(rng) % 4096));
	for (int i = 0; i < 64; i++)
		FREE(p[i]);
}

static void *sigwait_main(void *arg)
{
	(void)arg;
	uint64_t rng = 11;
	for (;;) {
		int sig = 0;
		if (sigwait(&usr1, &sig) != 0 || sig != SIGUSR1)
			continue;
		atomic_fetch_add(&received, 1);
		if (atomic_load(&stop))
			return NULL;
		busy(&rng);
	}
}

static void *worker_main(void *arg)
{
	(void)arg;
	uint64_t rng = 5;
	void *slot[256] = {0};
	while (!atomic_load(&stop)) {
		unsigned k = (unsigned)(tu_rand(&rng) % 256);
		FREE(slot[k]);
		slot[k] = MALLOC(4096 + (size_t)(tu_rand(&rng) % 4096));
	}
	for (unsigned k = 0; k < 256; k++)
		FREE(slot[k]);
	return NULL;
}

#ifdef USLUB_PREFIXED
/* The loader's frees start no thread (hooks.h): they may come with libc's
 * dl_stack_cache_lock held, which pthread_create takes. The test of "the loader" itself,
 * on what the loader exports and on the program's and libc's code. */
bool uslub_os_in_ldso(const void *addr);
extern void *__tls_get_addr(void *);
static void loader_frees(void)
{
	const char *base = (const char *)getauxval(AT_BASE);
	CHECKF(uslub_os_in_ldso(base + 64), "the loader's ELF header lies in the loader");
#ifndef __SANITIZE_ADDRESS__ /* ASan puts its own __tls_get_addr first */
	CHECKF(uslub_os_in_ldso((const void *)(uintptr_t)__tls_get_addr),
	       "__tls_get_addr lies in the loader");
#endif
	CHECKF(!uslub_os_in_ldso((const void *)(uintptr_t)loader_frees),
	       "the program's code does not");
	CHECKF(!uslub_os_in_ldso((const void *)(uintptr_t)printf), "nor libc's");
}
#else
static void loader_frees(void)
{
}
#endif

int main(int argc, char **argv)
{
	(void)argc;
	tu_clean_env(argv);
	loader_frees();
	printf("test_background_signal (%s): SIGUSR1 blocked in the program's threads, taken "
	       "by sigwait, %d times\n",
	       VARIANT, SIGNALS);

	/* Start the replenisher while this thread still takes SIGUSR1. */
	for (int i = 0; i < 16; i++)
		FREE(MALLOC(64 << (i % 8)));
	long tid = 0;
	for (int tries = 0; tries < 200 && tid == 0; tries++) {
		tid = find_thread("uslub-replenish");
		if (tid == 0) {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
			FREE(MALLOC(100));
		}
	}

	tu_section("the replenisher runs with every catchable signal blocked");
	CHECKF(tid != 0, "no uslub-replenish thread (is USLUB_BACKGROUND=1 set?)");
	if (tid != 0) {
		uint64_t mask = blocked_mask(tid);
		const int sigs[] = {SIGUSR1, SIGUSR2, SIGINT,  SIGTERM, SIGHUP,
				    SIGALRM, SIGCHLD, SIGPIPE, SIGQUIT, SIGRTMIN};
		for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			CHECKF(mask & (1ULL << (sigs[i] - 1)),
			       "signal %d (%s) not blocked in the replenisher: SigBlk %016" PRIx64,
			       sigs[i], strsignal(sigs[i]), mask);
	}

	tu_section("%d process-directed SIGUSR1, each taken by the sigwait thread", SIGNALS);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
	pthread_t waiter, worker;
	CHECK_EQ(pthread_create(&waiter, NULL, sigwait_main, NULL), 0);
	CHECK_EQ(pthread_create(&worker, NULL, worker_main, NULL), 0);
	unsigned long sent = 0, late = 0;
	for (; sent < SIGNALS; sent++) {
		if (sent + 1 == SIGNALS)
			atomic_store(&stop, 1);
		kill(getpid(), SIGUSR1);
		double deadline = tu_now() + WAIT_SECONDS;
		while (atomic_load(&received) < sent + 1 && tu_now() < deadline)
			sched_yield();
		if (atomic_load(&received) < sent + 1) {
			late++;
			break;
		}
	}
	CHECKF(late == 0, "signal %lu not taken by sigwait within %d s", sent + 1, WAIT_SECONDS);
	if (late) {
		atomic_store(&stop, 1);
		kill(getpid(), SIGUSR1); /* let the waiter see stop */
	}
	pthread_join(waiter, NULL);
	pthread_join(worker, NULL);
	if (!late)
		CHECK_EQ(atomic_load(&received), SIGNALS);
	printf("    %lu signals sent, %lu taken by sigwait\n", sent + (late ? 1 : 0),
	       atomic_load(&received));
	return tu_summary("test_background_signal");
}
