/* The live view (see live.h): a thread of its own rewrites /dev/shm/uslub.<pid> every
 * LIVE_PERIOD_MS with the JSON dump, under a sequence count that readers in other
 * processes check. Started from the library constructor - pthread_create allocates, and
 * nothing that allocates may start inside malloc - and stopped by the exit dump. */
#include "stats/live.h"

#include "thread/thread.h"
#include "os/options.h"
#include "os/os.h"
#include "os/print.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LIVE_PERIOD_MS 200
/* Reading smaps walks the page tables under the mm's lock, which the program's page
 * faults want too: the resident figures are refreshed only every this many pages. */
#define SMAPS_EVERY 5

static struct uslub_live_header *page;
static char path[64];
static pid_t owner;
static _Atomic int stopping;

/* The figures are formatted into `scratch` first and copied into the page inside the
 * sequence count's window: formatting (a fifth of the times with /proc/self/smaps) takes
 * milliseconds, and on a loaded machine far longer, and a reader that meets an odd count
 * waits. Without it, `tools/uslub top` gave up once in CI while threads came and went. */
static char *scratch;

static void publish(uint64_t n)
{
	char *text = (char *)page + sizeof(*page);
	size_t cap = USLUB_LIVE_SIZE - sizeof(*page);
	char *out = scratch ? scratch : text;
	size_t len = uslub_stats_format_json(out, cap, n % SMAPS_EVERY == 0);
	if (!len) {
		static const char msg[] = "{\"version\": 1, \"error\": \"live page too small\"}\n";
		memcpy(out, msg, sizeof(msg) - 1);
		len = sizeof(msg) - 1;
	}
	struct timespec ts;
	uslub_os_clock(CLOCK_REALTIME, &ts);
	uint64_t seq = __atomic_load_n(&page->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&page->seq, seq + 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
	if (out != text)
		memcpy(text, out, len);
	page->len = len;
	page->updates = n + 1;
	page->time_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	__atomic_store_n(&page->seq, seq + 2, __ATOMIC_RELEASE);
}

static void *live_thread(void *arg)
{
	(void)arg;
	for (uint64_t n = 1; !atomic_load_explicit(&stopping, memory_order_relaxed); n++) {
		struct timespec ts = {0, LIVE_PERIOD_MS * 1000000L};
		USLUB_OUT(nanosleep(&ts, NULL));
		if (!atomic_load_explicit(&stopping, memory_order_relaxed))
			publish(n);
	}
	return NULL;
}

void uslub_live_start(void)
{
	owner = getpid();
	struct uslub_out o;
	uslub_out_init(&o, -1);
	uslub_printf(&o, "/dev/shm/uslub.%d", (int)owner);
	memcpy(path, o.buf, o.len);
	path[o.len] = '\0';
	struct uslub_live_header *p = uslub_os_map_shared_file(path, USLUB_LIVE_SIZE);
	if (!p) {
		uslub_message("uslub: USLUB_STATS=live: cannot create %s; no live statistics\n",
			      path);
		return;
	}
	memcpy(p->magic, USLUB_LIVE_MAGIC, sizeof(USLUB_LIVE_MAGIC));
	p->version = USLUB_LIVE_VERSION;
	p->header_size = sizeof(*p);
	p->pid = (uint64_t)owner;
	p->period_ms = LIVE_PERIOD_MS;
	page = p;
	/* Untouched beyond what the figures fill; without it the page is written in place. */
	scratch = uslub_os_map(USLUB_LIVE_SIZE - sizeof(*p));
	publish(0);

	/* The thread takes no signal meant for the program's own threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t tid;
	int rc = USLUB_OUT(pthread_create(&tid, &attr, live_thread, NULL));
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		uslub_message("uslub: USLUB_STATS=live: cannot start the thread; the page in %s "
			      "shows start-up only\n",
			      path);
		return;
	}
	USLUB_OUT(pthread_setname_np(tid, "uslub-live"));
}

void uslub_live_stop(void)
{
	if (!page || getpid() != owner)
		return;
	atomic_store_explicit(&stopping, 1, memory_order_relaxed);
	uslub_os_unlink(path);
}
