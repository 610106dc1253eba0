/* Zeroing a warm block without touching what was never touched.
 *
 * A block taken warm (not PF_COLD) may hold anything: slabs, large blocks, an earlier
 * thread state. Zeroed with memset, every page of it becomes resident, also those the
 * kernel still maps to its zero page. A thread state is the case that matters: 16 pages,
 * of which a thread writes the cache_cpus of the caches it uses (4-6 pages). With a memset
 * each state made on an earlier state's pages cost the whole 64 KiB: threads made in
 * rounds of eight held 26 KiB each more than the round before, 4 now, as glibc
 * (tools/bench/results/thread-state.md). Read first, a page that is all zero - the zero
 * page itself, or one left zeroed - is not written. */
#include "page/page.h"
#include "os/vg.h"

#include <string.h>

void uslub_pages_zero(void *block, size_t bytes)
{
	/* memcheck holds a warm block's bytes undefined (buddy.c): reading them first would
	 * be an error to it. */
	if (uslub_memcheck) {
		memset(block, 0, bytes);
		return;
	}
	for (size_t at = 0; at < bytes; at += USLUB_PAGE_SIZE) {
		char *page = (char *)block + at;
		size_t len = bytes - at < USLUB_PAGE_SIZE ? bytes - at : USLUB_PAGE_SIZE;
		const uint64_t *w = (const uint64_t *)page;
		uint64_t any = 0;
		for (size_t i = 0; i < len / 8 && !any; i++)
			any = w[i];
		for (size_t i = len & ~(size_t)7; i < len && !any; i++)
			any = (unsigned char)page[i];
		if (any)
			memset(page, 0, len);
	}
}
