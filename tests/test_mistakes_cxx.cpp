// test_mistakes_cxx.cpp: issue 26's C++ mistakes - delete of a new[] array, delete[] of a
// new object, free of a new object, delete of a malloc block, sized delete with the wrong
// size - at 8 B, 4 KiB, 256 KiB and 8 MiB, by default and under USLUB_DEBUG=1, each in a child
// under LD_PRELOAD (as test_mistakes.c runs the C ones). A row that says "caught" must end
// the child by SIGABRT with a report whose first line has "uslub:" and that names the
// mismatch; a row that says "not caught" must exit 0. The README's table (Checkers) is
// this one.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static unsigned long checks, failures;

static void check(bool ok, const std::string &what)
{
	checks++;
	if (!ok) {
		failures++;
		std::fprintf(stderr, "FAIL %s\n", what.c_str());
	}
}

static void *launder(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

static std::size_t opaque(std::size_t n)
{
	__asm__ volatile("" : "+r"(n));
	return n;
}

// ---- the mistakes, run in the child --------------------------------------------------

static void m_new_array_delete(std::size_t n)
{
	char *p = new char[opaque(n)];
	::operator delete(launder(p));
}

static void m_new_delete_array(std::size_t n)
{
	void *p = ::operator new(opaque(n));
	::operator delete[](launder(p));
}

static void m_new_free(std::size_t n)
{
	void *p = ::operator new(opaque(n));
	std::free(launder(p));
}

static void m_malloc_delete(std::size_t n)
{
	void *p = std::malloc(opaque(n));
	::operator delete(launder(p));
}

static void m_sized_delete_wrong(std::size_t n)
{
	void *p = ::operator new(opaque(n));
	::operator delete(launder(p), opaque(n + 8));
}

static void m_sized_delete_right(std::size_t n)
{
	void *p = ::operator new[](opaque(n));
	::operator delete[](launder(p), opaque(n));
}

enum : unsigned { SMALL = 1, PAGE = 2, LARGE = 4, HUGE = 8, ALL = 15 };

struct mistake {
	const char *name;
	void (*run)(std::size_t);
	unsigned by_default, with_letters;
	const char *report;
};

// Large blocks keep their kind in their descriptor under the letters, huge ones in the
// huge table.
static const mistake mistakes[] = {
    {"new[], then delete", m_new_array_delete, 0, ALL,
     "alloc-dealloc-mismatch (operator new [] vs operator delete)"},
    {"new, then delete[]", m_new_delete_array, 0, ALL,
     "alloc-dealloc-mismatch (operator new vs operator delete [])"},
    {"new, then free", m_new_free, 0, ALL, "alloc-dealloc-mismatch (operator new vs free)"},
    {"malloc, then delete", m_malloc_delete, 0, ALL,
     "alloc-dealloc-mismatch (malloc vs operator delete)"},
    {"sized delete, 8 bytes too many", m_sized_delete_wrong, 0, ALL, "does not match the block"},
    {"sized delete[], the right size", m_sized_delete_right, 0, 0, nullptr},
};

static const std::size_t sizes[] = {8, 4096, 256 << 10, 8 << 20};

// ---- the parent ---------------------------------------------------------------------

static int run_child(std::size_t i, std::size_t n, bool debug, std::string &out)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	std::fflush(stdout);
	std::fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		dup2(fds[1], 2);
		close(fds[1]);
		static char *env[64];
		std::size_t k = 0;
		for (char **e = environ; *e && k < 60; e++)
			if (std::strncmp(*e, "USLUB_", 6) != 0)
				env[k++] = *e;
		static char setting[] = "USLUB_DEBUG=1";
		if (debug)
			env[k++] = setting;
		env[k] = nullptr;
		std::string a1 = std::to_string(i), a2 = std::to_string(n);
		char self[] = "/proc/self/exe", flag[] = "--mistake";
		char *argv[] = {self, flag, a1.data(), a2.data(), nullptr};
		alarm(60);
		execve(self, argv, env);
		_exit(127);
	}
	close(fds[1]);
	char buf[4096];
	for (;;) {
		ssize_t r = read(fds[0], buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || out.size() > (1 << 16))
			break;
		out.append(buf, (std::size_t)r);
	}
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !std::strcmp(argv[1], "--mistake")) {
		std::signal(SIGABRT, SIG_DFL);
		mistakes[std::strtoul(argv[2], nullptr, 10)].run(
		    std::strtoul(argv[3], nullptr, 10));
		return 0;
	}
	std::printf("test_mistakes_cxx: new/delete kinds and sized delete, by default and under "
		    "USLUB_DEBUG=1\n");
	for (int d = 0; d < 2; d++)
		for (std::size_t i = 0; i < sizeof(mistakes) / sizeof(mistakes[0]); i++)
			for (std::size_t s = 0; s < 4; s++) {
				const mistake &m = mistakes[i];
				std::string out;
				int status = run_child(i, sizes[s], d, out);
				std::string tag = std::string(m.name) + " at " +
						  std::to_string(sizes[s]) + " B (" +
						  (d ? "USLUB_DEBUG=1" : "default") + ")";
				if ((d ? m.with_letters : m.by_default) & (1u << s)) {
					check(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
					      tag + ": expected SIGABRT, stderr:\n" + out);
					std::size_t nl = out.find('\n');
					check(out.find("uslub:") < nl,
					      tag + ": no \"uslub:\" in the first line:\n" + out);
					check(out.find(m.report) != std::string::npos,
					      tag + ": no \"" + m.report + "\" in:\n" + out);
				} else {
					check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
					      tag + ": expected exit 0 (not caught), stderr:\n" +
						  out);
				}
			}
	std::printf("test_mistakes_cxx: %lu of %lu checks FAILED\n", failures, checks);
	return failures ? 1 : 0;
}
