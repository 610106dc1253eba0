/* rss_after_free: how much memory an allocator keeps once a program has freed it all.
 *
 * Allocates 1 GiB in 64-byte objects, frees every one, calls malloc_trim(0), and prints
 * the resident set size (from /proc/self/statm) at the peak, at once after the trim, and
 * 2 seconds later, for allocators that return memory from a background thread or on a
 * timer. malloc_trim is glibc's call; an allocator that does not export it leaves glibc's
 * in place, which trims glibc's (unused) heap and nothing else: that is what a program
 * calling it would get.
 *
 * The pointer table itself (128 MiB) is mapped with mmap and unmapped before measuring,
 * so it counts against no allocator.
 *
 * Output: one line, "peak_kib N trim_kib N later_kib N". */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rss.h"

#define TOTAL	 ((size_t)1 << 30)
#define OBJ_SIZE 64

int main(int argc, char **argv)
{
	size_t total = argc > 1 ? strtoull(argv[1], NULL, 0) : TOTAL;
	size_t n = total / OBJ_SIZE;
	void **objs = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (objs == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		objs[i] = malloc(OBJ_SIZE);
		if (objs[i] == NULL) {
			fprintf(stderr, "malloc failed after %zu objects\n", i);
			return 1;
		}
		/* touched, as a program would, so every object is resident */
		memset(objs[i], (int)(i & 0xff), OBJ_SIZE);
	}
	long peak = rss_kib();
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char *)objs[i])[OBJ_SIZE - 1] != (i & 0xff)) {
			fprintf(stderr, "object %zu was overwritten\n", i);
			return 1;
		}
		free(objs[i]);
	}
	munmap(objs, n * sizeof(void *));
	malloc_trim(0);
	long trimmed = rss_kib();
	sleep(2);
	long later = rss_kib();
	printf("peak_kib %ld trim_kib %ld later_kib %ld\n", peak, trimmed, later);
	return 0;
}
