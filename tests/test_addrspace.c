/* Address space: what a program can allocate under RLIMIT_AS, and sizes no machine has.
 *
 * Built twice, like the API tests: linked with the engine (uslub_ names beside glibc's
 * malloc) and plain (standard names, run under LD_PRELOAD=libuslub.so). Run plain
 * without the preload, it measures glibc's malloc: the figures the README sets side by
 * side, printed and not asserted.
 *
 *   rlimit      one child per block size (64 B, 100 KiB, 1 MiB): RLIMIT_AS is set to the
 *               child's VmSize + 256 MiB, then blocks are allocated until NULL. At least
 *               230 MiB must have been handed out (glibc manages 255 MiB of 100 KiB
 *               blocks), the last failure must be NULL with errno ENOMEM, and once
 *               everything is freed the same amount can be allocated again - and, after
 *               large blocks, a 16 MiB block, which needs address space of its own. With
 *               1 MiB blocks, once not even a quarter of one can be had, a shrink to a
 *               quarter (which would move) is made in place with its bytes.
 *   impossible  sizes the kernel refuses under its overcommit heuristic (64 TiB, 1 TiB):
 *               malloc, calloc, realloc (of a small, a large and a huge block, each left
 *               intact), posix_memalign and the other aligned forms fail with ENOMEM, as
 *               under glibc, and the program goes on allocating.
 *
 * Blocks are chained through their first word, so the test itself needs no array that
 * would take address space from the allocator. */
#include <sys/resource.h>
#include <sys/wait.h>

#include <fcntl.h>

#include "test_util.h"

#define HEADROOM (256 * TU_MIB)
#define WANT	 (230 * TU_MIB)

static int is_uslub(void)
{
#ifdef USLUB_PREFIXED
	return 1;
#else
	return tu_totals_fn() != NULL;
#endif
}

/* A line of /proc/self/status in kB, read without stdio (no allocation once the limit
 * is set); 0 if missing. */
static uint64_t status_kb(const char *key)
{
	static char buf[8192];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strstr(buf, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* Blocks of `size` until NULL; returns how many, with the errno of the failure. */
static size_t fill(size_t size, void **head, int *err)
{
	size_t n = 0;
	errno = 0;
	for (;;) {
		void **p = MALLOC(size);
		if (!p)
			break;
		*p = *head;
		*head = p;
		n++;
	}
	*err = errno;
	return n;
}

static void drain(void **head)
{
	while (*head) {
		void **p = *head;
		*head = *p;
		FREE(p);
	}
}

static int rlimit_child(size_t size, const char *name)
{
	uint64_t vm = status_kb("VmSize:") << 10;
	struct rlimit rl = {vm + HEADROOM, vm + HEADROOM};
	CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
	void *head = NULL;
	int err;
	size_t n = fill(size, &head, &err);
	double mib = (double)(n * size) / TU_MIB;
	printf("  %-7s %8zu blocks = %6.1f MiB before NULL (errno %d)", name, n, mib, err);
	if (!is_uslub()) {
		printf(", glibc: not asserted\n");
		fflush(stdout);
		drain(&head);
		return 0;
	}
	CHECKF(n * size >= WANT, "%s: %.1f MiB of %zu-byte blocks, want 230", name, mib, size);
	CHECKF(err == ENOMEM, "%s: the failure's errno is %d", name, err);
	if (size >= 1 << 20 && head) {
		/* With not even a block of a quarter of the size to be had, a shrink to a
		 * quarter, which would move (api.c), is made in place: a shrink does not fail,
		 * and keeps its bytes. */
		void **big = head, *next = *big;
		head = next;
		((unsigned char *)big)[size / 4 - 1] = 0x5a;
		fill(size / 4, &head, &err);
		void **small = REALLOC(big, size / 4);
		CHECKF(small == big, "%s: a shrink to a quarter with no room: %p, errno %d", name,
		       (void *)small, errno);
		if (small) {
			CHECK(((unsigned char *)small)[size / 4 - 1] == 0x5a && *small == next);
			*small = head;
			head = small;
		}
	}
	drain(&head);
	size_t again = fill(size, &head, &err);
	printf(", %6.1f MiB again after freeing\n", (double)(again * size) / TU_MIB);
	CHECKF(again * size >= WANT, "%s: %.1f MiB after freeing everything", name,
	       (double)(again * size) / TU_MIB);
	CHECKF(err == ENOMEM, "%s: the second failure's errno is %d", name, err);
	drain(&head);
	void *p = MALLOC(size);
	CHECK(p != NULL);
	FREE(p);
	if (size >= 100 << 10) {
		/* The large blocks' address space, free again, is there for a huge block
		 * (a mapping of its own), as it is under glibc once its chunks are unmapped. */
		p = MALLOC(16 << 20);
		CHECKF(p != NULL, "%s: a 16 MiB block after freeing: errno %d", name, errno);
		FREE(p);
	}
	return tu_summary(name);
}

static void rlimit_all(void)
{
	tu_section("RLIMIT_AS = VmSize + 256 MiB: blocks until NULL (ENOMEM), at least 230 "
		   "MiB, and as much again after freeing (%s)",
		   is_uslub() ? "uslub" : "glibc");
	static const struct {
		size_t size;
		const char *name;
	} kinds[] = {{64, "64 B"}, {100 << 10, "100 KiB"}, {1 << 20, "1 MiB"}};
	for (unsigned k = 0; k < 3; k++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			tu_checks = tu_failures = 0; /* the child counts its own */
			_exit(rlimit_child(kinds[k].size, kinds[k].name));
		}
		int status = 0;
		CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s child: status %#x",
		       kinds[k].name, status);
	}
}

/* Whether the kernel refuses a commitment of `bytes` up front: not under
 * vm.overcommit_memory=1, nor on a machine with that much memory and swap. */
static int refused(uint64_t bytes)
{
	int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
	char c = '0';
	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = '0';
		close(fd);
	}
	uint64_t have = (status_kb("MemTotal:") + status_kb("SwapTotal:")) << 10;
	return c != '1' && have < bytes;
}

static void realloc_keeps(unsigned char *p, size_t n, const char *what)
{
	CHECK(p != NULL);
	if (!p)
		return;
	tu_fill(p, 0, n, n);
	errno = 0;
	void *q = REALLOC(p, tu_opaque_size((size_t)1 << 46));
	CHECKF(q == NULL && errno == ENOMEM, "realloc(%s, 64 TiB): %p errno %d", what, q, errno);
	CHECKF(tu_verify(p, n, n) == (size_t)-1, "realloc(%s, 64 TiB) changed the block", what);
	CHECK(USABLE_SIZE(p) >= n);
	FREE(q ? q : p);
}

static void impossible(void)
{
	tu_section("64 TiB and 1 TiB: NULL with ENOMEM from every entry point, old blocks "
		   "intact, the program runs on");
	if (!refused((uint64_t)1 << 40)) {
		printf("    overcommit_memory=1 or 1 TiB of memory: the kernel accepts; skipped\n");
		return;
	}
	size_t huge = tu_opaque_size((size_t)1 << 46);
	errno = 0;
	void *p = MALLOC(huge);
	CHECKF(p == NULL && errno == ENOMEM, "malloc(64 TiB): %p errno %d", p, errno);
	errno = 0;
	p = CALLOC(tu_opaque_size(1 << 20), tu_opaque_size(1 << 20));
	CHECKF(p == NULL && errno == ENOMEM, "calloc(1 Mi, 1 Mi): %p errno %d", p, errno);
	errno = 0;
	p = REALLOCARRAY(NULL, tu_opaque_size(1 << 20), tu_opaque_size(1 << 26));
	CHECKF(p == NULL && errno == ENOMEM, "reallocarray(64 TiB): %p errno %d", p, errno);
	realloc_keeps(MALLOC(100), 100, "100 B");
	realloc_keeps(MALLOC(300 << 10), 300 << 10, "300 KiB");
	realloc_keeps(MALLOC(9 << 20), 9 << 20, "9 MiB");
	void *out = (void *)0x1;
	errno = 4321;
	int rc = POSIX_MEMALIGN(&out, 64, huge);
	CHECKF(rc == ENOMEM && out == (void *)0x1 && errno == 4321,
	       "posix_memalign(64 TiB): rc %d, %p, errno %d", rc, out, errno);
	errno = 0;
	p = ALIGNED_ALLOC(4096, huge);
	CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(64 TiB): %p errno %d", p, errno);
	errno = 0;
	p = MEMALIGN(8 << 20, huge);
	CHECKF(p == NULL && errno == ENOMEM, "memalign(8 MiB, 64 TiB): %p errno %d", p, errno);
	errno = 0;
	p = VALLOC(huge);
	CHECKF(p == NULL && errno == ENOMEM, "valloc(64 TiB): %p errno %d", p, errno);
	/* Still an allocator: every kind of block works. */
	static const size_t sizes[] = {24, 5000, 200 << 10, 12 << 20};
	for (unsigned i = 0; i < 4; i++) {
		unsigned char *b = MALLOC(sizes[i]);
		CHECKF(b != NULL, "malloc(%zu) after the refusals", sizes[i]);
		if (b) {
			tu_fill(b, 0, sizes[i], i);
			CHECK(tu_verify(b, sizes[i], i) == (size_t)-1);
		}
		FREE(b);
	}
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	printf("test_addrspace (%s)\n", VARIANT);
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || strcmp(only, "rlimit") == 0)
		rlimit_all();
	if (!*only || strcmp(only, "impossible") == 0)
		impossible();
	return tu_summary("test_addrspace");
}
