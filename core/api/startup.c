/* Start-up under LD_PRELOAD, the environment, and fork.
 *
 * The first call of any entry point may come from the dynamic loader, from a constructor
 * of a library loaded before us, or from TLS set-up (slab.c, section 2). uslub_init_slow
 * runs once, under init_lock, reads the settings from `environ` - or from
 * /proc/self/environ when libc has not set it yet - and brings the layers up from the
 * bottom: options, OS fault rules, NUMA (one node until the constructor reads the real
 * topology), pages, caches, the replenisher, threads. Nothing in it allocates through
 * libc. What must not run inside malloc (libnuma, pthread_atfork, both allocate) waits
 * for the library's constructor.
 *
 * fork takes every lock first (lock.c), so the child inherits none that a thread of the
 * parent held, then sets them up anew in the child. */
#include "api/api.h"
#include "debug/debug.h"
#include "hooks.h"
#include "page/node.h"
#include "os/options.h"
#include "os/os.h"
#include "replenish/replenish.h"
#include "slab/slab.h"
#include "stats/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <urcu/urcu-bp.h>

_Atomic int uslub_ready;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

extern char **environ;
void uslub_pages_init(void);

/* When the first call comes before libc has set `environ` (from the dynamic loader),
 * the settings are read from /proc/self/environ into this buffer instead. */
static char env_buf[8192];
static char *env_ptrs[128];

static char **read_proc_environ(void)
{
	int saved = errno;
	size_t len = 0, n = 0;
	int fd = USLUB_OUT(open("/proc/self/environ", O_RDONLY | O_CLOEXEC));
	if (fd >= 0) {
		ssize_t r;
		while (len < sizeof(env_buf) - 1 &&
		       (r = USLUB_OUT(read(fd, env_buf + len, sizeof(env_buf) - 1 - len))) > 0)
			len += (size_t)r;
		USLUB_OUT(close(fd));
	}
	env_buf[len] = '\0';
	for (size_t i = 0; i < len && n < sizeof(env_ptrs) / sizeof(env_ptrs[0]) - 1;) {
		env_ptrs[n++] = env_buf + i;
		while (i < len && env_buf[i])
			i++;
		i++;
	}
	env_ptrs[n] = NULL;
	errno = saved;
	return env_ptrs;
}

/* The observers' entries in the lower layers' hook table (hooks.h): the api layer is the
 * one that knows both sides. Installed before any layer comes up. */
static void install_hooks(void)
{
	uslub_hooks.set_next = uslub_debug_set_next;
	uslub_hooks.get_next = uslub_debug_get_next;
	uslub_hooks.init_object = uslub_debug_init_object;
	uslub_hooks.slab_ready = uslub_debug_slab_ready;
	uslub_hooks.slab_discard = uslub_debug_slab_discard;
	uslub_hooks.object_alloc = uslub_debug_alloc;
	uslub_hooks.object_report = uslub_debug_report;
	uslub_hooks.object_free = uslub_debug_free;
	uslub_hooks.background_start = uslub_replenish_start;
	uslub_hooks.background_kick = uslub_replenish_kick;
	uslub_hooks.background_note = uslub_background_note;
	uslub_hooks.nodes_online = uslub_cache_nodes_init;
	uslub_hooks.shrink = uslub_msheaves_shrink;
	uslub_hooks.release_held = uslub_medium_depots_flush;
	uslub_hooks.block_alloc = uslub_debug_block_alloc;
	uslub_hooks.block_check = uslub_debug_block_check;
	uslub_hooks.block_free = uslub_debug_block_free;
	uslub_hooks.block_resize = uslub_debug_block_resize;
	uslub_hooks.rcu_flush = uslub_rcu_flush;
}

void uslub_init_slow(void)
{
	USLUB_OUT(pthread_mutex_lock(&init_lock));
	if (atomic_load_explicit(&uslub_ready, memory_order_relaxed)) {
		pthread_mutex_unlock(&init_lock);
		return;
	}
	install_hooks();
	uslub_options_init(environ ? environ : read_proc_environ());
	uslub_os_fault_set(&uslub_config.fault_plan);
	uslub_node_init();
	uslub_pages_init();
	/* The caches' plain layout, the debug caches' own, then what follows from both. */
	uslub_caches_init();
	uslub_debug_init();
	uslub_caches_open();
	uslub_replenish_init();
	uslub_threads_init();
	atomic_store_explicit(&uslub_ready, 1, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	if (uslub_config.verbose)
		uslub_options_print(2);
}

/* ---- fork ------------------------------------------------------------------------ */

static void fork_prepare(void)
{
	/* First: its holder frees objects, which takes the locks below. */
	uslub_quarantine_lock();
	uslub_threads_before_fork();
	USLUB_OUT_VOID(urcu_bp_before_fork());
	uslub_lock_all();
}

static void fork_parent(void)
{
	uslub_unlock_all();
	USLUB_OUT_VOID(urcu_bp_after_fork_parent());
	uslub_threads_after_fork_parent();
	uslub_quarantine_unlock();
}

static void fork_child(void)
{
	uslub_threads_after_fork_child();
	/* Every lock was taken by this thread in fork_prepare, and the child's only thread is
	 * its copy: it lets them go as the parent does (re-initialising them instead left
	 * ThreadSanitizer counting them held by the child, a double lock at its next take). */
	uslub_unlock_all();
	uslub_replenish_after_fork_child();
	/* Unlocks what urcu_bp_before_fork took, and drops the other threads' readers. */
	USLUB_OUT_VOID(urcu_bp_after_fork_child());
	uslub_quarantine_unlock();
}

/* pthread_atfork allocates, so it is registered from a constructor, once the allocator
 * is ready, never from inside malloc. Through the libc entry point that pthread_atfork
 * calls: pthread_atfork itself comes from libc_nonshared.a, which the linker puts after
 * every object of the library, so that one call kept the text's last 64 KiB window
 * resident in every process, with only code no program runs unless it asks around it
 * (core/meson.build, core_cold_src). The handlers go with this library, as
 * pthread_atfork would register them (its __dso_handle). */
extern void *__dso_handle __attribute__((weak, visibility("hidden")));
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso);

__attribute__((constructor)) static void uslub_constructor(void)
{
	uslub_init();
	uslub_node_discover();
	USLUB_OUT(__register_atfork(fork_prepare, fork_parent, fork_child, __dso_handle));
	uslub_stats_start();
}

/* USLUB_DEBUG: a last look at every debug object (debug/sweep.c), so an overflow of a
 * block never freed, or a write into one freed, is reported before the program ends. */
__attribute__((destructor)) static void uslub_destructor(void)
{
	if (uslub_debug_sweep_wanted)
		uslub_debug_sweep("exit", 0);
}
