/* Another thread of the process seen from outside, as the kernel shows it in
 * /proc/self/task/TID: whether it is blocked in a system call and where its user stack
 * stands then, and whether that stack holds the frame of a signal that interrupted our own
 * code. The idle drain takes a parked thread's sheaves on that evidence (thread/thread.c,
 * "a parked thread's sheaves"). Nothing here allocates. */
#include "os/os.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

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
	long hz = USLUB_OUT(sysconf(_SC_CLK_TCK));
	hz = hz > 0 ? hz : 100;
	return (uint64_t)ts.tv_sec * (uint64_t)hz +
	       (uint64_t)ts.tv_nsec / (1000000000ULL / (uint64_t)hz);
}

/* The restorers of the handlers installed now (the kernel's record of each signal's
 * action): a signal frame on a stack starts with one (x86-64 delivers no handler without). */
static unsigned restorers(uintptr_t *out, unsigned max)
{
	struct kernel_action {
		uintptr_t handler;
		unsigned long flags;
		uintptr_t restorer;
		uint64_t mask;
	} k;
	unsigned n = 0;
	int saved = errno;
	for (int sig = 1; sig <= 64; sig++) {
		if (USLUB_OUT(syscall(SYS_rt_sigaction, sig, NULL, &k, sizeof(k.mask))) != 0 ||
		    k.handler <= 1 || !(k.flags & 0x04000000 /* SA_RESTORER */))
			continue;
		bool seen = false;
		for (unsigned i = 0; i < n; i++)
			seen |= out[i] == k.restorer;
		if (!seen && n < max)
			out[n++] = k.restorer;
	}
	errno = saved;
	return n;
}

/* The interrupted program counter of a signal frame: after the restorer's address, the
 * ucontext (flags, link, the 24-byte stack_t), whose mcontext holds r8-r15, rdi, rsi, rbp,
 * rbx, rdx, rax, rcx, rsp and then rip: 22 words on. */
#define FRAME_RIP_WORD 22

/* A thread's stack from sp up, read a page at a time with process_vm_readv, which fails
 * cleanly past the stack's end (an unmapped or guard page) where a plain load would
 * fault. Called by the one drain at a time (under the registry lock), so one buffer. */
static uintptr_t stack_words[(64 << 10) / sizeof(uintptr_t)];

bool uslub_os_stack_interrupted(uintptr_t sp, uintptr_t lo, uintptr_t hi, size_t bytes)
{
#if defined(__x86_64__)
	uintptr_t r[16];
	unsigned nr = restorers(r, 16);
	if (!nr)
		return false;
	if (bytes > sizeof(stack_words))
		bytes = sizeof(stack_words);
	uintptr_t at = sp & ~(uintptr_t)(sizeof(uintptr_t) - 1);
	size_t got = 0;
	pid_t pid = getpid();
	int saved = errno;
	while (got < bytes) {
		size_t want = 4096 - ((at + got) & 4095);
		want = want < bytes - got ? want : bytes - got;
		struct iovec local = {(char *)stack_words + got, want};
		struct iovec remote = {(void *)(at + got), want};
		ssize_t n = USLUB_OUT(process_vm_readv(pid, &local, 1, &remote, 1, 0));
		if (n <= 0) {
			/* EFAULT: the end of the stack. Anything else (EPERM under a seccomp
			 * filter): the stack cannot be read, so it may hold anything. */
			bool unknown = (n < 0 && errno != EFAULT) || got == 0;
			errno = saved;
			if (unknown)
				return true;
			break;
		}
		got += (size_t)n;
	}
	errno = saved;
	size_t words = got / sizeof(uintptr_t);
	for (size_t i = 0; i + FRAME_RIP_WORD < words; i++)
		for (unsigned k = 0; k < nr; k++)
			if (stack_words[i] == r[k] && stack_words[i + FRAME_RIP_WORD] >= lo &&
			    stack_words[i + FRAME_RIP_WORD] < hi)
				return true;
	return false;
#else
	uintptr_t r[1];
	(void)sp, (void)lo, (void)hi, (void)bytes;
	return restorers(r, 1) != 0;
#endif
}
