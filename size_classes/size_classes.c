/* Size classes and the kernel's slab order calculation.
 *
 * calculate_order, as mm/slub.c has it (before the 6.8 rewrite), in words:
 *
 *   A slab should hold at least min_objects objects, so that the per-CPU slab is not
 *   refilled too often; min_objects defaults to 4 * (fls(nr_cpus) + 1). For that many
 *   objects, take the smallest order (>= slub_min_order) whose leftover - the tail of the
 *   slab too small for one more object - is at most 1/16 of the slab. If no order up to
 *   slub_max_order meets that, accept 1/8, then 1/4. If still none, ask for one object
 *   fewer and start again, down to one object; then accept any waste within
 *   slub_max_order, and at last within the largest order there is.
 *
 * Each cache keeps that preferred order (the kernel's s->oo) and the order that holds just
 * one object (s->min): a new slab that cannot have the first falls back to the second. */
#include "size_classes.h"

#include <limits.h>

const uint16_t uslub_class_size[USLUB_NR_CLASSES] = {
    16,	  32,	48,   64,   80,	  96,	112,  128,  160,  192,	224,  256,  320,
    384,  448,	512,  640,  768,  896,	1024, 1152, 1280, 1536, 1792, 2048, 2304,
    2560, 3072, 3584, 4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192,
};

/* Written out by hand; the unit test checks every entry against uslub_class_size. */
const uint8_t uslub_class_of[USLUB_MAX_SMALL / 16 + 1] = {
    [0] = 0,
    [1] = 0,
    [2] = 1,
    [3] = 2,
    [4] = 3,
    [5] = 4,
    [6] = 5,
    [7] = 6,
    [8] = 7,
    [9 ... 10] = 8,
    [11 ... 12] = 9,
    [13 ... 14] = 10,
    [15 ... 16] = 11,
    [17 ... 20] = 12,
    [21 ... 24] = 13,
    [25 ... 28] = 14,
    [29 ... 32] = 15,
    [33 ... 40] = 16,
    [41 ... 48] = 17,
    [49 ... 56] = 18,
    [57 ... 64] = 19,
    [65 ... 72] = 20,
    [73 ... 80] = 21,
    [81 ... 96] = 22,
    [97 ... 112] = 23,
    [113 ... 128] = 24,
    [129 ... 144] = 25,
    [145 ... 160] = 26,
    [161 ... 192] = 27,
    [193 ... 224] = 28,
    [225 ... 256] = 29,
    [257 ... 288] = 30,
    [289 ... 320] = 31,
    [321 ... 352] = 32,
    [353 ... 384] = 33,
    [385 ... 416] = 34,
    [417 ... 448] = 35,
    [449 ... 480] = 36,
    [481 ... 512] = 37,
};

unsigned uslub_get_order(size_t size)
{
	size_t pages = (size + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT;
	/* The bits of pages - 1: a loop of one step an order cost every 2 MiB block 69
	 * instructions (callgrind). */
	return pages > 1 ? (unsigned)(sizeof(long) * CHAR_BIT) - (unsigned)__builtin_clzl(pages - 1)
			 : 0;
}

static unsigned fls_u(unsigned x)
{
	return x ? (unsigned)(sizeof(x) * CHAR_BIT) - (unsigned)__builtin_clz(x) : 0;
}

/* The kernel's slab_order: the first order from the one min_objects needs up to
 * max_order whose leftover is within 1/fract_leftover of the slab; max_order + 1 if none. */
static unsigned slab_order(unsigned size, unsigned min_objects, unsigned min_order,
			   unsigned max_order, unsigned fract_leftover)
{
	unsigned order;

	if (uslub_order_objects(min_order, size) > USLUB_MAX_OBJS)
		return uslub_get_order((size_t)size * USLUB_MAX_OBJS) - 1;

	order = uslub_get_order((size_t)min_objects * size);
	if (order < min_order)
		order = min_order;
	for (; order <= max_order; order++) {
		unsigned long slab_size = USLUB_PAGE_SIZE << order;
		unsigned long rem = slab_size % size;
		if (rem <= slab_size / fract_leftover)
			break;
	}
	return order;
}

unsigned uslub_calculate_order(unsigned size, const struct uslub_order_params *p)
{
	unsigned min_objects = p->min_objects;
	unsigned max_objects, order, fraction;

	if (!min_objects)
		min_objects = 4 * (fls_u(p->nr_cpus ? p->nr_cpus : 1) + 1);
	max_objects = uslub_order_objects(p->max_order, size);
	if (max_objects < 1)
		max_objects = 1;
	if (min_objects > max_objects)
		min_objects = max_objects;

	while (min_objects > 1) {
		for (fraction = 16; fraction >= 4; fraction /= 2) {
			order = slab_order(size, min_objects, p->min_order, p->max_order, fraction);
			if (order <= p->max_order)
				return order;
		}
		min_objects--;
	}

	order = slab_order(size, 1, p->min_order, p->max_order, 1);
	if (order <= p->max_order)
		return order;
	order = slab_order(size, 1, p->min_order, USLUB_MAX_ORDER, 1);
	if (order <= USLUB_MAX_ORDER)
		return order;
	return USLUB_MAX_ORDER;
}

static char *put_uint(char *p, unsigned v)
{
	char tmp[12];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

void uslub_class_name(unsigned cls, char *buf)
{
	static const char prefix[] = "kmalloc-";
	unsigned size = uslub_class_size[cls];
	char *p = buf;

	for (const char *s = prefix; *s; s++)
		*p++ = *s;
	if (size >= 1024 && size % 1024 == 0) {
		p = put_uint(p, size / 1024);
		*p++ = 'k';
	} else {
		p = put_uint(p, size);
	}
	*p = '\0';
}
