/* Another thread of the process seen from outside, as the kernel shows it in
 * /proc/self/task/TID: whether it is blocked in a system call and where its user stack
 * stands then, and whether a word of that stack points into our own code. The idle drain
 * takes a parked thread's sheaves on that evidence (thread/thread.c, "a parked thread's
 * sheaves"). Nothing here allocates. */
#include "os/os.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Our own executable segment, from the ELF header the linker names in every module: in
 * libuslub.so, the library's code; linked into a program, the program's. */
extern const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

void uslub_os_own_text(uintptr_t *lo, uintptr_t *hi)
{
	static uintptr_t text_lo, text_hi;
	if (!text_hi) {
		const ElfW(Ehdr) *eh = &__ehdr_start;
		const ElfW(Phdr) *ph = (const void *)((const char *)eh + eh->e_phoff);
		uintptr_t base = 0, l = UINTPTR_MAX, h = 0;
		for (unsigned i = 0; i < eh->e_phnum && i < 64; i++)
			if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0)
				base = (uintptr_t)eh - ph[i].p_vaddr;
		for (unsigned i = 0; i < eh->e_phnum && i < 64; i++) {
			if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X))
				continue;
			uintptr_t s = base + ph[i].p_vaddr, e = s + ph[i].p_memsz;
			l = s < l ? s : l;
			h = e > h ? e : h;
		}
		/* No executable segment found: all of the address space, so nothing passes. */
		text_lo = h ? l : 0;
		__atomic_store_n(&text_hi, h ? h : UINTPTR_MAX, __ATOMIC_RELEASE);
	}
	*lo = text_lo;
	*hi = __atomic_load_n(&text_hi, __ATOMIC_ACQUIRE);
}

static const char *skip_spaces(const char *p, const char *end)
{
	while (p < end && *p == ' ')
		p++;
	return p;
}

/* A number of /proc's, decimal or "0x" hex, at *p; *p left after it. */
static uint64_t parse_number(const char **p, const char *end)
{
	const char *s = skip_spaces(*p, end);
	uint64_t v = 0;
	if (end - s > 2 && s[0] == '0' && s[1] == 'x') {
		s += 2;
		v = uslub_parse_hex(&s, end);
	} else {
		for (; s < end && *s >= '0' && *s <= '9'; s++)
			v = v * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	return v;
}

/* "/proc/self/task/TID/<file>" into path, by hand: snprintf is not known not to allocate. */
static void task_path(char *path, int tid, const char *file)
{
	char digits[16];
	unsigned n = 0, v = (unsigned)tid;
	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < sizeof(digits));
	char *p = stpcpy(path, "/proc/self/task/");
	while (n)
		*p++ = digits[--n];
	*p++ = '/';
	strcpy(p, file);
}

int uslub_os_task_look(int tid, struct uslub_os_task *out)
{
	char path[48], buf[512];
	/* The syscall file: "running", or the call's number ("-1" for none: a page fault)
	 * then its six arguments, the stack pointer and the program counter, in hex. */
	task_path(path, tid, "syscall");
	long len = uslub_os_read_file(path, buf, sizeof(buf));
	if (len <= 0)
		return -1;
	const char *p = buf, *end = buf + len;
	out->syscall = -1;
	out->sp = out->pc = 0;
	if (*p >= '0' && *p <= '9') {
		out->syscall = (long)parse_number(&p, end);
		for (unsigned i = 0; i < 6; i++)
			parse_number(&p, end);
		out->sp = parse_number(&p, end);
		out->pc = parse_number(&p, end);
		if (!out->sp)
			out->syscall = -1;
	}
	/* stat: field 22 is the start time in clock ticks since boot; the command name in
	 * field 2 may hold spaces and parentheses, so fields are counted from its last ')'. */
	task_path(path, tid, "stat");
	len = uslub_os_read_file(path, buf, sizeof(buf));
	if (len <= 0)
		return -1;
	p = NULL;
	for (const char *q = buf; q < buf + len; q++)
		if (*q == ')')
			p = q;
	if (!p)
		return -1;
	end = buf + len;
	p++;
	for (unsigned field = 3; field < 22; field++) {
		p = skip_spaces(p, end);
		while (p < end && *p != ' ')
			p++;
	}
	out->start_ticks = parse_number(&p, end);
	return 0;
}

uint64_t uslub_os_boot_ticks(void)
{
	struct timespec ts;
	uslub_os_clock(CLOCK_BOOTTIME, &ts);
	long hz = sysconf(_SC_CLK_TCK);
	hz = hz > 0 ? hz : 100;
	return (uint64_t)ts.tv_sec * (uint64_t)hz +
	       (uint64_t)ts.tv_nsec / (1000000000ULL / (uint64_t)hz);
}

/* Read a page at a time with process_vm_readv, which fails cleanly past the stack's end
 * (an unmapped or guard page) where a plain load would fault. */
bool uslub_os_stack_holds(uintptr_t sp, uintptr_t pc, uintptr_t lo, uintptr_t hi, size_t bytes)
{
	if (pc >= lo && pc < hi)
		return true;
	enum { CHUNK = 4096 };
	uintptr_t words[CHUNK / sizeof(uintptr_t)];
	uintptr_t at = sp & ~(uintptr_t)(sizeof(uintptr_t) - 1), stop = sp + bytes;
	pid_t pid = getpid();
	int saved = errno;
	while (at < stop) {
		size_t want = CHUNK - (at & (CHUNK - 1));
		struct iovec local = {words, want}, remote = {(void *)at, want};
		ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
		if (got <= 0) {
			/* EFAULT: the end of the stack. Anything else (EPERM under a seccomp
			 * filter): the stack cannot be read, so it may hold anything. */
			bool unknown = got < 0 && errno != EFAULT;
			errno = saved;
			return unknown || at == (sp & ~(uintptr_t)(sizeof(uintptr_t) - 1));
		}
		for (size_t i = 0; i < (size_t)got / sizeof(uintptr_t); i++)
			if (words[i] >= lo && words[i] < hi) {
				errno = saved;
				return true;
			}
		at += (uintptr_t)got;
	}
	errno = saved;
	return false;
}
