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

/* The most objects a thread's sheaf of one cache holds (USLUB_SHEAVES). */
#define SHEAF_MAX 28

struct uslub_config {
	unsigned min_order;
	unsigned max_order;
	unsigned min_objects; /* 0: the kernel's rule on CPU count */
	unsigned high_order_wait;
	unsigned background;
	uint64_t mem_limit; /* 0: none */
	unsigned stats;	    /* enum uslub_stats_mode */
	unsigned verbose;
	unsigned harden;  /* enum uslub_harden_mode */
	unsigned sheaves; /* sheaf capacity in objects, 0: none */
	char debug[128];  /* USLUB_DEBUG, parsed by debug.c */
	char stats_file[256];
	char numa[32];	/* auto, off, fake:N - parsed by node.c */
	char fault[64]; /* test-only fault injection, e.g. mmap:3 - parsed by os.c */
};

extern struct uslub_config uslub_config;

/* Parse `env` (a NULL-terminated environ-style array) into uslub_config. */
void uslub_options_init(char **env);
/* Print the effective settings, one per line, to fd. */
void uslub_options_print(int fd);

#endif
