/* Forced into every file of the fuzz build (-include). GCC's <stdatomic.h> accepts a plain
 * object in atomic_store_explicit and atomic_load_explicit (core/page/region.c publishes
 * region table entries that way); clang's insists on an _Atomic one. The cast below makes
 * either kind _Atomic (`x + 0` drops the qualifier first), with the same meaning. */
#include <stdatomic.h>
#undef atomic_store_explicit
#undef atomic_load_explicit
#define atomic_store_explicit(p, v, o)                                                             \
	__c11_atomic_store((_Atomic(__typeof__(*(p) + 0)) *)(p), (v), (o))
#define atomic_load_explicit(p, o) __c11_atomic_load((_Atomic(__typeof__(*(p) + 0)) *)(p), (o))
