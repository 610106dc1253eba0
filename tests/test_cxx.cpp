// test_cxx.cpp: C++ programs reach uslub directly: libuslub.so exports the replaceable
// operator new and delete (preload/new_delete.c) and C23's free_sized and
// free_aligned_sized.
//
// Built twice: test_cxx runs under LD_PRELOAD, test_cxx_linked (-DUSLUB_LINKED) is linked
// with libuslub.so, as a program built with pkg-config is. Both check:
//   - each of the 20 operators, free_sized and free_aligned_sized is libuslub.so's
//     (dladdr on the address the program calls; libstdc++'s would also reach uslub's
//     malloc under LD_PRELOAD, so in_use alone could not tell), and 1 MiB of blocks
//     through each new / delete pairing shows in uslub's in_use and leaves it on delete;
//   - aligned new at 64 B, 4 KiB and 1 MiB, in every aligned form;
//   - a size no allocator can give (above PTRDIFF_MAX, and 2^60, beyond any address
//     space whatever the overcommit mode) calls the new_handler until it uninstalls
//     itself, then throws std::bad_alloc through the operator; a handler's own bad_alloc
//     passes through; the nothrow forms return nullptr instead, after the same handler
//     calls;
//   - in children re-executed with USLUB_DEBUG (read at start-up): a sized delete, free_sized
//     or free_aligned_sized given a size that does not fit the block (small, aligned,
//     large, huge) ends in SIGABRT with "uslub: operator delete(): size N does not match the
//     block 0x... (cache kmalloc-64, object size 64)" and the kernel-style report; the right
//     sizes (also after a realloc that kept the block) pass; a cache outside the list, and
//     no USLUB_DEBUG at all, leave the size unchecked; a double sized delete is reported as
//     a double free;
//   - in a child under USLUB_MEM_LIMIT: a handler that frees a reserve makes the retried
//     allocation succeed, in the throwing, nothrow and aligned forms;
//   - std::vector, std::string and std::map doing real work.
// Prints "test_cxx: N checks passed" or each failure.
#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "uslub.h"

static unsigned long checks, failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		checks++;                                                                          \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			std::fprintf(stderr, "FAIL %s:%d: %s\n    ", __FILE__, __LINE__, #cond);   \
			std::fprintf(stderr, __VA_ARGS__);                                         \
			std::fputc('\n', stderr);                                                  \
		}                                                                                  \
	} while (0)

// The compiler must see each pointer escape, or it may pair and drop new and delete.
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

// A value the optimiser cannot fold, so a call with an impossible size stays a call and
// a deliberate second delete draws no warning.
static std::size_t opaque(std::size_t v)
{
	__asm__ volatile("" : "+r"(v));
	return v;
}

static void *opaque_ptr(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

template <typename F> static F to_fn(void *sym)
{
	F fn = nullptr;
	static_assert(sizeof(fn) == sizeof(sym), "function and data pointers differ");
	std::memcpy(&fn, &sym, sizeof(fn));
	return fn;
}

template <typename F> static void *to_addr(F fn)
{
	void *sym = nullptr;
	static_assert(sizeof(fn) == sizeof(sym), "function and data pointers differ");
	std::memcpy(&sym, &fn, sizeof(sym));
	return sym;
}

using totals_fn = void (*)(struct uslub_totals *);
using free_sized_fn = void (*)(void *, std::size_t);
using free_aligned_sized_fn = void (*)(void *, std::size_t, std::size_t);

// Linked, the program calls libuslub.so by name; preloaded, dlsym proves that the
// preloaded library is the one answering. glibc 2.36 has no free_sized: dlsym either way.
static totals_fn find_totals()
{
#ifdef USLUB_LINKED
	return uslub_get_totals;
#else
	return to_fn<totals_fn>(dlsym(RTLD_DEFAULT, "uslub_get_totals"));
#endif
}

static totals_fn totals;
static free_sized_fn free_sized_p;
static free_aligned_sized_fn free_aligned_sized_p;

static uint64_t in_use()
{
	struct uslub_totals t;
	std::memset(&t, 0, sizeof(t));
	totals(&t);
	return t.in_use;
}

// The object the dynamic linker found for an address: the library's path.
static const char *object_of(void *addr)
{
	Dl_info info;
	if (!dladdr(addr, &info) || !info.dli_fname)
		return "(none)";
	return info.dli_fname;
}

static bool is_uslub(void *addr)
{
	return std::strstr(object_of(addr), "libuslub.so") != nullptr;
}

// ---- each form reaches libuslub.so --------------------------------------------------

static const std::align_val_t al64{64};

static void check_symbols()
{
	std::printf("  - the 20 operators, free_sized and free_aligned_sized are libuslub.so's\n");
	struct {
		const char *name;
		void *addr;
	} fns[] = {
	    {"new", to_addr(static_cast<void *(*)(std::size_t)>(&::operator new))},
	    {"new[]", to_addr(static_cast<void *(*)(std::size_t)>(&::operator new[]))},
	    {"new nothrow",
	     to_addr(static_cast<void *(*)(std::size_t, const std::nothrow_t &) noexcept>(
		 &::operator new))},
	    {"new[] nothrow",
	     to_addr(static_cast<void *(*)(std::size_t, const std::nothrow_t &) noexcept>(
		 &::operator new[]))},
	    {"new aligned",
	     to_addr(static_cast<void *(*)(std::size_t, std::align_val_t)>(&::operator new))},
	    {"new[] aligned",
	     to_addr(static_cast<void *(*)(std::size_t, std::align_val_t)>(&::operator new[]))},
	    {"new aligned nothrow",
	     to_addr(static_cast<void *(*)(std::size_t, std::align_val_t,
					   const std::nothrow_t &) noexcept>(&::operator new))},
	    {"new[] aligned nothrow",
	     to_addr(static_cast<void *(*)(std::size_t, std::align_val_t,
					   const std::nothrow_t &) noexcept>(&::operator new[]))},
	    {"delete", to_addr(static_cast<void (*)(void *) noexcept>(&::operator delete))},
	    {"delete[]", to_addr(static_cast<void (*)(void *) noexcept>(&::operator delete[]))},
	    {"delete sized",
	     to_addr(static_cast<void (*)(void *, std::size_t) noexcept>(&::operator delete))},
	    {"delete[] sized",
	     to_addr(static_cast<void (*)(void *, std::size_t) noexcept>(&::operator delete[]))},
	    {"delete nothrow",
	     to_addr(static_cast<void (*)(void *, const std::nothrow_t &) noexcept>(
		 &::operator delete))},
	    {"delete[] nothrow",
	     to_addr(static_cast<void (*)(void *, const std::nothrow_t &) noexcept>(
		 &::operator delete[]))},
	    {"delete aligned",
	     to_addr(static_cast<void (*)(void *, std::align_val_t) noexcept>(&::operator delete))},
	    {"delete[] aligned", to_addr(static_cast<void (*)(void *, std::align_val_t) noexcept>(
				     &::operator delete[]))},
	    {"delete sized aligned",
	     to_addr(static_cast<void (*)(void *, std::size_t, std::align_val_t) noexcept>(
		 &::operator delete))},
	    {"delete[] sized aligned",
	     to_addr(static_cast<void (*)(void *, std::size_t, std::align_val_t) noexcept>(
		 &::operator delete[]))},
	    {"delete aligned nothrow",
	     to_addr(
		 static_cast<void (*)(void *, std::align_val_t, const std::nothrow_t &) noexcept>(
		     &::operator delete))},
	    {"delete[] aligned nothrow",
	     to_addr(
		 static_cast<void (*)(void *, std::align_val_t, const std::nothrow_t &) noexcept>(
		     &::operator delete[]))},
	    {"free_sized", to_addr(free_sized_p)},
	    {"free_aligned_sized", to_addr(free_aligned_sized_p)},
	};
	for (auto &f : fns)
		CHECK(f.addr != nullptr && is_uslub(f.addr), "operator %s at %p is in %s", f.name,
		      f.addr, f.addr ? object_of(f.addr) : "(not found)");
}

// 256 blocks of 4 KiB through one allocation function and one deallocation function:
// in_use must grow by 1 MiB and shrink by as much.
template <typename Alloc, typename Free>
static void through_uslub(const char *name, Alloc alloc, Free release)
{
	const std::size_t n = 256, size = 4096;
	static void *blocks[256];
	uint64_t before = in_use();
	for (std::size_t i = 0; i < n; i++) {
		blocks[i] = alloc(size);
		escape(blocks[i]);
		if (blocks[i])
			std::memset(blocks[i], int(i), size);
	}
	uint64_t with = in_use();
	bool all = true;
	for (std::size_t i = 0; i < n; i++)
		all = all && blocks[i] &&
		      static_cast<unsigned char *>(blocks[i])[size - 1] == (unsigned char)i;
	CHECK(all, "%s: a block is missing or lost its bytes", name);
	for (std::size_t i = 0; i < n; i++)
		release(blocks[i], size);
	uint64_t after = in_use();
	CHECK(with >= before + n * size && after + n * size <= with,
	      "%s: in_use %" PRIu64 " before, %" PRIu64 " with 1 MiB of blocks, %" PRIu64
	      " after: not uslub's",
	      name, before, with, after);
}

static void check_forms()
{
	std::printf("  - 1 MiB through each new / delete pairing shows in in_use and leaves it\n");
	const std::nothrow_t &nt = std::nothrow;
	through_uslub(
	    "new / delete", [](std::size_t s) { return ::operator new(s); },
	    [](void *p, std::size_t) { ::operator delete(p); });
	through_uslub(
	    "new / sized delete", [](std::size_t s) { return ::operator new(s); },
	    [](void *p, std::size_t s) { ::operator delete(p, s); });
	through_uslub(
	    "new nothrow / delete nothrow", [&](std::size_t s) { return ::operator new(s, nt); },
	    [&](void *p, std::size_t) { ::operator delete(p, nt); });
	through_uslub(
	    "new[] / delete[]", [](std::size_t s) { return ::operator new[](s); },
	    [](void *p, std::size_t) { ::operator delete[](p); });
	through_uslub(
	    "new[] / sized delete[]", [](std::size_t s) { return ::operator new[](s); },
	    [](void *p, std::size_t s) { ::operator delete[](p, s); });
	through_uslub(
	    "new[] nothrow / delete[] nothrow",
	    [&](std::size_t s) { return ::operator new[](s, nt); },
	    [&](void *p, std::size_t) { ::operator delete[](p, nt); });
	through_uslub(
	    "aligned new / aligned delete", [](std::size_t s) { return ::operator new(s, al64); },
	    [](void *p, std::size_t) { ::operator delete(p, al64); });
	through_uslub(
	    "aligned new / sized aligned delete",
	    [](std::size_t s) { return ::operator new(s, al64); },
	    [](void *p, std::size_t s) { ::operator delete(p, s, al64); });
	through_uslub(
	    "aligned new nothrow / aligned delete nothrow",
	    [&](std::size_t s) { return ::operator new(s, al64, nt); },
	    [&](void *p, std::size_t) { ::operator delete(p, al64, nt); });
	through_uslub(
	    "aligned new[] / aligned delete[]",
	    [](std::size_t s) { return ::operator new[](s, al64); },
	    [](void *p, std::size_t) { ::operator delete[](p, al64); });
	through_uslub(
	    "aligned new[] / sized aligned delete[]",
	    [](std::size_t s) { return ::operator new[](s, al64); },
	    [](void *p, std::size_t s) { ::operator delete[](p, s, al64); });
	through_uslub(
	    "aligned new[] nothrow / aligned delete[] nothrow",
	    [&](std::size_t s) { return ::operator new[](s, al64, nt); },
	    [&](void *p, std::size_t) { ::operator delete[](p, al64, nt); });
	if (!free_sized_p || !free_aligned_sized_p)
		return; // check_symbols said so
	through_uslub(
	    "malloc / free_sized", [](std::size_t s) { return std::malloc(s); },
	    [](void *p, std::size_t s) { free_sized_p(p, s); });
	through_uslub(
	    "aligned_alloc / free_aligned_sized",
	    [](std::size_t s) { return std::aligned_alloc(64, s); },
	    [](void *p, std::size_t s) { free_aligned_sized_p(p, 64, s); });
}

static void check_alignment()
{
	std::printf("  - aligned new at 64 B, 4 KiB and 1 MiB, every aligned form\n");
	const std::size_t aligns[] = {64, 4096, std::size_t(1) << 20};
	const std::size_t sizes[] = {1, 100, 5000, std::size_t(3) << 20};
	for (std::size_t a : aligns) {
		std::align_val_t al{a};
		for (std::size_t s : sizes) {
			void *p[4] = {::operator new(s, al), ::operator new[](s, al),
				      ::operator new(s, al, std::nothrow),
				      ::operator new[](s, al, std::nothrow)};
			for (int k = 0; k < 4; k++) {
				escape(p[k]);
				CHECK(p[k] && (reinterpret_cast<uintptr_t>(p[k]) & (a - 1)) == 0,
				      "form %d: new(%zu, align %zu) = %p", k, s, a, p[k]);
				if (p[k])
					std::memset(p[k], k, s);
			}
			::operator delete(p[0], s, al);
			::operator delete[](p[1], s, al);
			::operator delete(p[2], al, std::nothrow);
			::operator delete[](p[3], al);
		}
	}
	// new-expressions pick the aligned forms themselves for over-aligned types
	struct alignas(4096) Page {
		unsigned char bytes[4096];
	};
	Page *pages = new Page[3];
	escape(pages);
	CHECK((reinterpret_cast<uintptr_t>(pages) & 4095) == 0, "new Page[3] = %p",
	      static_cast<void *>(pages));
	delete[] pages;
}

// ---- new_handler and bad_alloc ------------------------------------------------------

static int handler_calls, handler_limit;

// Gives up after handler_limit calls by uninstalling itself, as the standard allows.
static void counting_handler()
{
	if (++handler_calls >= handler_limit)
		std::set_new_handler(nullptr);
}

static void throwing_handler()
{
	handler_calls++;
	throw std::bad_alloc();
}

static void check_new_handler()
{
	std::printf("  - an impossible size: the new_handler until it gives up, then bad_alloc; "
		    "nothrow returns nullptr\n");
	const std::size_t impossible[] = {opaque(SIZE_MAX), opaque(SIZE_MAX / 2 + 1),
					  opaque(std::size_t(1) << 60)};
	const char *form_name[] = {"new", "new[]", "aligned new", "aligned new[]"};
	for (std::size_t size : impossible) {
		for (int form = 0; form < 4; form++) {
			void *p = nullptr;
			auto attempt = [&]() -> bool { // true when bad_alloc came out
				try {
					switch (form) {
					case 0:
						p = ::operator new(size);
						break;
					case 1:
						p = ::operator new[](size);
						break;
					case 2:
						p = ::operator new(size, al64);
						break;
					default:
						p = ::operator new[](size, al64);
						break;
					}
				} catch (const std::bad_alloc &) {
					return true;
				}
				return false;
			};
			// no handler: bad_alloc at once
			std::set_new_handler(nullptr);
			bool threw = attempt();
			CHECK(threw && !p, "%s(%zu) without a handler: no bad_alloc (%p)",
			      form_name[form], size, p);

			// a handler called three times, then bad_alloc
			handler_calls = 0;
			handler_limit = 3;
			std::set_new_handler(counting_handler);
			threw = attempt();
			CHECK(threw && handler_calls == 3,
			      "%s(%zu): bad_alloc %d after %d handler calls (expected 3)",
			      form_name[form], size, threw, handler_calls);

			// the handler's own bad_alloc comes out of operator new
			handler_calls = 0;
			std::set_new_handler(throwing_handler);
			threw = attempt();
			CHECK(threw && handler_calls == 1,
			      "%s(%zu), throwing handler: %d, %d calls", form_name[form], size,
			      threw, handler_calls);
			std::set_new_handler(nullptr);
		}

		// nothrow: nullptr without a handler, after the handler's calls, and when the
		// handler throws
		for (int form = 0; form < 4; form++) {
			auto attempt = [&]() -> void * {
				switch (form) {
				case 0:
					return ::operator new(size, std::nothrow);
				case 1:
					return ::operator new[](size, std::nothrow);
				case 2:
					return ::operator new(size, al64, std::nothrow);
				default:
					return ::operator new[](size, al64, std::nothrow);
				}
			};
			std::set_new_handler(nullptr);
			void *p = attempt();
			CHECK(p == nullptr, "nothrow %s(%zu) = %p", form_name[form], size, p);
			handler_calls = 0;
			handler_limit = 2;
			std::set_new_handler(counting_handler);
			p = attempt();
			CHECK(p == nullptr && handler_calls == 2,
			      "nothrow %s(%zu) = %p after %d handler calls (expected 2)",
			      form_name[form], size, p, handler_calls);
			handler_calls = 0;
			std::set_new_handler(throwing_handler);
			p = attempt();
			CHECK(p == nullptr && handler_calls == 1,
			      "nothrow %s(%zu), throwing handler: %p after %d calls",
			      form_name[form], size, p, handler_calls);
			std::set_new_handler(nullptr);
		}
	}
}

// ---- children: USLUB_DEBUG and USLUB_MEM_LIMIT ---------------------------------------

static void say_block(void *p)
{
	std::fprintf(stderr, "test-block %p\n", p);
	std::fflush(stderr);
}

// A handler that frees the reserve the program kept for a bad day.
static void *reserve;
static void freeing_handler()
{
	handler_calls++;
	::operator delete[](reserve);
	reserve = nullptr;
	std::set_new_handler(nullptr);
}

static int child(const char *name)
{
	const std::size_t mib = std::size_t(1) << 20;
	bool c23 = !std::strncmp(name, "free-", 5) || !std::strcmp(name, "right-sizes");
	if (c23 && (!free_sized_p || !free_aligned_sized_p)) {
		std::fprintf(stderr, "test_cxx: no free_sized or free_aligned_sized\n");
		return 3;
	}
	if (!std::strcmp(name, "delete-small")) {
		void *p = ::operator new(opaque(64));
		say_block(p);
		::operator delete(p, opaque(200));
	} else if (!std::strcmp(name, "delete-array")) {
		void *p = ::operator new[](opaque(100));
		say_block(p);
		::operator delete[](p, opaque(20));
	} else if (!std::strcmp(name, "delete-aligned")) {
		void *p = ::operator new(opaque(40), al64);
		say_block(p);
		::operator delete(p, opaque(400), al64);
	} else if (!std::strcmp(name, "delete-large")) {
		void *p = ::operator new(opaque(100000));
		say_block(p);
		::operator delete(p, opaque(50000));
	} else if (!std::strcmp(name, "delete-huge")) {
		void *p = ::operator new(opaque(40 * mib + 1)); // past HUGE_THRESHOLD
		say_block(p);
		::operator delete(p, opaque(mib));
	} else if (!std::strcmp(name, "free-sized")) {
		void *p = std::malloc(opaque(64));
		say_block(p);
		free_sized_p(p, opaque(1000));
	} else if (!std::strcmp(name, "free-aligned-sized")) {
		void *p = std::aligned_alloc(256, opaque(256));
		say_block(p);
		free_aligned_sized_p(p, 256, opaque(1000));
	} else if (!std::strcmp(name, "double-delete")) {
		void *p = ::operator new(opaque(64));
		say_block(p);
		void *again = opaque_ptr(p); // the same pointer, unknown to the compiler
		::operator delete(p, opaque(64));
		::operator delete(again, opaque(64));
	} else if (!std::strcmp(name, "right-sizes")) {
		// every sized form given what it was asked with: nothing to report
		for (std::size_t s : {std::size_t(0), std::size_t(1), std::size_t(40),
				      std::size_t(64), std::size_t(65), std::size_t(8192),
				      std::size_t(8193), std::size_t(100000), 5 * mib}) {
			void *p = ::operator new(s);
			escape(p);
			::operator delete(p, s);
			p = ::operator new[](s);
			escape(p);
			::operator delete[](p, s);
			for (std::size_t a :
			     {std::size_t(32), std::size_t(64), std::size_t(4096), mib, 8 * mib}) {
				std::align_val_t al{a};
				p = ::operator new(s, al);
				escape(p);
				::operator delete(p, s, al);
				p = ::operator new[](s, al);
				escape(p);
				::operator delete[](p, s, al);
				p = std::aligned_alloc(a, s);
				escape(p);
				free_aligned_sized_p(p, a, s);
			}
			p = std::malloc(s);
			escape(p);
			free_sized_p(p, s);
			p = std::calloc(1, s);
			escape(p);
			free_sized_p(p, s);
		}
		// realloc keeps a block that shrinks to more than half of it: free_sized is
		// given the size realloc was
		void *p = std::malloc(opaque(64));
		void *q = std::realloc(p, opaque(40));
		CHECK(q == p, "realloc(64 -> 40) moved the block: the case checks nothing");
		free_sized_p(q, 40);
		p = std::malloc(opaque(100000));
		p = std::realloc(p, opaque(60000));
		free_sized_p(p, 60000);
	} else if (!std::strcmp(name, "handler-frees")) {
		// USLUB_MEM_LIMIT=64M: 40 MiB kept, 33 MiB more (huge: a mapping of its own)
		// fails until the handler frees the 40
		for (int form = 0; form < 3; form++) {
			reserve = ::operator new[](40 * mib);
			escape(reserve);
			handler_calls = 0;
			std::set_new_handler(freeing_handler);
			void *p = nullptr;
			try {
				p = form == 0	? ::operator new(33 * mib)
				    : form == 1 ? ::operator new(33 * mib, std::nothrow)
						: ::operator new(33 * mib, std::align_val_t(mib));
			} catch (const std::bad_alloc &) {
				p = nullptr;
			}
			CHECK(p && handler_calls == 1 && !reserve,
			      "form %d: %p after %d handler calls, reserve %p", form, p,
			      handler_calls, reserve);
			::operator delete(p);
			if (reserve)
				::operator delete[](reserve);
			std::set_new_handler(nullptr);
		}
	} else {
		std::fprintf(stderr, "test_cxx: no child case %s\n", name);
		return 2;
	}
	std::fprintf(stderr, "test-done\n");
	return failures ? 1 : 0;
}

struct child_case {
	const char *name;
	const char *env; // USLUB_DEBUG=... or USLUB_MEM_LIMIT=...; nullptr: neither
	bool aborts;
	const char *says[3]; // on stderr; "%p" stands for the block the child printed
};

static const child_case child_cases[] = {
    {"delete-small",
     "USLUB_DEBUG=F",
     true,
     {"uslub: operator delete(): size 200 does not match the block %p (cache kmalloc-64, "
      "object size 64)",
      "BUG kmalloc-64 (uslub): size 200 does not match the block", nullptr}},
    {"delete-small",
     "USLUB_DEBUG=FZPU,kmalloc-64",
     true,
     {"uslub: operator delete(): size 200 does not match the block %p (cache kmalloc-64, "
      "object size 64)",
      "INFO: Allocated in", nullptr}},
    {"delete-array",
     "USLUB_DEBUG=F",
     true,
     {"uslub: operator delete[](): size 20 does not match the block %p (cache kmalloc-112, "
      "object size 112)",
      nullptr}},
    {"delete-aligned",
     "USLUB_DEBUG=F",
     true,
     {"uslub: operator delete(): size 400 does not match the block %p (cache kmalloc-64, "
      "object size 64)",
      nullptr}},
    {"delete-large",
     "USLUB_DEBUG=F",
     true,
     {"uslub: operator delete(): size 50000 does not match the block %p (large block of "
      "102400 bytes)",
      nullptr}},
    {"delete-huge",
     "USLUB_DEBUG=F",
     true,
     {"uslub: operator delete(): size 1048576 does not match the block %p (huge block of "
      "41947136 bytes)",
      nullptr}},
    {"free-sized",
     "USLUB_DEBUG=F",
     true,
     {"uslub: free_sized(): size 1000 does not match the block %p (cache kmalloc-64, object "
      "size 64)",
      nullptr}},
    {"free-aligned-sized",
     "USLUB_DEBUG=F",
     true,
     {"uslub: free_aligned_sized(): size 1000 does not match the block %p (cache "
      "kmalloc-256, object size 256)",
      nullptr}},
    {"double-delete", "USLUB_DEBUG=F", true, {"BUG kmalloc-64 (uslub): double free", nullptr}},
    {"right-sizes", "USLUB_DEBUG=FZPU", false, {"test-done", nullptr}},
    // the size is looked at in debug caches only
    {"delete-small", "USLUB_DEBUG=F,kmalloc-128", false, {"test-done", nullptr}},
    {"delete-small", nullptr, false, {"test-done", nullptr}},
    {"delete-large", "USLUB_DEBUG=F,kmalloc-64", false, {"test-done", nullptr}},
    {"handler-frees", "USLUB_MEM_LIMIT=64M", false, {"test-done", nullptr}},
};

// Re-executes this program as child case c; returns the wait status, its stderr in out.
static int run_child(const child_case &c, std::string &out)
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
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		dup2(fds[1], 2);
		close(fds[1]);
		::unsetenv("USLUB_DEBUG");
		::unsetenv("USLUB_MEM_LIMIT");
		if (c.env)
			::putenv(const_cast<char *>(c.env));
		char *argv[] = {const_cast<char *>("test_cxx"), const_cast<char *>("--child"),
				const_cast<char *>(c.name), nullptr};
		alarm(60);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fds[1]);
	char buf[4096];
	for (;;) {
		ssize_t r = read(fds[0], buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		out.append(buf, std::size_t(r));
	}
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

static void check_children()
{
	std::printf("  - sized frees under USLUB_DEBUG (children): a wrong size stops the program "
		    "with a report\n");
	for (const child_case &c : child_cases) {
		std::string out;
		int status = run_child(c, out);
		if (c.aborts)
			CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
			      "%s (%s): status %#x, expected SIGABRT; stderr:\n%s", c.name, c.env,
			      status, out.c_str());
		else
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "%s (%s): status %#x, expected exit 0; stderr:\n%s", c.name,
			      c.env ? c.env : "no USLUB_DEBUG", status, out.c_str());
		// "%p" in an expected line is the block the child printed
		std::string block;
		std::size_t at = out.find("test-block ");
		if (at != std::string::npos)
			block = out.substr(at + 11, out.find('\n', at) - at - 11);
		for (const char *say : c.says) {
			if (!say)
				break;
			std::string want = say;
			std::size_t p = want.find("%p");
			if (p != std::string::npos)
				want.replace(p, 2, block);
			CHECK(out.find(want) != std::string::npos, "%s (%s): no \"%s\" in:\n%s",
			      c.name, c.env ? c.env : "no USLUB_DEBUG", want.c_str(), out.c_str());
		}
	}
}

// ---- the standard library at work ----------------------------------------------------

struct Node {
	uint64_t payload[8]; // 64 bytes: kmalloc-64
	explicit Node(uint64_t v)
	{
		for (auto &p : payload)
			p = v;
	}
};

struct alignas(256) Wide {
	unsigned char bytes[256];
};

static void check_containers()
{
	std::printf("  - 65536 x new Node (64 B) and new char[1 MiB] x 2 show in in_use and "
		    "leave it on delete\n");
	{
		const size_t count = 65536; // 4 MiB of 64-byte objects
		uint64_t before = in_use();
		std::vector<Node *> nodes;
		nodes.reserve(count);
		for (size_t i = 0; i < count; i++)
			nodes.push_back(new Node(i));
		char *big1 = new char[1 << 20];
		char *big2 = new char[1 << 20];
		std::memset(big1, 1, 1 << 20);
		std::memset(big2, 2, 1 << 20);
		uint64_t with = in_use();
		CHECK(with >= before + 4 * (uint64_t(1) << 20) + 2 * (uint64_t(1) << 20),
		      "in_use %" PRIu64 " before, %" PRIu64 " with 4 MiB of Nodes and 2 MiB of "
		      "char[]: operator new does not reach uslub",
		      before, with);
		bool intact = true;
		for (size_t i = 0; i < count; i++)
			intact = intact && nodes[i]->payload[0] == i && nodes[i]->payload[7] == i;
		CHECK(intact, "a Node lost its payload");
		for (Node *n : nodes)
			delete n;
		delete[] big1;
		delete[] big2;
		uint64_t after = in_use();
		CHECK(after + 5 * (uint64_t(1) << 20) <= with,
		      "in_use %" PRIu64 " with the objects, %" PRIu64 " after delete", with, after);
	}

	std::printf("  - std::vector grows to 1,000,000 elements and keeps them\n");
	{
		std::vector<uint64_t> v;
		for (uint64_t i = 0; i < 1000000; i++)
			v.push_back(i * 3);
		uint64_t sum = 0;
		for (uint64_t x : v)
			sum += x;
		CHECK(sum == 3ull * 999999ull * 1000000ull / 2, "sum %" PRIu64, sum);
		v.resize(10);
		v.shrink_to_fit();
		CHECK(v.size() == 10 && v[9] == 27, "after shrink: size %zu", v.size());
	}

	std::printf("  - std::string concatenation, copies and substrings\n");
	{
		std::string s;
		for (int i = 0; i < 20000; i++)
			s += std::to_string(i % 10);
		CHECK(s.size() == 20000, "size %zu", s.size());
		std::vector<std::string> copies(200, s);
		size_t total = 0;
		for (auto &c : copies)
			total += c.substr(100, 50).size() + (c == s ? 1 : 0);
		CHECK(total == 200 * 51, "total %zu", total);
		CHECK(s.compare(0, 10, "0123456789") == 0, "prefix %s", s.substr(0, 10).c_str());
	}

	std::printf("  - std::map of 100,000 string keys: insert, find, erase half\n");
	{
		std::map<std::string, int> m;
		for (int i = 0; i < 100000; i++)
			m["key-" + std::to_string(i)] = i;
		CHECK(m.size() == 100000, "size %zu", m.size());
		CHECK(m["key-4242"] == 4242, "m[key-4242] = %d", m["key-4242"]);
		for (int i = 0; i < 100000; i += 2)
			m.erase("key-" + std::to_string(i));
		CHECK(m.size() == 50000, "size after erase %zu", m.size());
		long sum = 0;
		for (auto &kv : m)
			sum += kv.second;
		CHECK(sum == 2500000000L, "sum %ld", sum);
	}

	std::printf("  - over-aligned new (alignas(256)) and std::unique_ptr<T[]>\n");
	{
		std::vector<std::unique_ptr<Wide>> ws;
		for (int i = 0; i < 100; i++) {
			ws.emplace_back(new Wide);
			CHECK((reinterpret_cast<uintptr_t>(ws.back().get()) & 255) == 0,
			      "new Wide = %p", static_cast<void *>(ws.back().get()));
			std::memset(ws.back()->bytes, i, sizeof(ws.back()->bytes));
		}
		std::unique_ptr<int[]> arr(new int[300000]());
		bool zero = true;
		for (int i = 0; i < 300000; i++)
			zero = zero && arr[i] == 0;
		CHECK(zero, "new int[300000]() is not zeroed");
	}
}

int main(int argc, char **argv)
{
	// a statistics dump asked for by the caller's environment would mix with the
	// report: run again without it (the library read it at load time)
	if (std::getenv("USLUB_STATS") != nullptr || std::getenv("USLUB_STATS_FILE") != nullptr) {
		::unsetenv("USLUB_STATS");
		::unsetenv("USLUB_STATS_FILE");
		::execv("/proc/self/exe", argv);
	}
	totals = find_totals();
	free_sized_p = to_fn<free_sized_fn>(dlsym(RTLD_DEFAULT, "free_sized"));
	free_aligned_sized_p =
	    to_fn<free_aligned_sized_fn>(dlsym(RTLD_DEFAULT, "free_aligned_sized"));
	if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
		signal(SIGABRT, SIG_DFL);
		return child(argv[2]);
	}

	std::printf("test_cxx: operator new and delete, free_sized, std containers (%s)\n",
#ifdef USLUB_LINKED
		    "linked with libuslub.so"
#else
		    "under LD_PRELOAD"
#endif
	);
	CHECK(totals, "uslub_get_totals not found: libuslub.so is not loaded (LD_PRELOAD=%s)",
	      std::getenv("LD_PRELOAD") ? std::getenv("LD_PRELOAD") : "");
	if (totals) {
		check_symbols();
		check_forms();
		check_alignment();
		check_new_handler();
		check_children();
		check_containers();
	}

	if (failures == 0) {
		std::printf("test_cxx: %lu checks passed\n", checks);
		return 0;
	}
	std::printf("test_cxx: %lu of %lu checks FAILED\n", failures, checks);
	return 1;
}
