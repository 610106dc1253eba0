/* Counted assertions for the unit tests of core modules. */
#ifndef USLUB_UNIT_H
#define USLUB_UNIT_H

#include <stdio.h>

static unsigned long unit_checks, unit_failures;

#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		unit_checks++;                                                                     \
		if (!(cond)) {                                                                     \
			unit_failures++;                                                           \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

static inline int unit_summary(const char *name)
{
	printf("%s: %lu checks, %lu failed\n", name, unit_checks, unit_failures);
	return unit_failures ? 1 : 0;
}

#endif
