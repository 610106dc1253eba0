#include "os/print.h"

#include "os/os.h"

#include <stdint.h>

void uslub_out_init(struct uslub_out *o, int fd)
{
	o->fd = fd;
	o->len = 0;
}

void uslub_out_flush(struct uslub_out *o)
{
	if (o->fd >= 0 && o->len) {
		uslub_os_write(o->fd, o->buf, o->len);
		o->len = 0;
	}
}

static void put(struct uslub_out *o, char c)
{
	if (o->len == sizeof(o->buf)) {
		if (o->fd < 0)
			return;
		uslub_out_flush(o);
	}
	o->buf[o->len++] = c;
}

static void put_field(struct uslub_out *o, const char *s, size_t n, int width, int left, char pad)
{
	int fill = width > (int)n ? width - (int)n : 0;
	if (!left)
		while (fill-- > 0)
			put(o, pad);
	while (n--)
		put(o, *s++);
	if (left)
		while (fill-- > 0)
			put(o, ' ');
}

void uslub_vprintf(struct uslub_out *o, const char *fmt, va_list ap)
{
	for (const char *f = fmt; *f; f++) {
		if (*f != '%') {
			put(o, *f);
			continue;
		}
		f++;
		int left = 0, width = 0, lng = 0;
		char pad = ' ';
		if (*f == '-') {
			left = 1;
			f++;
		}
		if (*f == '0') {
			pad = '0';
			f++;
		}
		while (*f >= '0' && *f <= '9')
			width = width * 10 + (*f++ - '0');
		while (*f == 'l' || *f == 'z') {
			lng++;
			f++;
		}
		char tmp[24];
		int n = 0;
		uint64_t v = 0;
		int neg = 0;
		unsigned base = 10;
		switch (*f) {
		case 's': {
			const char *s = va_arg(ap, const char *);
			if (!s)
				s = "(null)";
			size_t len = 0;
			while (s[len])
				len++;
			put_field(o, s, len, width, left, ' ');
			continue;
		}
		case 'c':
			tmp[0] = (char)va_arg(ap, int);
			put_field(o, tmp, 1, width, left, ' ');
			continue;
		case 'd': {
			int64_t sv = lng ? va_arg(ap, int64_t) : va_arg(ap, int);
			neg = sv < 0;
			v = neg ? (uint64_t)0 - (uint64_t)sv : (uint64_t)sv;
			break;
		}
		case 'u':
			v = lng ? va_arg(ap, uint64_t) : va_arg(ap, unsigned);
			break;
		case 'x':
			v = lng ? va_arg(ap, uint64_t) : va_arg(ap, unsigned);
			base = 16;
			break;
		case 'p':
			v = (uint64_t)(uintptr_t)va_arg(ap, void *);
			base = 16;
			put(o, '0');
			put(o, 'x');
			break;
		case '%':
			put(o, '%');
			continue;
		default:
			put(o, '%');
			if (!*f)
				return;
			put(o, *f);
			continue;
		}
		do {
			tmp[sizeof(tmp) - 1 - n++] = "0123456789abcdef"[v % base];
			v /= base;
		} while (v);
		if (neg)
			tmp[sizeof(tmp) - 1 - n++] = '-';
		put_field(o, tmp + sizeof(tmp) - n, (size_t)n, width, left, pad);
	}
}

void uslub_printf(struct uslub_out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	uslub_vprintf(o, fmt, ap);
	va_end(ap);
}

void uslub_message(const char *fmt, ...)
{
	struct uslub_out o;
	uslub_out_init(&o, 2);
	va_list ap;
	va_start(ap, fmt);
	uslub_vprintf(&o, fmt, ap);
	va_end(ap);
	uslub_out_flush(&o);
}
