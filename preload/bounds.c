/* libuslub_bounds.so: memcpy, memmove and memset checked against the uslub block they
 * write into (USLUB_DEBUG=B, core/debug/bounds.c). Preloaded after libuslub.so:
 *
 *     LD_PRELOAD="libuslub.so libuslub_bounds.so" USLUB_DEBUG=B ./prog
 *
 * A library of its own, so that a program that does not ask keeps libc's functions with
 * no step in front of them. Each function asks uslub_check_write (in libuslub.so, which
 * answers at once without B), then calls libc's: found with dlsym(RTLD_NEXT) by the
 * constructor. Before that - other libraries' constructors run first, and the dynamic
 * loader may call in between - a plain byte loop does the work; it is compiled with
 * -fno-builtin and -fno-tree-loop-distribute-patterns, so the compiler does not turn it
 * back into a call of the function it is part of. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <stddef.h>

#include "uslub.h"

#define EXPORT __attribute__((visibility("default")))

static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);
static void *(*real_memset)(void *, int, size_t);
static void *(*real_memcpy_chk)(void *, const void *, size_t, size_t);
static void *(*real_memmove_chk)(void *, const void *, size_t, size_t);
static void *(*real_memset_chk)(void *, int, size_t, size_t);

static void *copy_up(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	for (size_t i = 0; i < n; i++)
		dp[i] = sp[i];
	return d;
}

static void *copy_down(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	for (size_t i = n; i > 0; i--)
		dp[i - 1] = sp[i - 1];
	return d;
}

__attribute__((constructor)) static void bounds_init(void)
{
	real_memcpy = (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memcpy");
	real_memmove = (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memmove");
	real_memset = (void *(*)(void *, int, size_t))dlsym(RTLD_NEXT, "memset");
	real_memcpy_chk =
	    (void *(*)(void *, const void *, size_t, size_t))dlsym(RTLD_NEXT, "__memcpy_chk");
	real_memmove_chk =
	    (void *(*)(void *, const void *, size_t, size_t))dlsym(RTLD_NEXT, "__memmove_chk");
	real_memset_chk = (void *(*)(void *, int, size_t, size_t))dlsym(RTLD_NEXT, "__memset_chk");
}

EXPORT void *memcpy(void *d, const void *s, size_t n)
{
	uslub_check_write(d, n, "memcpy", __builtin_return_address(0));
	if (__builtin_expect(real_memcpy != NULL, 1))
		return real_memcpy(d, s, n);
	return copy_up(d, s, n);
}

EXPORT void *memmove(void *d, const void *s, size_t n)
{
	uslub_check_write(d, n, "memmove", __builtin_return_address(0));
	if (__builtin_expect(real_memmove != NULL, 1))
		return real_memmove(d, s, n);
	return (char *)d <= (const char *)s ? copy_up(d, s, n) : copy_down(d, s, n);
}

EXPORT void *memset(void *d, int c, size_t n)
{
	uslub_check_write(d, n, "memset", __builtin_return_address(0));
	if (__builtin_expect(real_memset != NULL, 1))
		return real_memset(d, c, n);
	unsigned char *dp = d;
	for (size_t i = 0; i < n; i++)
		dp[i] = (unsigned char)c;
	return d;
}

/* _FORTIFY_SOURCE's forms, where the compiler knew the destination's size: libc's own
 * check first (it stops a write past what the compiler knew), then uslub's. */
EXPORT void *__memcpy_chk(void *d, const void *s, size_t n, size_t dlen)
{
	if (n > dlen && real_memcpy_chk)
		return real_memcpy_chk(d, s, n, dlen);
	uslub_check_write(d, n, "memcpy", __builtin_return_address(0));
	return real_memcpy ? real_memcpy(d, s, n) : copy_up(d, s, n);
}

EXPORT void *__memmove_chk(void *d, const void *s, size_t n, size_t dlen)
{
	if (n > dlen && real_memmove_chk)
		return real_memmove_chk(d, s, n, dlen);
	uslub_check_write(d, n, "memmove", __builtin_return_address(0));
	if (real_memmove)
		return real_memmove(d, s, n);
	return (char *)d <= (const char *)s ? copy_up(d, s, n) : copy_down(d, s, n);
}

EXPORT void *__memset_chk(void *d, int c, size_t n, size_t dlen)
{
	if (n > dlen && real_memset_chk)
		return real_memset_chk(d, c, n, dlen);
	return memset(d, c, n);
}
