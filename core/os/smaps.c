/* What the kernel says about our memory: resident bytes from /proc/self/statm, resident
 * and huge-page-backed bytes per mapping from /proc/self/smaps (the statistics and the
 * live page), and the hex numbers both procfs files are written in. */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

uint64_t uslub_os_rss(void)
{
	int saved = errno;
	char buf[128];
	uint64_t pages = 0;
	int fd = USLUB_OUT(open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
	if (fd < 0) {
		errno = saved;
		return 0;
	}
	ssize_t n = USLUB_OUT(read(fd, buf, sizeof(buf) - 1));
	USLUB_OUT(close(fd));
	if (n > 0) {
		const char *p = buf;
		while (*p && *p != ' ')
			p++;
		while (*p == ' ')
			p++;
		while (*p >= '0' && *p <= '9')
			pages = pages * 10 + (uint64_t)(*p++ - '0');
	}
	errno = saved;
	return pages * (uint64_t)getauxval(AT_PAGESZ);
}

uintptr_t uslub_parse_hex(const char **p, const char *end)
{
	uintptr_t v = 0;
	for (; *p < end; (*p)++) {
		char ch = **p;
		unsigned d;
		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a' + 10);
		else
			break;
		v = v * 16 + d;
	}
	return v;
}

/* "Name:   1234 kB" -> bytes */
static uint64_t parse_kb(const char *p)
{
	uint64_t v = 0;
	while (*p == ' ')
		p++;
	while (*p >= '0' && *p <= '9')
		v = v * 10 + (uint64_t)(*p++ - '0');
	return v << 10;
}

static void smaps_line(const char *line, const char *end, int (*ours)(uintptr_t, uintptr_t),
		       int *mine, struct uslub_os_smaps *out)
{
	char c = line[0];
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
		/* A mapping's first line: "start-end perms offset dev inode path". */
		const char *p = line;
		uintptr_t start = uslub_parse_hex(&p, end);
		uintptr_t stop = p < end && *p == '-' ? (p++, uslub_parse_hex(&p, end)) : start;
		*mine = ours(start, stop);
	} else if (c == 'R' && memcmp(line, "Rss:", 4) == 0) {
		uint64_t v = parse_kb(line + 4);
		out->rss += v;
		if (*mine)
			out->our_rss += v;
	} else if (c == 'A' && memcmp(line, "AnonHugePages:", 14) == 0) {
		uint64_t v = parse_kb(line + 14);
		out->anon_huge += v;
		if (*mine)
			out->our_anon_huge += v;
	}
}

int uslub_os_smaps(int (*ours)(uintptr_t start, uintptr_t end), struct uslub_os_smaps *out)
{
	int saved = errno;
	char buf[4096];
	size_t have = 0;
	int mine = 0;
	memset(out, 0, sizeof(*out));
	int fd = USLUB_OUT(open("/proc/self/smaps", O_RDONLY | O_CLOEXEC));
	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t n = USLUB_OUT(read(fd, buf + have, sizeof(buf) - 1 - have));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			*nl = '\0';
			smaps_line(line, nl, ours, &mine, out);
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		if (have == sizeof(buf) - 1)
			have = 0; /* a line longer than the buffer (a long path): skip it */
		memmove(buf, line, have);
	}
	USLUB_OUT(close(fd));
	errno = saved;
	return 0;
}
