/* Settings: every variable parsed from an environ-style array, bad values reported in one
 * line naming the variable and the value used, and the program going on with it. */
#include "os/options.h"
#include "types.h"
#include "test_util.h"

#include <string.h>
#include <unistd.h>

/* Runs uslub_options_init on env with stderr captured; returns what was printed. */
static const char *parse(char **env)
{
	static char out[4096];
	int fds[2];
	if (pipe(fds) != 0)
		return "";
	int saved = dup(2);
	dup2(fds[1], 2);
	close(fds[1]);
	uslub_options_init(env);
	dup2(saved, 2);
	close(saved);
	ssize_t n = read(fds[0], out, sizeof(out) - 1);
	close(fds[0]);
	out[n > 0 ? n : 0] = '\0';
	return out;
}

static unsigned lines(const char *s)
{
	unsigned n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

int main(void)
{
	char *defaults[] = {"PATH=/bin", NULL};
	const char *msg = parse(defaults);
	CHECKF(msg[0] == '\0', "no output for no settings: %s", msg);
	CHECKF(uslub_config.min_order == 0 && uslub_config.max_order == 3, "order defaults");
	CHECKF(uslub_config.min_objects == 0 && uslub_config.high_order_wait == 0, "defaults");
	CHECKF(uslub_config.background == USLUB_BG_AUTO && uslub_config.mem_limit == 0,
	       "defaults: the decay thread started lazily, no cap");
	CHECKF(uslub_config.decay_ms == 10000, "decay period 10 s: %u", uslub_config.decay_ms);
	CHECKF(uslub_config.stats == USLUB_STATS_OFF, "stats off");
	CHECKF(uslub_config.sheaves == SHEAF_MAX, "sheaves on, %u objects", uslub_config.sheaves);

	char *good[] = {"USLUB_MIN_ORDER=1",
			"USLUB_MAX_ORDER=4",
			"USLUB_MIN_OBJECTS=32",
			"USLUB_HIGH_ORDER=wait",
			"USLUB_BACKGROUND=1",
			"USLUB_MEM_LIMIT=512M",
			"USLUB_STATS=json",
			"USLUB_STATS_FILE=/tmp/x.%p",
			"USLUB_SHEAVES=0",
			"USLUB_DECAY_MS=1000",
			NULL};
	msg = parse(good);
	CHECKF(msg[0] == '\0', "no output for good settings: %s", msg);
	CHECKF(uslub_config.min_order == 1 && uslub_config.max_order == 4, "orders");
	CHECKF(uslub_config.min_objects == 32, "min objects");
	CHECKF(uslub_config.high_order_wait == 1 && uslub_config.background == 1, "modes");
	CHECKF(uslub_config.mem_limit == 512ULL << 20, "limit %lu",
	       (unsigned long)uslub_config.mem_limit);
	CHECKF(uslub_config.stats == USLUB_STATS_JSON, "json");
	CHECKF(strcmp(uslub_config.stats_file, "/tmp/x.%p") == 0, "file");
	CHECKF(uslub_config.sheaves == 0, "sheaves off");
	CHECKF(uslub_config.decay_ms == 1000, "decay period");
	char *off[] = {"USLUB_BACKGROUND=0", NULL};
	parse(off);
	CHECKF(uslub_config.background == USLUB_BG_OFF, "no thread");

	char *sizes[] = {"USLUB_MEM_LIMIT=3g", "USLUB_STATS=text", NULL};
	parse(sizes);
	CHECKF(uslub_config.mem_limit == 3ULL << 30, "3g");
	CHECKF(uslub_config.stats == USLUB_STATS_TEXT, "text");
	char *bytes[] = {"USLUB_MEM_LIMIT=4096", "USLUB_STATS=1", NULL};
	parse(bytes);
	CHECKF(uslub_config.mem_limit == 4096 && uslub_config.stats == USLUB_STATS_TEXT, "1");

	/* Each bad value: one line naming the variable, and the default in force. */
	static const struct {
		const char *setting, *name;
	} bad[] = {
	    {"USLUB_MIN_ORDER=x", "USLUB_MIN_ORDER"},
	    {"USLUB_MAX_ORDER=11", "USLUB_MAX_ORDER"},
	    {"USLUB_MAX_ORDER=-1", "USLUB_MAX_ORDER"},
	    {"USLUB_MIN_OBJECTS=99999999999999999999", "USLUB_MIN_OBJECTS"},
	    {"USLUB_HIGH_ORDER=sometimes", "USLUB_HIGH_ORDER"},
	    {"USLUB_BACKGROUND=yes", "USLUB_BACKGROUND"},
	    {"USLUB_DECAY_MS=0", "USLUB_DECAY_MS"},
	    {"USLUB_DECAY_MS=10s", "USLUB_DECAY_MS"},
	    {"USLUB_MEM_LIMIT=12Q", "USLUB_MEM_LIMIT"},
	    {"USLUB_MEM_LIMIT=", "USLUB_MEM_LIMIT"},
	    {"USLUB_STATS=maybe", "USLUB_STATS"},
	    {"USLUB_SHEAVES=29", "USLUB_SHEAVES"},
	    {"USLUB_SHEAVES=lots", "USLUB_SHEAVES"},
	    {"USLUB_VERBOSE=2", "USLUB_VERBOSE"},
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *env[] = {(char *)bad[i].setting, NULL};
		msg = parse(env);
		CHECKF(lines(msg) == 1, "%s: %u lines: %s", bad[i].setting, lines(msg), msg);
		CHECKF(strstr(msg, bad[i].name) != NULL, "%s: message names it: %s", bad[i].setting,
		       msg);
	}
	char *env1[] = {"USLUB_MAX_ORDER=11", NULL};
	parse(env1);
	CHECKF(uslub_config.max_order == 3, "bad max order keeps default 3");
	char *env_sheaves[] = {"USLUB_SHEAVES=29", NULL};
	parse(env_sheaves);
	CHECKF(uslub_config.sheaves == SHEAF_MAX, "bad sheaf capacity keeps the default");
	char *env2[] = {"USLUB_HIGH_ORDER=sometimes", NULL};
	parse(env2);
	CHECKF(uslub_config.high_order_wait == 0, "bad mode keeps nowait");
	char *env3[] = {"USLUB_MEM_LIMIT=12Q", NULL};
	parse(env3);
	CHECKF(uslub_config.mem_limit == 0, "bad limit keeps none");

	/* min order above max order raises max order, as slub_min_order does. */
	char *env4[] = {"USLUB_MIN_ORDER=5", "USLUB_MAX_ORDER=2", NULL};
	msg = parse(env4);
	CHECKF(uslub_config.min_order == 5 && uslub_config.max_order == 5, "max raised to %u",
	       uslub_config.max_order);
	CHECKF(lines(msg) == 1 && strstr(msg, "USLUB_MIN_ORDER"), "one line: %s", msg);
	/* A longer name that starts like a known one is not taken for it. */
	char *env5[] = {"USLUB_MAX_ORDERS=7", NULL};
	msg = parse(env5);
	CHECKF(uslub_config.max_order == 3 && msg[0] == '\0', "USLUB_MAX_ORDERS ignored");

	/* The settings with a syntax of their own are parsed here too, into fields. */
	char *numa_good[] = {"USLUB_NUMA=fake:4,noskip", NULL};
	msg = parse(numa_good);
	CHECKF(msg[0] == '\0' && uslub_config.numa_mode == USLUB_NUMA_FAKE &&
		   uslub_config.numa_nodes == 4 && uslub_config.numa_noskip,
	       "fake:4,noskip: mode %u, %u nodes, noskip %u: %s", uslub_config.numa_mode,
	       uslub_config.numa_nodes, uslub_config.numa_noskip, msg);
	char *numa_off[] = {"USLUB_NUMA=off", NULL};
	parse(numa_off);
	CHECKF(uslub_config.numa_mode == USLUB_NUMA_OFF && !uslub_config.numa_noskip, "off");
	const char *numa_bad[] = {"USLUB_NUMA=fake:0", "USLUB_NUMA=fake:17",
				  "USLUB_NUMA=fake:", "USLUB_NUMA=auto,skip", "USLUB_NUMA=offf"};
	for (unsigned i = 0; i < sizeof(numa_bad) / sizeof(numa_bad[0]); i++) {
		char *env[] = {(char *)numa_bad[i], NULL};
		msg = parse(env);
		CHECKF(lines(msg) == 1 && strstr(msg, "USLUB_NUMA") &&
			   uslub_config.numa_mode == USLUB_NUMA_AUTO,
		       "%s: one line, auto used: %s", numa_bad[i], msg);
	}
	char *debug_good[] = {"USLUB_DEBUG=fZ,kmalloc-64,kmalloc-1k", NULL};
	msg = parse(debug_good);
	CHECKF(msg[0] == '\0' && uslub_config.debug_letters == (USLUB_DEBUG_F | USLUB_DEBUG_Z) &&
		   uslub_config.debug_caches &&
		   strcmp(uslub_config.debug_caches, "kmalloc-64,kmalloc-1k") == 0,
	       "letters %#x, caches %s: %s", uslub_config.debug_letters,
	       uslub_config.debug_caches ? uslub_config.debug_caches : "(none)", msg);
	char *debug_one[] = {"USLUB_DEBUG=1", NULL};
	parse(debug_one);
	CHECKF(uslub_config.debug_letters == (USLUB_DEBUG_F | USLUB_DEBUG_Z | USLUB_DEBUG_P |
					      USLUB_DEBUG_U | USLUB_DEBUG_Q | USLUB_DEBUG_B) &&
		   !uslub_config.debug_caches,
	       "1 is FZPUQB on every cache: %#x", uslub_config.debug_letters);
	char *debug_b[] = {"USLUB_DEBUG=b", NULL};
	msg = parse(debug_b);
	CHECKF(msg[0] == '\0' && uslub_config.debug_letters == USLUB_DEBUG_B,
	       "B, the bounds of memcpy: %#x: %s", uslub_config.debug_letters, msg);
	char *debug_q[] = {"USLUB_DEBUG=Q", "USLUB_QUARANTINE=1M", "USLUB_REDZONE=32", NULL};
	msg = parse(debug_q);
	CHECKF(msg[0] == '\0' && uslub_config.debug_letters == USLUB_DEBUG_Q &&
		   uslub_config.quarantine == (1 << 20) && uslub_config.redzone == 32,
	       "Q, a quarantine of 1M, red zones of 32: %#x %lu %u: %s", uslub_config.debug_letters,
	       (unsigned long)uslub_config.quarantine, uslub_config.redzone, msg);
	char *debug_bad[] = {"USLUB_DEBUG=FX", NULL};
	msg = parse(debug_bad);
	CHECKF(lines(msg) == 1 && strstr(msg, "USLUB_DEBUG") &&
		   uslub_config.debug_letters == USLUB_DEBUG_F,
	       "a bad letter is dropped with one line: %#x: %s", uslub_config.debug_letters, msg);
	char *fault_good[] = {"USLUB_FAULT=mmap:3,all:every:5", NULL};
	msg = parse(fault_good);
	CHECKF(msg[0] == '\0' && uslub_config.fault_plan.nth[0] == 3 &&
		   uslub_config.fault_plan.every[3] == 5,
	       "fault plan: %s", msg);
	char *fault_bad[] = {"USLUB_FAULT=mmap:3,munmap:1", NULL};
	msg = parse(fault_bad);
	CHECKF(lines(msg) == 1 && strstr(msg, "USLUB_FAULT") && uslub_config.fault_plan.nth[0] == 0,
	       "a bad fault spec injects nothing, one line: %s", msg);
	return tu_summary("test_options");
}
