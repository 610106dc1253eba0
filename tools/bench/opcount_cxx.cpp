// opcount_cxx: operator new and delete, for counting instructions under callgrind.
//
// Usage: opcount_cxx unsized|sized|aligned SIZE N
//   unsized  N times: p = ::operator new(SIZE); ::operator delete(p)
//   sized    N times: p = ::operator new(SIZE); ::operator delete(p, SIZE)
//   aligned  N times: p = ::operator new(SIZE, align 64); ::operator delete(p, SIZE, align 64)
//
// The C++ twin of opcount.c, driven the same way: (Ir(2N) - Ir(N)) / N cancels start-up.
// Under a malloc that exports no operators, these are libstdc++'s, which call malloc and
// free; under one that does, the program reaches the allocator directly.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

// The compiler must see each pointer escape, or it may pair and drop new/delete.
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void unsized(std::size_t size, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = ::operator new(size);
		escape(p);
		::operator delete(p);
	}
}

static void sized(std::size_t size, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = ::operator new(size);
		escape(p);
		::operator delete(p, size);
	}
}

static void aligned(std::size_t size, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = ::operator new(size, std::align_val_t(64));
		escape(p);
		::operator delete(p, size, std::align_val_t(64));
	}
}

int main(int argc, char **argv)
{
	void (*run)(std::size_t, unsigned long) = nullptr;
	if (argc == 4 && std::strcmp(argv[1], "unsized") == 0)
		run = unsized;
	else if (argc == 4 && std::strcmp(argv[1], "sized") == 0)
		run = sized;
	else if (argc == 4 && std::strcmp(argv[1], "aligned") == 0)
		run = aligned;
	if (!run) {
		std::fprintf(stderr, "usage: opcount_cxx unsized|sized|aligned SIZE N\n");
		return 2;
	}
	std::size_t size = std::strtoul(argv[2], nullptr, 0);
	unsigned long n = std::strtoul(argv[3], nullptr, 0);
	run(size, 1);
	run(size, n);
	return 0;
}
