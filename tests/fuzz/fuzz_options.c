/* libFuzzer target: the settings parser, uslub_options_init, on a fuzzed environ.
 *
 * The input is split at newlines into up to 32 strings, the environment. A string that
 * starts with '@' has its next byte replaced by one of the allocator's variable names and
 * '=' (so most inputs reach the value parsers). Afterwards the settings must be in range
 * whatever the input: orders within the build's limits and min <= max, choices among
 * their values, strings terminated inside their fields; the USLUB_FAULT parser must agree
 * with itself. Messages about bad values go to stderr, which the runner closes. */
#include "os/options.h"
#include "types.h"
#include "os/os.h"
#include "size_classes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                              \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stdout, "fuzz_options: %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static const char *const names[] = {
    "USLUB_MIN_ORDER",	"USLUB_MAX_ORDER", "USLUB_MIN_OBJECTS", "USLUB_HIGH_ORDER",
    "USLUB_BACKGROUND", "USLUB_MEM_LIMIT", "USLUB_STATS",	"USLUB_STATS_FILE",
    "USLUB_NUMA",	"USLUB_FAULT",	   "USLUB_VERBOSE",	"USLUB_DEBUG",
    "USLUB_DECAY_MS",	"USLUB_SHEAVES",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static char buf[8192];
	char *env[33];
	size_t n = 0, out = 0;
	if (len > 4096)
		return 0;
	size_t i = 0;
	while (i < len && n < 32) {
		env[n++] = buf + out;
		if (data[i] == '@' && i + 1 < len) {
			const char *name = names[data[i + 1] % (sizeof(names) / sizeof(names[0]))];
			size_t l = strlen(name);
			memcpy(buf + out, name, l);
			out += l;
			buf[out++] = '=';
			i += 2;
		}
		while (i < len && data[i] != '\n')
			buf[out++] = data[i] ? (char)data[i] : ' ', i++;
		buf[out++] = '\0';
		i++;
	}
	env[n] = NULL;
	uslub_options_init(env);

	REQUIRE(uslub_config.min_order <= uslub_config.max_order);
	REQUIRE(uslub_config.max_order <= USLUB_MAX_ORDER);
	REQUIRE(uslub_config.high_order_wait <= 1);
	REQUIRE(uslub_config.background == USLUB_BG_OFF || uslub_config.background == USLUB_BG_ON ||
		uslub_config.background == USLUB_BG_AUTO);
	REQUIRE(uslub_config.verbose <= 1);
	REQUIRE(uslub_config.sheaves <= SHEAF_MAX);
	REQUIRE(uslub_config.decay_ms >= 80 && uslub_config.decay_ms <= 3600000);
	REQUIRE(uslub_config.stats <= USLUB_STATS_LIVE); /* the last mode */
	REQUIRE(memchr(uslub_config.stats_file, 0, sizeof(uslub_config.stats_file)));
	REQUIRE(memchr(uslub_config.numa, 0, sizeof(uslub_config.numa)));
	REQUIRE(memchr(uslub_config.fault, 0, sizeof(uslub_config.fault)));

	/* The fault spec as parsed at start-up; parsing twice gives the same plan. */
	struct uslub_fault_plan a, b;
	int ra = uslub_fault_parse(uslub_config.fault, &a);
	int rb = uslub_fault_parse(uslub_config.fault, &b);
	REQUIRE(ra == rb && memcmp(&a, &b, sizeof(a)) == 0);
	REQUIRE(ra == 0 || ra == -1);
	for (int k = 0; k < 4; k++)
		if (ra == -1)
			REQUIRE(a.nth[k] == 0 && a.every[k] == 0);
	return 0;
}
