/* Settings: one table (name, default, range, description), read once at start-up from
 * `environ` - never getenv, which may not be ready when the first malloc comes from the
 * dynamic loader - and frozen into uslub_config. A bad value prints one line naming the
 * variable and the value used instead, and the program runs on. */
#ifndef USLUB_OPTIONS_H
#define USLUB_OPTIONS_H

#include <stdint.h>

enum uslub_stats_mode { USLUB_STATS_OFF, USLUB_STATS_TEXT, USLUB_STATS_JSON, USLUB_STATS_LIVE };
/* USLUB_HARDEN: off; random object order in new slabs (no cost on the fast path, the
 * default); full: also obfuscated, range-checked free pointers, through the slow path. */
enum uslub_harden_mode { USLUB_HARDEN_OFF, USLUB_HARDEN_RANDOM, USLUB_HARDEN_FULL };

/* USLUB_BACKGROUND: no thread; the replenisher and decay thread started at once; only
 * the decay thread, started once there is free memory to hand back (the default). */
enum uslub_background_mode { USLUB_BG_OFF, USLUB_BG_ON, USLUB_BG_AUTO };

/* USLUB_NUMA: the topology to use. */
enum uslub_numa_mode { USLUB_NUMA_AUTO, USLUB_NUMA_OFF, USLUB_NUMA_FAKE };

/* USLUB_DEBUG's letters (slub_debug's), as bits. */
enum {
	USLUB_DEBUG_F = 0x1,  /* consistency checks */
	USLUB_DEBUG_Z = 0x2,  /* red zones */
	USLUB_DEBUG_P = 0x4,  /* poisoning */
	USLUB_DEBUG_U = 0x8,  /* owner tracking */
	USLUB_DEBUG_T = 0x10, /* trace */
	USLUB_DEBUG_Q = 0x20, /* quarantine: freed objects held before reuse (implies P) */
	USLUB_DEBUG_B = 0x40  /* bounds of memcpy, memmove, memset (with libuslub_bounds.so) */
};
/* What "1" (and a cache list without letters) turns on: every letter but T. */
#define USLUB_DEBUG_ALL                                                                            \
	(USLUB_DEBUG_F | USLUB_DEBUG_Z | USLUB_DEBUG_P | USLUB_DEBUG_U | USLUB_DEBUG_Q |           \
	 USLUB_DEBUG_B)

/* USLUB_FAULT (tests only): comma-separated rules "kind:N" (the Nth call of that kind
 * fails) or "kind:every:K" (every Kth), N and K from 1, kind mmap, mremap, madvise or all
 * (os.c says which calls each covers). Indexed by kind in that order. */
struct uslub_fault_plan {
	unsigned long nth[4], every[4];
};

struct uslub_config {
	unsigned min_order;
	unsigned max_order;
	unsigned min_objects; /* 0: the kernel's rule on CPU count */
	unsigned high_order_wait;
	unsigned background; /* enum uslub_background_mode */
	unsigned decay_ms;   /* USLUB_DECAY_MS */
	uint64_t mem_limit;  /* 0: none */
	unsigned stats;	     /* enum uslub_stats_mode */
	unsigned verbose;
	unsigned harden;  /* enum uslub_harden_mode */
	unsigned sheaves; /* sheaf capacity in objects, 0: none */
	unsigned merge;	  /* USLUB_MERGE: object caches may share one cache */
	char stats_file[256];
	/* The three settings with a syntax of their own, parsed here like the rest; the
	 * text as given is kept for USLUB_VERBOSE and the statistics' config. */
	char debug[128];	  /* USLUB_DEBUG */
	unsigned debug_letters;	  /* USLUB_DEBUG_* */
	const char *debug_caches; /* into debug[]: the cache list after the comma, or NULL */
	unsigned redzone;	  /* USLUB_REDZONE: bytes on each side of a debug object */
	uint64_t quarantine;	  /* USLUB_QUARANTINE: bytes of freed objects held (Q) */
	char numa[32];		  /* USLUB_NUMA */
	unsigned numa_mode;	  /* enum uslub_numa_mode */
	unsigned numa_nodes;	  /* fake:N */
	unsigned numa_noskip;	  /* ",noskip" */
	char fault[64];		  /* USLUB_FAULT */
	struct uslub_fault_plan fault_plan;
};

extern struct uslub_config uslub_config;

/* Parse `env` (a NULL-terminated environ-style array) into uslub_config. */
void uslub_options_init(char **env);
/* A USLUB_FAULT spec into a plan; -1 (and an empty plan) when it is not understood.
 * Allocates nothing (the fault tests and the settings fuzzer call it too). */
int uslub_fault_parse(const char *spec, struct uslub_fault_plan *plan);
/* Print the effective settings, one per line, to fd. */
void uslub_options_print(int fd);

#endif
