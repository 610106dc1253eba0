/* Where a dump goes (emit.c, section 1): the allocator's own formatter into an fd,
 * written as its buffer fills, or into memory (the live page). */
#include "stats/snapshot.h"

#include <string.h>

void uslub_sink_fd(struct sink *s, int fd)
{
	uslub_out_init(&s->o, fd);
	s->mem = NULL;
}

void uslub_sink_mem(struct sink *s, char *buf, size_t cap)
{
	uslub_out_init(&s->o, -1);
	s->mem = buf;
	s->cap = cap;
	s->len = 0;
	s->overflow = false;
}

void uslub_sink_end(struct sink *s)
{
	if (!s->mem)
		uslub_out_flush(&s->o);
}

/* Every write produces well under the formatter's 2 KiB, so in memory mode each one is
 * copied out whole. */
void uslub_sink_write(struct sink *s, const char *fmt, va_list ap)
{
	uslub_vprintf(&s->o, fmt, ap);
	if (!s->mem)
		return;
	if (s->len + s->o.len <= s->cap)
		memcpy(s->mem + s->len, s->o.buf, s->o.len);
	else
		s->overflow = true;
	s->len += s->o.len;
	s->o.len = 0;
}
