/* uslub.h's calls into the statistics: the allocator set up first (a program may ask
 * before its first malloc), then the observer answers. And the check libuslub_bounds.so
 * makes before each memcpy, memmove and memset (USLUB_DEBUG=B, debug/bounds.c): before
 * start-up no block is uslub's and B is off, so it sets nothing up. */
#include "api/api.h"
#include "stats/stats.h"

void uslub_stats_print(int fd, int json)
{
	uslub_init();
	uslub_stats_emit(fd, json);
}

void uslub_get_totals(struct uslub_totals *out)
{
	uslub_init();
	uslub_stats_totals(out);
}

int uslub_cache_info(const char *name, struct uslub_cache_info *out)
{
	uslub_init();
	return uslub_stats_cache_info(name, out);
}

void uslub_check_write(const void *dst, size_t n, const char *op, const void *caller)
{
	if (unlikely(uslub_debug_bounds))
		uslub_debug_check_write(dst, n, op, caller);
}
