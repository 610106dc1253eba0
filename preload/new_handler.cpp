// What operator new needs from the C++ runtime, reached only when an allocation fails:
// the standard's loop (call the std::new_handler while allocation fails and there is one),
// then std::bad_alloc, or a null pointer for the nothrow forms. The operators themselves
// are in new_delete.c.
//
// Why libuslub.so links libstdc++ for this. The standard's semantics need the runtime: the
// handler is libstdc++'s (std::get_new_handler), the exception is its std::bad_alloc, and
// the nothrow forms must catch a bad_alloc the handler throws, which takes a personality
// routine. The alternative is weak references that bind only when the program brought
// libstdc++ along, and no DT_NEEDED. C cannot catch, so the nothrow forms would have to
// borrow libstdc++'s own through dlsym(RTLD_NEXT) - or abort, as mimalloc's C build does
// instead of throwing - and the references stay unbound when libstdc++ arrives later
// through dlopen(RTLD_LOCAL), as a C++ extension module brings it into Python: out of
// memory there would abort instead of raising bad_alloc. Linked, libstdc++ is in the
// global scope from the start and every case is the standard's. Debian's libjemalloc2 and
// libtcmalloc-minimal4 link it too.
//
// What it costs a C program that preloads libuslub.so: libstdc++, libm and libgcc_s are
// mapped and relocated at start, and libstdc++'s emergency exception pool (72 KiB,
// untouched but for its header) is taken from uslub before main. /bin/true, 200 runs each,
// on the 2-vCPU development VM, min / median / max:
//   without LD_PRELOAD                          0.61 / 0.66 / 1.2 ms
//   libuslub.so without the operators           1.11 / 1.18 / 1.6 ms
//   libuslub.so with them (libstdc++ loaded)    1.71 / 1.82 / 2.8 ms
// about 0.6 ms per exec, and peak RSS 2.0 -> 3.5 MB, mostly libstdc++'s shared pages. A
// C++ program loads libstdc++ anyway and pays nothing more.
#include <cstddef>
#include <new>

extern "C" {
// The allocation to retry is new_delete.c's; the operators there call the two below.
void *uslub_new_alloc(std::size_t size, std::size_t align);
void *uslub_new_retry(std::size_t size, std::size_t align);
void *uslub_new_retry_nothrow(std::size_t size, std::size_t align) noexcept;
}

void *uslub_new_retry(std::size_t size, std::size_t align)
{
	for (;;) {
		std::new_handler handler = std::get_new_handler();
		if (!handler)
			throw std::bad_alloc();
		handler();
		if (void *p = uslub_new_alloc(size, align))
			return p;
	}
}

// The nothrow forms call the handler as operator new would, and take a bad_alloc it
// throws as failure. Any other exception ends the program (noexcept), as in libstdc++.
void *uslub_new_retry_nothrow(std::size_t size, std::size_t align) noexcept
{
	for (;;) {
		std::new_handler handler = std::get_new_handler();
		if (!handler)
			return nullptr;
		try {
			handler();
		} catch (const std::bad_alloc &) {
			return nullptr;
		}
		if (void *p = uslub_new_alloc(size, align))
			return p;
	}
}
