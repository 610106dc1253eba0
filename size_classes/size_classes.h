/* Size classes: request size -> cache index, and the slab order of each cache.
 *
 * The classes follow kmalloc's shape (16 B ... 8 KiB, powers of two plus 96 and 192) with
 * finer steps in between, four per doubling above 128 B as jemalloc spaces them, so the
 * rounding waste of any request stays under 25% instead of kmalloc's 50%. Above 4 KiB the
 * steps are 512 B (eight per doubling), so rounding wastes at most 1/9 there: these are
 * the buffers programs size as "a page plus a header" (sqlite3's 4.2 KiB page buffers took
 * a 5 KiB object each with quarter steps), and one object is a whole page or more, so
 * rounding waste is resident memory, not slack shared with a neighbour. A slab of these
 * holds 4 to 7 objects; the pages its tail leaves untouched are never faulted in. The same
 * buffers a size down - 1 KiB or 2 KiB plus a header - get a class an eighth past the
 * power of two (1152, 2304), so they too waste at most 1/9: sqlite3 asks for 1,032 bytes
 * tens of thousands of times, which took 1,280 each (its peak 114.0 MiB, 107.9 with
 * 1152). Every class is a multiple of 16, so every object is 16-byte aligned. */
#ifndef USLUB_SIZE_CLASSES_H
#define USLUB_SIZE_CLASSES_H

#include <stddef.h>
#include <stdint.h>

#define USLUB_PAGE_SHIFT 12
#define USLUB_PAGE_SIZE	 (1UL << USLUB_PAGE_SHIFT)
#define USLUB_NR_CLASSES 38
#define USLUB_MAX_SMALL	 8192
#define USLUB_MAX_ORDER	 10    /* buddy orders 0..10: blocks up to 4 MiB */
#define USLUB_MAX_OBJS	 32767 /* the kernel's MAX_OBJS_PER_PAGE */

extern const uint16_t uslub_class_size[USLUB_NR_CLASSES];
/* Indexed by (size + 15) / 16 for size <= USLUB_MAX_SMALL. */
extern const uint8_t uslub_class_of[USLUB_MAX_SMALL / 16 + 1];

static inline unsigned uslub_size_to_class(size_t size)
{
	return uslub_class_of[(size + 15) >> 4];
}

/* The settings calculate_order works under, as slub_min_order, slub_max_order and
 * slub_min_objects do in the kernel; min_objects 0 means the kernel's rule on CPU count. */
struct uslub_order_params {
	unsigned min_order;
	unsigned max_order;
	unsigned min_objects;
	unsigned nr_cpus;
};

/* Smallest order whose slab holds `size` (the kernel's get_order). */
unsigned uslub_get_order(size_t size);
/* The preferred slab order for objects of `size` (the kernel's calculate_order). */
unsigned uslub_calculate_order(unsigned size, const struct uslub_order_params *p);
/* Objects in a slab of `order` pages. */
static inline unsigned uslub_order_objects(unsigned order, unsigned size)
{
	return (unsigned)((USLUB_PAGE_SIZE << order) / size);
}

/* "kmalloc-64", "kmalloc-1k": written into buf (at least 16 bytes). */
void uslub_class_name(unsigned cls, char *buf);

#endif
