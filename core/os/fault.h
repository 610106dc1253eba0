/* Fault injection inside the OS layer (fault.c): the calls of os.c ask, before each
 * system call, whether a test wants it to fail. The rules' public face is in os.h. */
#ifndef USLUB_OS_FAULT_H
#define USLUB_OS_FAULT_H

/* The kinds of call USLUB_FAULT can make fail, by the system call behind them. munmap and
 * mbind are not among them: neither is on a path that can report ENOMEM to the caller. */
enum fault_kind { FAULT_MMAP, FAULT_MREMAP, FAULT_MADVISE, FAULT_ALL, NR_FAULT_KINDS };

/* Decides whether this OS call is one the test asked to fail: uslub_os_fail's window
 * (racy counters are fine: it is used by single-threaded tests), then the USLUB_FAULT
 * rules, whose counters are atomic because preloaded programs have threads. 1 with errno
 * ENOMEM when it is. */
int uslub_os_injected_failure(enum fault_kind kind);

#endif
