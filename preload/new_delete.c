/* C++'s replaceable allocation functions, exported from libuslub.so as jemalloc, tcmalloc
 * and mimalloc export theirs, so a C++ program reaches the engine directly instead of
 * through libstdc++'s operators, which call malloc and free one call further down and
 * drop the size a sized delete is given.
 *
 * Written in C under their Itanium C++ ABI names (_Znwm is operator new(unsigned long)):
 * the fast paths are the inline ones of slab.h, whose C11 atomics a C++ compiler does not
 * take, so a C++ definition would have to call out to them - the very call this file
 * exists to remove. What needs the C++ runtime - calling the new_handler, throwing
 * std::bad_alloc, catching it for the nothrow forms - is in new_handler.c, reached only
 * when an allocation fails. This file is compiled with -fexceptions, so that bad_alloc
 * unwinds through these frames into the program. test_cxx checks that each name resolves
 * here: a misspelt one would leave libstdc++'s in place. */
#include "api/api.h"
#include "api/sized.h"

#define EXPORT __attribute__((visibility("default")))

/* The mangled names below spell size_t as unsigned long ('m'). */
_Static_assert(__builtin_types_compatible_p(size_t, unsigned long), "size_t is unsigned long");

/* std::align_val_t is an enum class over size_t, std::nothrow_t an empty struct passed by
 * reference: in the ABI, a size_t and a pointer. The nothrow_t only picks the overload. */
typedef size_t align_val_t;
struct nothrow_t;
#define NOTHROW const struct nothrow_t *nothrow __attribute__((unused))

/* Under USLUB_DEBUG a new object's kind is kept, and a delete checks it (api/sized.c). */
#define NEW_DONE(p, kind) uslub_new_done(p, kind)
#define DELETE_CHECK(p, kind, op)                                                                  \
	do {                                                                                       \
		if (unlikely(uslub_debug_any))                                                     \
			uslub_delete_check(p, kind, op);                                           \
	} while (0)

/* new_handler.c: the standard's loop - call the new_handler while allocation fails and
 * there is one - then std::bad_alloc, or NULL for the nothrow forms. */
void *uslub_new_retry(size_t size, size_t align);
void *uslub_new_retry_nothrow(size_t size, size_t align);

/* The allocation new_handler.c retries: `align` 0 for the unaligned forms. */
void *uslub_new_alloc(size_t size, size_t align)
{
	return align ? uslub_memalign(align, size) : uslub_malloc_inline(size);
}

/* ---- new --------------------------------------------------------------------------- */

EXPORT void *cxx_new(size_t size) __asm__("_Znwm");
EXPORT void *cxx_new(size_t size)
{
	void *p = uslub_malloc_inline_as(size, KIND_NEW);
	if (likely(p))
		return p;
	return NEW_DONE(uslub_new_retry(size, 0), KIND_NEW);
}

EXPORT void *cxx_new_array(size_t size) __asm__("_Znam");
EXPORT void *cxx_new_array(size_t size)
{
	void *p = uslub_malloc_inline_as(size, KIND_NEW_ARRAY);
	if (likely(p))
		return p;
	return NEW_DONE(uslub_new_retry(size, 0), KIND_NEW_ARRAY);
}

EXPORT void *cxx_new_nothrow(size_t size, NOTHROW) __asm__("_ZnwmRKSt9nothrow_t");
EXPORT void *cxx_new_nothrow(size_t size, NOTHROW)
{
	void *p = uslub_malloc_inline_as(size, KIND_NEW);
	if (likely(p))
		return p;
	return NEW_DONE(uslub_new_retry_nothrow(size, 0), KIND_NEW);
}

EXPORT void *cxx_new_array_nothrow(size_t size, NOTHROW) __asm__("_ZnamRKSt9nothrow_t");
EXPORT void *cxx_new_array_nothrow(size_t size, NOTHROW)
{
	void *p = uslub_malloc_inline_as(size, KIND_NEW_ARRAY);
	if (likely(p))
		return p;
	return NEW_DONE(uslub_new_retry_nothrow(size, 0), KIND_NEW_ARRAY);
}

EXPORT void *cxx_new_aligned(size_t size, align_val_t align) __asm__("_ZnwmSt11align_val_t");
EXPORT void *cxx_new_aligned(size_t size, align_val_t align)
{
	void *p = uslub_memalign(align, size);
	if (likely(p))
		return NEW_DONE(p, KIND_NEW);
	return NEW_DONE(uslub_new_retry(size, align), KIND_NEW);
}

EXPORT void *cxx_new_array_aligned(size_t size, align_val_t align) __asm__("_ZnamSt11align_val_t");
EXPORT void *cxx_new_array_aligned(size_t size, align_val_t align)
{
	void *p = uslub_memalign(align, size);
	if (likely(p))
		return NEW_DONE(p, KIND_NEW_ARRAY);
	return NEW_DONE(uslub_new_retry(size, align), KIND_NEW_ARRAY);
}

EXPORT void *cxx_new_aligned_nothrow(size_t size, align_val_t align,
				     NOTHROW) __asm__("_ZnwmSt11align_val_tRKSt9nothrow_t");
EXPORT void *cxx_new_aligned_nothrow(size_t size, align_val_t align, NOTHROW)
{
	void *p = uslub_memalign(align, size);
	if (likely(p))
		return NEW_DONE(p, KIND_NEW);
	return NEW_DONE(uslub_new_retry_nothrow(size, align), KIND_NEW);
}

EXPORT void *cxx_new_array_aligned_nothrow(size_t size, align_val_t align,
					   NOTHROW) __asm__("_ZnamSt11align_val_tRKSt9nothrow_t");
EXPORT void *cxx_new_array_aligned_nothrow(size_t size, align_val_t align, NOTHROW)
{
	void *p = uslub_memalign(align, size);
	if (likely(p))
		return NEW_DONE(p, KIND_NEW_ARRAY);
	return NEW_DONE(uslub_new_retry_nothrow(size, align), KIND_NEW_ARRAY);
}

/* ---- delete ------------------------------------------------------------------------ */

/* Every form ends in the free by a tail call, so USLUB_DEBUG=U records the program's call
 * site as it does for free. */

EXPORT void cxx_delete(void *p) __asm__("_ZdlPv");
EXPORT void cxx_delete(void *p)
{
	uslub_free_inline_as(p, KIND_NEW);
}

EXPORT void cxx_delete_array(void *p) __asm__("_ZdaPv");
EXPORT void cxx_delete_array(void *p)
{
	uslub_free_inline_as(p, KIND_NEW_ARRAY);
}

EXPORT void cxx_delete_sized(void *p, size_t size) __asm__("_ZdlPvm");
EXPORT void cxx_delete_sized(void *p, size_t size)
{
	uslub_free_sized_inline(p, size, 0, SIZED_DELETE);
}

EXPORT void cxx_delete_array_sized(void *p, size_t size) __asm__("_ZdaPvm");
EXPORT void cxx_delete_array_sized(void *p, size_t size)
{
	uslub_free_sized_inline(p, size, 0, SIZED_DELETE_ARRAY);
}

EXPORT void cxx_delete_nothrow(void *p, NOTHROW) __asm__("_ZdlPvRKSt9nothrow_t");
EXPORT void cxx_delete_nothrow(void *p, NOTHROW)
{
	uslub_free_inline_as(p, KIND_NEW);
}

EXPORT void cxx_delete_array_nothrow(void *p, NOTHROW) __asm__("_ZdaPvRKSt9nothrow_t");
EXPORT void cxx_delete_array_nothrow(void *p, NOTHROW)
{
	uslub_free_inline_as(p, KIND_NEW_ARRAY);
}

EXPORT void cxx_delete_aligned(void *p, align_val_t align) __asm__("_ZdlPvSt11align_val_t");
EXPORT void cxx_delete_aligned(void *p, align_val_t align)
{
	(void)align;
	DELETE_CHECK(p, KIND_NEW, "operator delete");
	uslub_free_inline(p);
}

EXPORT void cxx_delete_array_aligned(void *p, align_val_t align) __asm__("_ZdaPvSt11align_val_t");
EXPORT void cxx_delete_array_aligned(void *p, align_val_t align)
{
	(void)align;
	DELETE_CHECK(p, KIND_NEW_ARRAY, "operator delete[]");
	uslub_free_inline(p);
}

EXPORT void cxx_delete_sized_aligned(void *p, size_t size,
				     align_val_t align) __asm__("_ZdlPvmSt11align_val_t");
EXPORT void cxx_delete_sized_aligned(void *p, size_t size, align_val_t align)
{
	uslub_free_sized_inline(p, size, align, SIZED_DELETE);
}

EXPORT void cxx_delete_array_sized_aligned(void *p, size_t size,
					   align_val_t align) __asm__("_ZdaPvmSt11align_val_t");
EXPORT void cxx_delete_array_sized_aligned(void *p, size_t size, align_val_t align)
{
	uslub_free_sized_inline(p, size, align, SIZED_DELETE_ARRAY);
}

EXPORT void cxx_delete_aligned_nothrow(void *p, align_val_t align,
				       NOTHROW) __asm__("_ZdlPvSt11align_val_tRKSt9nothrow_t");
EXPORT void cxx_delete_aligned_nothrow(void *p, align_val_t align, NOTHROW)
{
	(void)align;
	DELETE_CHECK(p, KIND_NEW, "operator delete");
	uslub_free_inline(p);
}

EXPORT void
cxx_delete_array_aligned_nothrow(void *p, align_val_t align,
				 NOTHROW) __asm__("_ZdaPvSt11align_val_tRKSt9nothrow_t");
EXPORT void cxx_delete_array_aligned_nothrow(void *p, align_val_t align, NOTHROW)
{
	(void)align;
	DELETE_CHECK(p, KIND_NEW_ARRAY, "operator delete[]");
	uslub_free_inline(p);
}
