/* What operator new needs from the C++ runtime, reached only when an allocation fails:
 * the standard's loop (call the std::new_handler while allocation fails and there is one),
 * then std::bad_alloc, or a null pointer for the nothrow forms. The operators themselves
 * are in new_delete.c.
 *
 * Why libuslub.so does not link libstdc++ for this. Linked, every program that preloads
 * uslub - C programs included, which never call operator new - mapped and relocated
 * libstdc++, libm and libgcc_s at start: 1.5 MiB more resident (a small C program's
 * peak 2.0 -> 3.5 MB) and 0.6 ms more per exec (/bin/true, 200 runs: 1.18 -> 1.82 ms
 * median). Instead the runtime is looked up when it is needed: a failing operator new runs
 * in a program that has libstdc++ loaded - the program's own, or a C++ module's loaded
 * with dlopen(RTLD_LOCAL), which dlopen(RTLD_NOLOAD) finds as well - and takes its
 * get_new_handler, and throws its std::bad_alloc through __cxa_throw, as compiled C++
 * code does. C cannot catch, so the nothrow forms call libstdc++'s own nothrow operator
 * new, which calls the (interposed) throwing one - uslub's - in its try block and turns a
 * bad_alloc into nullptr. Found nowhere (a program whose C++ runtime is statically linked
 * does not call these operators), a failure is reported and the program stops.
 *
 * Frames between the throw and the program - this file's and new_delete.c's - are C,
 * compiled with -fexceptions, so the unwinder passes through them. */
#include "calls_out.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef void (*new_handler_fn)(void);

static struct {
	new_handler_fn (*get_new_handler)(void); /* std::get_new_handler() */
	void *(*allocate_exception)(size_t);
	void (*throw_exception)(void *, void *, void (*)(void *)); /* never returns */
	void **bad_alloc_vtable;				   /* _ZTVSt9bad_alloc */
	void *bad_alloc_typeinfo;				   /* _ZTISt9bad_alloc */
	void (*bad_alloc_destroy)(void *); /* std::bad_alloc::~bad_alloc() */
	void *(*new_nothrow)(size_t, const void *);
	void *(*new_aligned_nothrow)(size_t, size_t, const void *);
	const void *nothrow; /* std::nothrow */
	int found;
} rt;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static void rt_find(void)
{
	/* The loaded runtime only: never load one (a program that calls operator new has). */
	void *h = USLUB_OUT(dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD));
	if (!h)
		return;
	rt.get_new_handler = (new_handler_fn(*)(void))USLUB_OUT(dlsym(h, "_ZSt15get_new_handlerv"));
	rt.allocate_exception = (void *(*)(size_t))USLUB_OUT(dlsym(h, "__cxa_allocate_exception"));
	rt.throw_exception =
	    (void (*)(void *, void *, void (*)(void *)))USLUB_OUT(dlsym(h, "__cxa_throw"));
	rt.bad_alloc_vtable = USLUB_OUT(dlsym(h, "_ZTVSt9bad_alloc"));
	rt.bad_alloc_typeinfo = USLUB_OUT(dlsym(h, "_ZTISt9bad_alloc"));
	rt.bad_alloc_destroy = (void (*)(void *))USLUB_OUT(dlsym(h, "_ZNSt9bad_allocD1Ev"));
	rt.new_nothrow =
	    (void *(*)(size_t, const void *))USLUB_OUT(dlsym(h, "_ZnwmRKSt9nothrow_t"));
	void *aligned = USLUB_OUT(dlsym(h, "_ZnwmSt11align_val_tRKSt9nothrow_t"));
	rt.new_aligned_nothrow = (void *(*)(size_t, size_t, const void *))aligned;
	rt.nothrow = USLUB_OUT(dlsym(h, "_ZSt7nothrow"));
	rt.found = rt.get_new_handler && rt.allocate_exception && rt.throw_exception &&
		   rt.bad_alloc_vtable && rt.bad_alloc_typeinfo && rt.bad_alloc_destroy &&
		   rt.new_nothrow && rt.new_aligned_nothrow && rt.nothrow;
	/* The handle stays open: the runtime it names is the program's for its lifetime. */
}

static int runtime(void)
{
	USLUB_OUT(pthread_once(&rt_once, rt_find));
	return rt.found;
}

__attribute__((noreturn)) static void no_runtime(void)
{
	static const char msg[] = "uslub: operator new: out of memory, and no C++ runtime is "
				  "loaded to throw std::bad_alloc\n";
	ssize_t r = USLUB_OUT(write(2, msg, sizeof(msg) - 1));
	(void)r;
	abort();
}

/* throw std::bad_alloc(): the object is its vtable pointer (std::exception has no data),
 * which points past the vtable's offset-to-top and type_info slots (Itanium C++ ABI). */
__attribute__((noreturn)) static void throw_bad_alloc(void)
{
	void **e = rt.allocate_exception(sizeof(void *));
	*e = rt.bad_alloc_vtable + 2;
	rt.throw_exception(e, rt.bad_alloc_typeinfo, rt.bad_alloc_destroy);
	__builtin_unreachable();
}

/* The allocation to retry is new_delete.c's; the operators there call the two below. */
void *uslub_new_alloc(size_t size, size_t align);
void *uslub_new_retry(size_t size, size_t align);
void *uslub_new_retry_nothrow(size_t size, size_t align);

void *uslub_new_retry(size_t size, size_t align)
{
	if (!runtime())
		no_runtime();
	for (;;) {
		new_handler_fn handler = rt.get_new_handler();
		if (!handler)
			throw_bad_alloc();
		/* Not counted as a call out: it runs between two whole allocations, with
		 * nothing of the thread's state in hand, and it may leave by throwing. */
		handler();
		void *p = uslub_new_alloc(size, align);
		if (p)
			return p;
	}
}

/* The nothrow forms call the handler as operator new would, and take a bad_alloc it
 * throws as failure: libstdc++'s nothrow operator new does both around a call of the
 * throwing one, which is uslub_new_retry above's operator. Without a handler there is
 * nothing to call and nothing to catch. */
void *uslub_new_retry_nothrow(size_t size, size_t align)
{
	if (!runtime())
		return NULL;
	if (!rt.get_new_handler())
		return NULL;
	return align ? rt.new_aligned_nothrow(size, align, rt.nothrow)
		     : rt.new_nothrow(size, rt.nothrow);
}
