#include "os/options.h"

#include "os/print.h"
#include "size_classes.h"
#include "types.h"

#include <stddef.h>
#include <string.h>

struct uslub_config uslub_config;

/* OPT_NUMA, OPT_DEBUG and OPT_FAULT are strings with a syntax, kept as given and parsed
 * into their fields of uslub_config (parse_numa, parse_debug, uslub_fault_parse). */
enum opt_kind { OPT_UINT, OPT_BYTES, OPT_CHOICE, OPT_STRING, OPT_NUMA, OPT_DEBUG, OPT_FAULT };

struct option_desc {
	const char *name;
	enum opt_kind kind;
	size_t offset; /* into struct uslub_config */
	uint64_t def;
	uint64_t min, max;   /* OPT_UINT range */
	const char *choices; /* OPT_CHOICE: '|'-separated words, value = index */
	const char *help;
};

#define CFG(field) offsetof(struct uslub_config, field)

/* USLUB_QUARANTINE's default, 16 MiB: a freed object waits while some 100,000 other small
 * frees (a debug slot of a 64-byte class is 256 bytes) go by, at a bounded cost in memory
 * (tools/bench/results/debug-letters.md). */
#define QUARANTINE_DEFAULT 16777216

static const struct option_desc options[] = {
    {"USLUB_MIN_ORDER", OPT_UINT, CFG(min_order), 0, 0, USLUB_MAX_ORDER, NULL,
     "lowest order a cache's preferred slab order may be (slub_min_order)"},
    {"USLUB_MAX_ORDER", OPT_UINT, CFG(max_order), 3, 0, USLUB_MAX_ORDER, NULL,
     "highest order a cache's preferred slab order may be (slub_max_order)"},
    {"USLUB_MIN_OBJECTS", OPT_UINT, CFG(min_objects), 0, 0, USLUB_MAX_OBJS, NULL,
     "objects per slab the order calculation aims for; 0 = 4 * (fls(cpus) + 1)"},
    {"USLUB_HIGH_ORDER", OPT_CHOICE, CFG(high_order_wait), 0, 0, 0, "nowait|wait",
     "nowait: try the preferred order, else take the minimum at once; wait: block for it"},
    {"USLUB_BACKGROUND", OPT_CHOICE, CFG(background), USLUB_BG_AUTO, 0, 0, "0|1|auto",
     "auto: a thread that hands free memory back when the program is quiet, started once "
     "there is some to hand back; 1: started at once, and it also prepares warm "
     "high-order blocks (the replenisher); 0: no thread"},
    {"USLUB_DECAY_MS", OPT_UINT, CFG(decay_ms), 10000, 80, 3600000, NULL,
     "free memory unused this long goes back to the OS; what recent use does not call "
     "for goes after an eighth to a quarter of it"},
    {"USLUB_MEM_LIMIT", OPT_BYTES, CFG(mem_limit), 0, 0, 0, NULL,
     "cap on memory taken from the OS (K/M/G suffixes); 0 = none"},
    {"USLUB_STATS", OPT_CHOICE, CFG(stats), 0, 0, 0, "0|1|json|text|live",
     "dump statistics at exit: 1 or text for the table, json for JSON; live publishes "
     "them in /dev/shm/uslub.<pid> for tools/uslub top"},
    {"USLUB_STATS_FILE", OPT_STRING, CFG(stats_file), 0, 0, sizeof(uslub_config.stats_file), NULL,
     "where the dump goes (%p becomes the pid); default stderr"},
    {"USLUB_NUMA", OPT_NUMA, CFG(numa), 0, 0, sizeof(uslub_config.numa), NULL,
     "auto (libnuma's topology), off (one node), or fake:N (N simulated nodes)"},
    {"USLUB_FAULT", OPT_FAULT, CFG(fault), 0, 0, sizeof(uslub_config.fault), NULL,
     "test only: make OS calls fail, e.g. mmap:3 (the 3rd) or mmap:every:5"},
    {"USLUB_DEBUG", OPT_DEBUG, CFG(debug), 0, 0, sizeof(uslub_config.debug), NULL,
     "slub_debug letters F (checks) Z (red zones) P (poison) U (alloc/free sites) T (trace) "
     "Q (quarantine) B (memcpy/memmove/memset bounds, with libuslub_bounds.so), optionally "
     ",cache,...; 1 = FZPUQB on every cache"},
    {"USLUB_REDZONE", OPT_UINT, CFG(redzone), 64, 16, 4096, NULL,
     "with USLUB_DEBUG=Z: red zone bytes before and after each slab object (a multiple of "
     "16), so a miss by up to this many bytes lands in one"},
    {"USLUB_QUARANTINE", OPT_BYTES, CFG(quarantine), QUARANTINE_DEFAULT, 0, 0, NULL,
     "with USLUB_DEBUG=Q: bytes of freed objects held, oldest first, before they can be "
     "handed out again (K/M/G suffixes)"},
    {"USLUB_HARDEN", OPT_CHOICE, CFG(harden), USLUB_HARDEN_RANDOM, 0, 0, "off|random|full|0|1",
     "random: new slabs hand out objects in random order; full (1): also obfuscated, "
     "checked free pointers (every cache takes the slow path); off (0)"},
    {"USLUB_SHEAVES", OPT_UINT, CFG(sheaves), SHEAF_MAX, 0, SHEAF_MAX, NULL,
     "objects of other threads' slabs a thread keeps per cache for its next allocations "
     "(the kernel's percpu sheaves; fewer for large objects); 0 = none"},
    {"USLUB_MERGE", OPT_UINT, CFG(merge), 1, 0, 1, NULL,
     "1: a program's compatible object caches share one cache, as SLUB merges them; 0: each "
     "uslub_cache_create makes its own"},
    {"USLUB_VERBOSE", OPT_UINT, CFG(verbose), 0, 0, 1, NULL,
     "1 prints the effective settings at start-up"},
};

#define NR_OPTIONS (sizeof(options) / sizeof(options[0]))

static unsigned *uint_field(const struct option_desc *o)
{
	return (unsigned *)((char *)&uslub_config + o->offset);
}

static int parse_uint(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

static int parse_bytes(const char *s, uint64_t *out)
{
	char digits[32];
	size_t n = strlen(s);
	unsigned shift = 0;
	if (n == 0 || n >= sizeof(digits))
		return -1;
	memcpy(digits, s, n + 1);
	char last = digits[n - 1];
	if (last == 'b' || last == 'B')
		digits[--n] = '\0', last = n ? digits[n - 1] : '\0';
	switch (last) {
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case 't':
	case 'T':
		shift = 40;
		break;
	}
	if (shift)
		digits[--n] = '\0';
	uint64_t v;
	if (parse_uint(digits, &v) || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = v << shift;
	return 0;
}

static int parse_choice(const char *s, const char *choices, uint64_t *out)
{
	size_t len = strlen(s);
	uint64_t idx = 0;
	for (const char *c = choices; *c; idx++) {
		const char *end = strchr(c, '|');
		size_t n = end ? (size_t)(end - c) : strlen(c);
		if (n == len && memcmp(c, s, n) == 0) {
			*out = idx;
			return 0;
		}
		if (!end)
			break;
		c = end + 1;
	}
	return -1;
}

/* ---- the settings with a syntax of their own ------------------------------------- */

/* "auto", "off" or "fake:N", then optionally ",noskip". */
static int parse_numa(const char *s)
{
	const char *comma = strchr(s, ',');
	size_t n = comma ? (size_t)(comma - s) : strlen(s);
	uint64_t nodes = 0;
	if (comma && strcmp(comma, ",noskip") != 0)
		return -1;
	if (n == 0 || (n == 4 && memcmp(s, "auto", 4) == 0)) {
		uslub_config.numa_mode = USLUB_NUMA_AUTO;
	} else if (n == 3 && memcmp(s, "off", 3) == 0) {
		uslub_config.numa_mode = USLUB_NUMA_OFF;
	} else if (n > 5 && n < 16 && memcmp(s, "fake:", 5) == 0) {
		char digits[16];
		memcpy(digits, s + 5, n - 5);
		digits[n - 5] = '\0';
		if (parse_uint(digits, &nodes) || nodes < 1 || nodes > 16)
			return -1;
		uslub_config.numa_mode = USLUB_NUMA_FAKE;
		uslub_config.numa_nodes = (unsigned)nodes;
	} else {
		return -1;
	}
	uslub_config.numa_noskip = comma != NULL;
	return 0;
}

/* Letters F Z P U T Q B (either case), "1" (FZPUQB) or "0"/"" (none), then optionally
 * ",cache,...". Letters alone apply to every cache. A bad letter is dropped with a line. */
static int parse_debug(const char *spec)
{
	static const char letters[] = "FZPUTQB";
	unsigned flags = 0;
	uslub_config.debug_caches = NULL;
	if (!spec[0] || strcmp(spec, "0") == 0) {
		uslub_config.debug_letters = 0;
		return 0;
	}
	const char *p = spec;
	if (strcmp(spec, "1") == 0) {
		p++;
		flags = USLUB_DEBUG_ALL;
	}
	for (; *p && *p != ','; p++) {
		const char *l = strchr(letters, *p >= 'a' ? *p - 'a' + 'A' : *p);
		if (!l || !*p) {
			uslub_message("uslub: USLUB_DEBUG=%s: '%c' is not one of F Z P U T Q B; "
				      "ignored\n",
				      spec, *p);
			continue;
		}
		flags |= 1u << (l - letters);
	}
	if (p == spec) /* a cache list alone: every letter but T, as "1" */
		flags = USLUB_DEBUG_ALL;
	if (*p == ',' && p[1])
		uslub_config.debug_caches = uslub_config.debug + (p + 1 - spec);
	uslub_config.debug_letters = flags;
	return 0;
}

static const char *const fault_kinds[4] = {"mmap", "mremap", "madvise", "all"};

/* Digits up to `end`, no sign, no overflow, at least 1. */
static int parse_count(const char *s, const char *end, unsigned long *out)
{
	unsigned long v = 0;
	if (s == end)
		return -1;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || v > (~0UL - 9) / 10)
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v == 0)
		return -1;
	*out = v;
	return 0;
}

static int word_is(const char *s, const char *end, const char *word)
{
	size_t n = strlen(word);
	return (size_t)(end - s) == n && memcmp(s, word, n) == 0;
}

/* One "kind:N" or "kind:every:K" rule, [s, end). */
static int parse_rule(const char *s, const char *end, struct uslub_fault_plan *plan)
{
	const char *colon = memchr(s, ':', (size_t)(end - s));
	if (!colon)
		return -1;
	int kind = -1;
	for (int k = 0; k < 4; k++)
		if (word_is(s, colon, fault_kinds[k]))
			kind = k;
	if (kind < 0)
		return -1;
	const char *arg = colon + 1;
	const char *colon2 = memchr(arg, ':', (size_t)(end - arg));
	if (colon2) {
		if (!word_is(arg, colon2, "every"))
			return -1;
		return parse_count(colon2 + 1, end, &plan->every[kind]);
	}
	return parse_count(arg, end, &plan->nth[kind]);
}

int uslub_fault_parse(const char *spec, struct uslub_fault_plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	if (!spec)
		return 0;
	if (!*spec)
		return 0;
	for (const char *s = spec;;) {
		const char *end = strchr(s, ',');
		if (!end)
			end = s + strlen(s);
		if (parse_rule(s, end, plan) != 0) {
			memset(plan, 0, sizeof(*plan));
			return -1;
		}
		if (!*end)
			return 0;
		s = end + 1; /* an empty rule after a comma is refused above */
	}
}

/* ---- the table's own kinds ----------------------------------------------------------- */

static void set_default(const struct option_desc *o)
{
	if (o->kind == OPT_BYTES)
		*(uint64_t *)((char *)&uslub_config + o->offset) = o->def;
	else if (o->kind >= OPT_STRING)
		((char *)&uslub_config + o->offset)[0] = '\0';
	else
		*uint_field(o) = (unsigned)o->def;
}

static void apply(const struct option_desc *o, const char *value)
{
	uint64_t v = 0;
	switch (o->kind) {
	case OPT_UINT:
		if (parse_uint(value, &v) == 0 && v >= o->min && v <= o->max) {
			*uint_field(o) = (unsigned)v;
			return;
		}
		uslub_message("uslub: %s=%s is not a number in %lu..%lu; using %lu\n", o->name,
			      value, (unsigned long)o->min, (unsigned long)o->max,
			      (unsigned long)o->def);
		return;
	case OPT_BYTES:
		if (parse_bytes(value, &v) == 0) {
			*(uint64_t *)((char *)&uslub_config + o->offset) = v;
			return;
		}
		if (o->def)
			uslub_message("uslub: %s=%s is not a size (like 512M); using %lu\n",
				      o->name, value, (unsigned long)o->def);
		else
			uslub_message("uslub: %s=%s is not a size (like 512M); using none\n",
				      o->name, value);
		return;
	case OPT_CHOICE:
		if (parse_choice(value, o->choices, &v) == 0) {
			*uint_field(o) = (unsigned)v;
			return;
		}
		uslub_message("uslub: %s=%s is not one of %s; using the default\n", o->name, value,
			      o->choices);
		return;
	case OPT_STRING:
	case OPT_NUMA:
	case OPT_DEBUG:
	case OPT_FAULT: {
		size_t n = strlen(value);
		char *dst = (char *)&uslub_config + o->offset;
		if (n >= o->max) {
			uslub_message("uslub: %s is longer than %lu bytes; using the default\n",
				      o->name, (unsigned long)(o->max - 1));
			return;
		}
		memcpy(dst, value, n + 1);
		if (o->kind == OPT_NUMA && parse_numa(dst) != 0) {
			uslub_message("uslub: %s=%s is not auto, off or fake:N (N in 1..16), "
				      "optionally with ,noskip; using auto\n",
				      o->name, value);
			strcpy(dst, "auto");
			parse_numa(dst);
		} else if (o->kind == OPT_DEBUG) {
			parse_debug(dst);
		} else if (o->kind == OPT_FAULT &&
			   uslub_fault_parse(dst, &uslub_config.fault_plan) != 0) {
			uslub_message("uslub: %s=%s is not kind:N or kind:every:K (kind mmap, "
				      "mremap, madvise or all, comma-separated); no faults "
				      "injected\n",
				      o->name, value);
			dst[0] = '\0';
		}
		return;
	}
	}
}

void uslub_options_init(char **env)
{
	for (size_t i = 0; i < NR_OPTIONS; i++)
		set_default(&options[i]);
	parse_numa("auto");
	parse_debug("");
	uslub_fault_parse("", &uslub_config.fault_plan);
	for (char **e = env; e && *e; e++) {
		if (strncmp(*e, "USLUB_", 6) != 0)
			continue;
		for (size_t i = 0; i < NR_OPTIONS; i++) {
			size_t n = strlen(options[i].name);
			if (strncmp(*e, options[i].name, n) == 0 && (*e)[n] == '=')
				apply(&options[i], *e + n + 1);
		}
	}
	/* "json" and "text" are spelled out in the choice list after 0 and 1. */
	if (uslub_config.stats == 3)
		uslub_config.stats = USLUB_STATS_TEXT;
	else if (uslub_config.stats == 4)
		uslub_config.stats = USLUB_STATS_LIVE;
	else if (uslub_config.stats == 2)
		uslub_config.stats = USLUB_STATS_JSON;
	/* "0" and "1" after the words: off and full. */
	if (uslub_config.harden == 3)
		uslub_config.harden = USLUB_HARDEN_OFF;
	else if (uslub_config.harden == 4)
		uslub_config.harden = USLUB_HARDEN_FULL;
	if (uslub_config.min_order > uslub_config.max_order) {
		uslub_message("uslub: USLUB_MIN_ORDER=%u is above USLUB_MAX_ORDER=%u; "
			      "using max order %u\n",
			      uslub_config.min_order, uslub_config.max_order,
			      uslub_config.min_order);
		uslub_config.max_order = uslub_config.min_order;
	}
}

void uslub_options_print(int fd)
{
	struct uslub_out o;
	uslub_out_init(&o, fd);
	for (size_t i = 0; i < NR_OPTIONS; i++) {
		const struct option_desc *d = &options[i];
		uslub_printf(&o, "uslub: %-18s = ", d->name);
		if (d->kind == OPT_BYTES)
			uslub_printf(
			    &o, "%lu",
			    (unsigned long)*(uint64_t *)((char *)&uslub_config + d->offset));
		else if (d->kind >= OPT_STRING)
			uslub_printf(&o, "%s", (char *)&uslub_config + d->offset);
		else
			uslub_printf(&o, "%u", *uint_field(d));
		uslub_printf(&o, "  (%s)\n", d->help);
	}
	uslub_out_flush(&o);
}
