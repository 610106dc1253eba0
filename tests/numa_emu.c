/* A stand-in for libnuma: emulated NUMA machines for the tests (numa_emu.h says which and
 * how they are chosen).
 *
 * It runs inside the allocator's start-up and slow paths (uslub_node_discover from a
 * constructor, sched_getcpu when a thread needs a slab, mbind when a node grows), so it
 * allocates nothing, takes no lock and reads its one setting lazily with getenv: whether
 * uslub's constructor or ours runs first depends on the loader. Records go to a static
 * array, the slot claimed with an atomic add and published with a release store, since
 * nodes grow under different locks at once. */
#include "numa_emu.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define API NUMA_EMU_API

struct machine {
	const char *name;
	unsigned nodes, cpus;
	unsigned char distance[4][4];
};

static const struct machine machines[] = {
    {"2", 2, 4, {{10, 21}, {21, 10}}},
    /* Not all remote distances equal, so a node's order is not its numbering: node 1
     * visits 0 and 3 (16) before 2 (22). */
    {"4", 4, 8, {{10, 16, 16, 22}, {16, 10, 22, 16}, {16, 22, 10, 16}, {22, 16, 16, 10}}},
};

/* Nonzero once NUMA_EMU was read into `machine` (NULL: a machine without NUMA). */
static int state;
static const struct machine *machine;

static void say(const char *s)
{
	ssize_t r = write(2, s, strlen(s));
	(void)r;
}

static const struct machine *the_machine(void)
{
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE))
		return machine;
	const char *v = getenv("NUMA_EMU");
	const struct machine *m = NULL;
	if (v && *v) {
		for (unsigned i = 0; i < sizeof(machines) / sizeof(machines[0]); i++)
			if (strcmp(v, machines[i].name) == 0)
				m = &machines[i];
		if (!m) {
			/* A test that asked for a machine this file lacks must not run on
			 * another one and pass. */
			say("numa_emu: NUMA_EMU must be 2 or 4\n");
			abort();
		}
	}
	/* Every thread that races here computes the same answer. */
	machine = m;
	__atomic_store_n(&state, 1, __ATOMIC_RELEASE);
	return m;
}

/* The emulated CPU of a thread that placed itself with sched_setaffinity; -1 until then.
 * Initial-exec: a preloaded library's TLS is static, and nothing may allocate here. */
static __thread int emu_cpu __attribute__((tls_model("initial-exec"))) = -1;

API unsigned numa_emu_nodes(void)
{
	const struct machine *m = the_machine();
	return m ? m->nodes : 0;
}

API unsigned numa_emu_cpus(void)
{
	const struct machine *m = the_machine();
	return m ? m->cpus : 0;
}

/* ---- libnuma --------------------------------------------------------------------- */

API int numa_available(void)
{
	return the_machine() ? 0 : -1;
}

API int numa_max_node(void)
{
	const struct machine *m = the_machine();
	return m ? (int)m->nodes - 1 : 0;
}

API int numa_num_configured_nodes(void)
{
	const struct machine *m = the_machine();
	return m ? (int)m->nodes : 1;
}

API int numa_num_configured_cpus(void)
{
	const struct machine *m = the_machine();
	return m ? (int)m->cpus : (int)sysconf(_SC_NPROCESSORS_CONF);
}

/* libnuma's answer for a node it does not know is 0. */
API int numa_distance(int a, int b)
{
	const struct machine *m = the_machine();
	if (!m || a < 0 || b < 0 || (unsigned)a >= m->nodes || (unsigned)b >= m->nodes)
		return 0;
	return m->distance[a][b];
}

API int numa_node_of_cpu(int cpu)
{
	const struct machine *m = the_machine();
	if (!m)
		return 0;
	if (cpu < 0 || (unsigned)cpu >= m->cpus) {
		errno = EINVAL;
		return -1;
	}
	return (int)((unsigned)cpu % m->nodes);
}

enum { MAX_BINDS = 1024 };
static struct numa_emu_bind binds[MAX_BINDS];
static int bind_ready[MAX_BINDS];
static unsigned nr_binds;

API long mbind(void *start, unsigned long len, int mode, const unsigned long *nmask,
	       unsigned long maxnode, unsigned flags)
{
	unsigned i = __atomic_fetch_add(&nr_binds, 1, __ATOMIC_RELAXED);
	if (i >= MAX_BINDS) {
		say("numa_emu: more mbind calls than recorded; raise MAX_BINDS\n");
		abort();
	}
	struct numa_emu_bind *b = &binds[i];
	b->addr = start;
	b->len = len;
	b->mode = mode;
	b->flags = flags;
	b->maxnode = maxnode;
	b->mask = nmask && maxnode ? nmask[0] : 0;
	b->wide = 0;
	for (unsigned long bit = 64; nmask && bit < maxnode; bit++)
		if (nmask[bit / 64] & (1UL << (bit % 64)))
			b->wide = 1;
	__atomic_store_n(&bind_ready[i], 1, __ATOMIC_RELEASE);
	return 0;
}

API unsigned numa_emu_binds(const struct numa_emu_bind **out)
{
	unsigned n = __atomic_load_n(&nr_binds, __ATOMIC_ACQUIRE);
	if (n > MAX_BINDS)
		n = MAX_BINDS;
	/* Only the calls that finished recording, in order. */
	unsigned done = 0;
	while (done < n && __atomic_load_n(&bind_ready[done], __ATOMIC_ACQUIRE))
		done++;
	*out = binds;
	return done;
}

API int numa_emu_bound_node(const void *p)
{
	const struct numa_emu_bind *b;
	unsigned n = numa_emu_binds(&b);
	for (unsigned i = n; i-- > 0;) {
		const char *a = b[i].addr;
		if ((const char *)p < a || (const char *)p >= a + b[i].len)
			continue;
		unsigned long m = b[i].mask;
		if (b[i].wide || !m || (m & (m - 1)))
			return -2;
		return __builtin_ctzl(m);
	}
	return -1;
}

/* ---- placement: glibc's calls, for the calling thread ------------------------------- */

API int sched_getcpu(void)
{
	const struct machine *m = the_machine();
	if (m && emu_cpu >= 0)
		return emu_cpu;
	unsigned cpu = 0;
	if (syscall(SYS_getcpu, &cpu, NULL, NULL) != 0)
		return -1;
	/* Not placed yet: the real CPU, folded onto the emulated ones. */
	return m ? (int)(cpu % m->cpus) : (int)cpu;
}

/* The thread moves to the lowest emulated CPU in `set`; its real affinity is left as it
 * was, since most emulated CPUs do not exist. Other threads' affinity, or any without a
 * machine, goes to the kernel. */
API int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set)
{
	const struct machine *m = the_machine();
	if (!m || (pid != 0 && pid != (pid_t)syscall(SYS_gettid)))
		return (int)syscall(SYS_sched_setaffinity, pid, size, set);
	for (unsigned c = 0; c < m->cpus && c < size * 8; c++)
		if (CPU_ISSET_S(c, size, set)) {
			emu_cpu = (int)c;
			return 0;
		}
	errno = EINVAL;
	return -1;
}
