/* rss.h: the calling process's resident memory, for the bench tools that measure what an
 * allocator keeps (parked_threads, parked_medium, spike, rss_after_free). */
#ifndef USLUB_BENCH_RSS_H
#define USLUB_BENCH_RSS_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Resident KiB from /proc/self/statm; exits on a read failure, which no figure survives. */
static inline long rss_kib(void)
{
	long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f == NULL || fscanf(f, "%ld %ld", &size, &resident) != 2) {
		perror("/proc/self/statm");
		exit(1);
	}
	fclose(f);
	return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
