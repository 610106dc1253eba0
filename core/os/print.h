/* A small formatter that never allocates, so reports can be written from inside the
 * allocator (the same reason mimalloc carries its own). Understands %s %c %d %u %x %p
 * with the l, ll and z length modifiers, a field width and '-' for left alignment. */
#ifndef USLUB_PRINT_H
#define USLUB_PRINT_H

#include <stdarg.h>
#include <stddef.h>

struct uslub_out {
	int fd; /* flushed here when full; -1 keeps it in memory only */
	size_t len;
	char buf[2048];
};

void uslub_out_init(struct uslub_out *o, int fd);
void uslub_printf(struct uslub_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void uslub_vprintf(struct uslub_out *o, const char *fmt, va_list ap);
void uslub_out_flush(struct uslub_out *o);

/* One formatted line straight to stderr. */
void uslub_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
