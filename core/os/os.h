/* The one door to the operating system. Nothing else in uslub calls mmap, munmap, mremap,
 * madvise or mbind, so the tests can make each of them fail on purpose (uslub_os_fail).
 *
 * Contract: sizes and addresses are multiples of the page size; every call returns 0 (or a
 * mapping) on success and -1 (or NULL) with errno set as the system call sets it, and
 * leaves errno untouched on success. None of them allocates. */
#ifndef USLUB_OS_H
#define USLUB_OS_H

#include "calls_out.h"
#include "os/options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* Region memory is readable and writable but backed lazily (MAP_NORESERVE): nothing is
 * resident until touched.
 *
 * Map exactly [addr, addr + size), never over an existing mapping: NULL with errno
 * EEXIST when something is there already, ENOMEM when the kernel refuses (RLIMIT_AS). */
void *uslub_os_map_at(void *addr, size_t size);
/* Find `size` free bytes aligned to `align` (a power of two) by mapping size + align and
 * trimming, and keep the first `keep` bytes of them mapped. Costs `align` more address
 * space for a moment: the fallback when uslub_os_map_at finds no free place. */
void *uslub_os_reserve(size_t size, size_t align, size_t keep);
/* Where the kernel would place a new mapping now (the top of its free area), or 0. Maps
 * and unmaps one page; never made to fail by fault injection (nothing to report). */
uintptr_t uslub_os_map_top(void);
/* A huge block's mapping: `size` bytes, accounted (no MAP_NORESERVE, so the overcommit
 * heuristic refuses impossible sizes), aligned to `align` where the address space allows
 * and at least to `min_align` (<= align). */
void *uslub_os_map_aligned(size_t size, size_t align, size_t min_align);
/* Whether RLIMIT_AS or RLIMIT_DATA bounds the address space: then mapping fewer bytes
 * can turn a refusal into success. */
bool uslub_os_space_limited(void);
int uslub_os_unmap(void *addr, size_t size);
/* A mapping of its own (the huge-block table). */
void *uslub_os_map(size_t size);
/* Move or grow a huge block's mapping (mremap with MREMAP_MAYMOVE). */
void *uslub_os_remap(void *addr, size_t old_size, size_t new_size);
/* Hand pages back: afterwards they read as zero and are not resident. */
int uslub_os_release(void *addr, size_t size);
/* Move the pages of [from, from + size) to `to`, replacing what was mapped there
 * (mremap with MREMAP_FIXED and MREMAP_DONTUNMAP, Linux 5.7): `from` stays mapped, as
 * after uslub_os_release; `to` reads what `from` held, resident without a fault. The
 * kernel keeps `to` a mapping of its own (its pages keep their old offsets), which
 * uslub_os_renew undoes. -1 where refused (EINVAL on a kernel without the flag; EFAULT
 * where `from` crosses two mappings, before 6.18), and then nothing moved and `to` is
 * mapped, empty: mapped afresh where the kernel unmapped it before refusing. */
int uslub_os_move(void *from, void *to, size_t size);
/* Hand pages back by mapping the range afresh, so that the kernel joins it to the
 * mappings beside it again. 0; -1 where refused with the range as it was; -2 where the
 * range could be neither mapped again nor found mapped (a kernel before 6.12 unmaps
 * first): it must not be used again. */
int uslub_os_renew(void *addr, size_t size);
/* mincore: a byte a page, bit 0 set where the page is resident. */
int uslub_os_residency(void *addr, size_t size, unsigned char *vec);
/* mprotect: no access, or read and write again; -1 when refused (a mapping split past
 * vm.max_map_count). USLUB_FAULT counts it as a madvise: both change what pages are. */
int uslub_os_protect(void *addr, size_t size, bool access);

/* How many of the range's pages are resident (mincore), or -1 where it is refused. */
long uslub_os_resident_pages(void *addr, size_t size);

/* Bind a range's future pages to a NUMA node (libnuma's mbind, MPOL_PREFERRED). */
int uslub_os_bind(void *addr, size_t size, unsigned node);
/* libnuma's mbind, once node.c has loaded libnuma; until then uslub_os_bind fails. */
void uslub_os_use_mbind(void *fn);
/* Fault the pages in now (MADV_POPULATE_WRITE, or a write to each page where the kernel
 * lacks it), so whoever touches them later takes no page fault. */
int uslub_os_populate(void *addr, size_t size);
/* Ask for transparent huge pages on a 2 MiB-aligned range (MADV_HUGEPAGE). */
int uslub_os_hugepage(void *addr, size_t size);
int uslub_os_nohugepage(void *addr, size_t size);
/* Whether a fault in a MADV_HUGEPAGE range may stall in direct compaction, from
 * /sys/kernel/mm/transparent_hugepage/{enabled,defrag}: 1 stalls, 0 does not, -1 no THP. */
int uslub_os_thp_policy(void);
/* Block on a futex word while it holds `expected` (or until woken); wake waiters. */
void uslub_os_futex_wait(_Atomic uint32_t *word, uint32_t expected, long timeout_ms);
void uslub_os_futex_wake(_Atomic uint32_t *word);
/* A full barrier on every running thread of the process (membarrier(2)): the costly side
 * of an asymmetric fence whose cheap side is a compiler barrier. 0, or -1 if unsupported. */
int uslub_os_membarrier(void);

/* Another thread of the process as /proc/self/task/TID shows it (task.c). */
struct uslub_os_task {
	long syscall;	      /* the system call it is blocked in; -1: running, or none */
	uintptr_t sp, pc;     /* its user stack pointer and program counter there */
	uint64_t start_ticks; /* when it started, in clock ticks since boot */
};
/* 0, or -1 when the files cannot be read (no such thread, no /proc). */
int uslub_os_task_look(int tid, struct uslub_os_task *out);
/* Now, in the same ticks (CLOCK_BOOTTIME through the vDSO). */
uint64_t uslub_os_boot_ticks(void);
/* Whether a thread's stack from sp up (at most `bytes`, to the stack's end) holds the
 * frame of a signal that interrupted code in [lo, hi) (our code): true as well when the
 * stack cannot be read (or, off x86-64, whenever a handler is installed). */
bool uslub_os_stack_interrupted(uintptr_t sp, uintptr_t lo, uintptr_t hi, size_t bytes);

/* Resident and huge-page-backed bytes from /proc/self/smaps ("Rss", "AnonHugePages"), read
 * in a fixed buffer: over every mapping, and over the mappings for which ours(start, end)
 * is nonzero. 0, or -1 with errno when the file cannot be read. */
struct uslub_os_smaps {
	uint64_t rss, anon_huge;	 /* whole process */
	uint64_t our_rss, our_anon_huge; /* mappings `ours` accepts */
};
int uslub_os_smaps(int (*ours)(uintptr_t start, uintptr_t end), struct uslub_os_smaps *out);
/* The lower-case hex number at *p, read up to `end` or the first other character, where
 * *p is left (the addresses of /proc/self/maps and smaps). */
uintptr_t uslub_parse_hex(const char **p, const char *end);
/* A file at `path`, created or truncated with mode 0600, `size` bytes long, mapped shared
 * and writable (the live statistics page). NULL with errno on failure. */
void *uslub_os_map_shared_file(const char *path, size_t size);
int uslub_os_unlink(const char *path);

/* Fault injection for tests: fail the next `count` calls of every kind after `skip`. */
void uslub_os_fail(unsigned long skip, unsigned long count);

/* Fault injection by rule (USLUB_FAULT). A spec is comma-separated rules "kind:N" (the Nth
 * call of that kind fails) or "kind:every:K" (every Kth), N and K from 1, with kind one of
 * mmap (uslub_os_map_at, _reserve, _map_aligned, _map, _map_shared_file), mremap
 * (uslub_os_remap), madvise (uslub_os_release, _populate) or all (every call of those
 * kinds, counted together).
 * A failing call does nothing and returns failure with errno ENOMEM. The empty spec
 * injects nothing. Indexed by kind in the order above. */
/* (struct uslub_fault_plan and its parser: options.h.) Install a plan (NULL: none) and
 * restart its call counters. */
void uslub_os_fault_set(const struct uslub_fault_plan *plan);
/* Calls failed by the rules since start-up. */
unsigned long uslub_os_fault_injected(void);

/* Raw output that never allocates. */
void uslub_os_write(int fd, const char *buf, size_t len);
unsigned uslub_os_ncpus(void);
/* A small file (sysfs, procfs) read whole into buf, at most cap - 1 bytes, followed by
 * a NUL: its length, or -1 when it cannot be opened (errno untouched either way). */
long uslub_os_read_file(const char *path, char *buf, size_t cap);
/* Resident bytes of the process (from /proc/self/statm), 0 if unknown. */
uint64_t uslub_os_rss(void);
/* clock_gettime through the vDSO, found once in its symbol table (the system call if it
 * has none): libc's wrapper would map 64 KiB more of libc's text into every process. */
void uslub_os_clock(clockid_t id, struct timespec *ts);
/* Whether uslub_os_clock found the vDSO's call (for the tests). */
bool uslub_os_clock_is_vdso(void);
/* sched_yield as the system call, for the same reason. */
void uslub_os_yield(void);
/* Whether addr lies in the dynamic linker (ld.so), whose frees may come with libc's
 * internal locks held. */
bool uslub_os_in_ldso(const void *addr);
/* The executable segment of the module this code is linked into: libuslub.so's code
 * when preloaded, the whole program's when linked into it. */
void uslub_os_own_text(uintptr_t *lo, uintptr_t *hi);
/* Milliseconds of CLOCK_MONOTONIC_COARSE: a vDSO read, no system call - the clock of the
 * decay, the barns' decay and the huge-mapping cache's expiry. */
uint64_t uslub_os_now_ms(void);

/* ---- random numbers (random.c) ----------------------------------------------------- */

/* splitmix64: the next value of the sequence whose state is *x. */
uint64_t uslub_splitmix64(uint64_t *x);
/* A seed from the kernel's 16 random bytes for this process (AT_RANDOM), read without
 * allocating. */
uint64_t uslub_random_seed(void);
/* Seed uslub_random from *seed (advancing it), once at start-up. */
void uslub_random_init(uint64_t *seed);
/* 64 random bits, lock-free from any thread (the freelist order of new slabs,
 * USLUB_HARDEN; the free-pointer keys). */
uint64_t uslub_random(void);

#endif
