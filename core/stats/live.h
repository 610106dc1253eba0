/* The live view: USLUB_STATS=live publishes the statistics, as the JSON of the exit dump,
 * in a shared-memory file /dev/shm/uslub.<pid> that `tools/uslub top <pid>` reads. A
 * thread of its own rewrites the page every LIVE_PERIOD_MS, so nothing is added to
 * malloc or free, and the file is removed at exit.
 *
 * The file starts with this header, then `len` bytes of JSON. `seq` is odd while the
 * writer is at work: a reader copies the header and the text, and keeps the copy only if
 * it read the same even `seq` before and after (a seqlock across processes). */
#ifndef USLUB_LIVE_H
#define USLUB_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define USLUB_LIVE_MAGIC   "USLUBLV"
#define USLUB_LIVE_VERSION 1
#define USLUB_LIVE_SIZE	   (512UL << 10) /* header and text; the file is sparse */

struct uslub_live_header {
	char magic[8];	      /* "USLUBLV\0" */
	uint32_t version;     /* USLUB_LIVE_VERSION */
	uint32_t header_size; /* the text starts here */
	uint64_t seq;	      /* odd while being written */
	uint64_t pid;
	uint64_t updates; /* pages written so far */
	uint64_t time_ns; /* CLOCK_REALTIME of this page */
	uint64_t len;	  /* bytes of JSON text */
	uint64_t period_ms;
};
_Static_assert(sizeof(struct uslub_live_header) == 64, "the readers unpack 64 bytes");

#pragma GCC visibility push(hidden)

/* Map the page and start the writer thread; from the library constructor only, since
 * pthread_create allocates. Says why on stderr and carries on when it cannot. */
void uslub_live_start(void);
/* At exit: stop writing and remove the file (only in the process that made it, so a
 * forked child leaves its parent's page alone). */
void uslub_live_stop(void);

/* From stats.c: the JSON dump written into buf; returns its length, or 0 when it did not
 * fit. with_smaps reads /proc/self/smaps for the resident and huge-page figures. */
size_t uslub_stats_format_json(char *buf, size_t cap, bool with_smaps);

#pragma GCC visibility pop

#endif
