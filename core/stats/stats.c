/* Statistics: the stat items' names and the dump at exit (a /proc/slabinfo-style table sorted by
 * memory, or versioned JSON). The snapshot is taken in snapshot.c and written out in emit.c.
 *
 * The dump at exit runs once, from whichever thread runs the destructors, in a forked
 * child too. Some programs close stderr in an atexit handler (coreutils' close_stdout),
 * which runs before our destructor, so stderr is duplicated at start-up to a high,
 * close-on-exec fd; the dump checks that fd still is the same file before using it. */
#include "thread/thread.h"
#include "stats/live.h"
#include "stats/stats.h"
#include "os/options.h"
#include "os/os.h"
#include "os/print.h"
#include "uslub.h"

#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const uslub_stat_names[USLUB_NR_STATS] = {
#define X(id, name) #name,
    USLUB_STAT_ITEMS(X) USLUB_CACHE_STAT_ITEMS(X)
#undef X
};

/* ---- the dump at exit ------------------------------------------------------------- */

/* USLUB_STATS_FILE with %p replaced by the pid. */
static int open_stats_file(void)
{
	const char *f = uslub_config.stats_file;
	char path[300];
	size_t n = 0;
	for (; *f && n < sizeof(path) - 24; f++) {
		if (f[0] == '%' && f[1] == 'p') {
			struct uslub_out o;
			uslub_out_init(&o, -1);
			uslub_printf(&o, "%d", (int)getpid());
			memcpy(path + n, o.buf, o.len);
			n += o.len;
			f++;
		} else {
			path[n++] = *f;
		}
	}
	path[n] = '\0';
	int fd = USLUB_OUT(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	if (fd < 0)
		uslub_message("uslub: cannot open USLUB_STATS_FILE %s; writing to stderr\n", path);
	return fd;
}

static int saved_stderr = -1;
static dev_t saved_dev;
static ino_t saved_ino;

/* A copy of stderr above the fds programs use, taken before main (see above). */
static void save_stderr(void)
{
	struct rlimit rl;
	int low = 200;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 64)
		low = (int)(rl.rlim_cur > 1024 ? 1024 : rl.rlim_cur) - 32;
	struct stat st;
	int fd = USLUB_OUT(fcntl(2, F_DUPFD_CLOEXEC, low));
	if (fd < 0)
		fd = USLUB_OUT(fcntl(2, F_DUPFD_CLOEXEC, 3));
	if (fd < 0 || USLUB_OUT(fstat(fd, &st)) != 0) {
		if (fd >= 0)
			USLUB_OUT(close(fd));
		return;
	}
	saved_dev = st.st_dev;
	saved_ino = st.st_ino;
	saved_stderr = fd;
}

/* The saved copy if it still is the stderr of start-up (a program may have closed it
 * and reused the number), else fd 2. */
static int stderr_fd(void)
{
	struct stat st;
	if (saved_stderr >= 0 && USLUB_OUT(fstat(saved_stderr, &st)) == 0 &&
	    st.st_dev == saved_dev && st.st_ino == saved_ino)
		return saved_stderr;
	return 2;
}

void uslub_stats_start(void)
{
	if (uslub_config.stats == USLUB_STATS_LIVE)
		uslub_live_start();
	else if (uslub_config.stats && !uslub_config.stats_file[0])
		save_stderr();
}

static _Atomic int dumped;

/* Once per process, from whichever thread runs the destructors; a forked child dumps its
 * own (its flag is a copy taken before the parent could have dumped). */
__attribute__((destructor)) void uslub_stats_dump_at_exit(void)
{
	if (!uslub_config.stats || atomic_exchange(&dumped, 1))
		return;
	if (uslub_config.stats == USLUB_STATS_LIVE) {
		uslub_live_stop();
		return;
	}
	int fd = uslub_config.stats_file[0] ? open_stats_file() : -1;
	if (fd < 0)
		fd = stderr_fd();
	uslub_stats_emit(fd, uslub_config.stats == USLUB_STATS_JSON);
	if (fd != 2 && fd != saved_stderr)
		USLUB_OUT(close(fd));
}
