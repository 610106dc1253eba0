/* Size classes and calculate_order: the class table is the smallest fit for every size,
 * and the order calculation gives what the running kernel gives for the same object
 * sizes (tests/data/kernel_orders.txt, read from /sys/kernel/slab on 2 CPUs). */
#include "size_classes.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static void check_table(void)
{
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		CHECKF(uslub_class_size[i] % 16 == 0, "class %u size %u", i, uslub_class_size[i]);
		if (i)
			CHECKF(uslub_class_size[i] > uslub_class_size[i - 1], "class %u", i);
	}
	CHECKF(uslub_class_size[USLUB_NR_CLASSES - 1] == USLUB_MAX_SMALL, "largest class");
	for (size_t size = 0; size <= USLUB_MAX_SMALL; size++) {
		unsigned c = uslub_size_to_class(size);
		CHECKF(c < USLUB_NR_CLASSES && uslub_class_size[c] >= size, "size %zu -> %u", size,
		       c);
		if (c > 0)
			CHECKF(uslub_class_size[c - 1] < size || size == 0, "size %zu not smallest",
			       size);
		/* The finer classes bound rounding waste: under 25% past 128 bytes. */
		if (size > 128)
			CHECKF((uslub_class_size[c] - size) * 4 < uslub_class_size[c],
			       "size %zu wastes %u", size, uslub_class_size[c] - (unsigned)size);
		/* ... and at most 1/9 past 4 KiB, where an object is a page or more: a 4.2 KiB
		 * buffer takes 4.5 KiB, not 5. */
		if (size > 4096)
			CHECKF((uslub_class_size[c] - size) * 9 <= uslub_class_size[c],
			       "size %zu wastes %u of %u", size,
			       uslub_class_size[c] - (unsigned)size, uslub_class_size[c]);
	}
	/* A power of two from 1 KiB plus a header of up to an eighth of it wastes at most
	 * 1/9 too: sqlite3's 1,032-byte buffers take 1,152 bytes, not 1,280. */
	for (size_t pow2 = 1024; pow2 < USLUB_MAX_SMALL; pow2 *= 2)
		for (size_t size = pow2 + 1; size <= pow2 + pow2 / 8; size++) {
			unsigned c = uslub_size_to_class(size);
			CHECKF((uslub_class_size[c] - size) * 9 <= uslub_class_size[c],
			       "%zu + %zu bytes wastes %u of %u", pow2, size - pow2,
			       uslub_class_size[c] - (unsigned)size, uslub_class_size[c]);
		}
	/* The kmalloc shape: every power of two from 16, and 96 and 192. */
	static const unsigned kmalloc[] = {16,	32,  64,   96,	 128,  192,
					   256, 512, 1024, 2048, 4096, 8192};
	for (unsigned i = 0; i < sizeof(kmalloc) / sizeof(kmalloc[0]); i++)
		CHECKF(uslub_class_size[uslub_size_to_class(kmalloc[i])] == kmalloc[i], "%u",
		       kmalloc[i]);
}

static void check_names(void)
{
	char buf[16];
	uslub_class_name(uslub_size_to_class(64), buf);
	CHECKF(strcmp(buf, "kmalloc-64") == 0, "%s", buf);
	uslub_class_name(uslub_size_to_class(1024), buf);
	CHECKF(strcmp(buf, "kmalloc-1k") == 0, "%s", buf);
	uslub_class_name(uslub_size_to_class(8192), buf);
	CHECKF(strcmp(buf, "kmalloc-8k") == 0, "%s", buf);
	uslub_class_name(uslub_size_to_class(1200), buf);
	CHECKF(strcmp(buf, "kmalloc-1280") == 0, "%s", buf);
	uslub_class_name(uslub_size_to_class(1032), buf);
	CHECKF(strcmp(buf, "kmalloc-1152") == 0, "%s", buf);
	uslub_class_name(uslub_size_to_class(4300), buf);
	CHECKF(strcmp(buf, "kmalloc-4608") == 0, "%s", buf);
}

static void check_against_kernel(const char *path)
{
	FILE *f = fopen(path, "r");
	CHECKF(f != NULL, "cannot open %s", path);
	if (!f)
		return;
	struct uslub_order_params p = {.min_order = 0, .max_order = 3, .nr_cpus = 2};
	char line[256];
	unsigned rows = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned size, order, objs;
		if (line[0] == '#' || sscanf(line, "%u %u %u", &size, &order, &objs) != 3)
			continue;
		unsigned ours = uslub_calculate_order(size, &p);
		CHECKF(ours == order, "object size %u: kernel order %u, ours %u", size, order,
		       ours);
		CHECKF(uslub_order_objects(ours, size) == objs || ours != order,
		       "object size %u: kernel %u objects, ours %u", size, objs,
		       uslub_order_objects(ours, size));
		rows++;
	}
	fclose(f);
	CHECKF(rows >= 50, "only %u rows in %s", rows, path);
}

/* The settings, as slub_min_order, slub_max_order and slub_min_objects act. */
static void check_settings(void)
{
	struct uslub_order_params p = {.min_order = 0, .max_order = 3, .nr_cpus = 2};
	/* min_objects defaults to 4 * (fls(2) + 1) = 12: 512 B objects need order 1. */
	CHECKF(uslub_calculate_order(512, &p) == 1, "512 at defaults");
	CHECKF(uslub_calculate_order(2048, &p) == 3, "2048 at defaults");
	/* More CPUs ask for more objects per slab: fls(64) = 7, 32 objects. */
	p.nr_cpus = 64;
	CHECKF(uslub_calculate_order(512, &p) == 2, "512 on 64 CPUs: %u",
	       uslub_calculate_order(512, &p));
	p.nr_cpus = 2;
	/* max order caps the preferred order; a size that needs more still gets one object. */
	p.max_order = 0;
	CHECKF(uslub_calculate_order(2048, &p) == 0, "2048 with max order 0");
	CHECKF(uslub_calculate_order(8192, &p) == 1, "8192 with max order 0 needs order 1");
	/* min order raises it. */
	p.max_order = 3;
	p.min_order = 2;
	CHECKF(uslub_calculate_order(64, &p) == 2, "64 with min order 2");
	p.min_order = 0;
	/* min objects steers it: one object per slab is enough for 4 KiB at order 0. */
	p.min_objects = 1;
	CHECKF(uslub_calculate_order(4096, &p) == 0, "4096 with min objects 1");
	p.min_objects = 32;
	CHECKF(uslub_calculate_order(256, &p) == 1, "256 with min objects 32");
	/* The leftover rule, 1/16 first: 700 B objects, 4 wanted. Order 0 leaves 596 of 4096
	 * (more than 256), order 1 leaves 492 of 8192 (within 512): order 1. With one object
	 * wanted, any leftover is accepted at the smallest order. */
	p.min_objects = 4;
	CHECKF(uslub_calculate_order(700, &p) == 1, "700: %u", uslub_calculate_order(700, &p));
	p.min_objects = 1;
	CHECKF(uslub_calculate_order(700, &p) == 0, "700: %u", uslub_calculate_order(700, &p));
	/* The cap on objects per slab (the kernel's MAX_OBJS_PER_PAGE). */
	p.min_order = 10;
	p.max_order = 10;
	CHECKF(uslub_order_objects(uslub_calculate_order(16, &p), 16) <= USLUB_MAX_OBJS,
	       "16 B at order 10 exceeds the object cap");
	CHECKF(uslub_get_order(1) == 0 && uslub_get_order(4096) == 0 && uslub_get_order(4097) == 1,
	       "get_order");
}

int main(int argc, char **argv)
{
	check_table();
	check_names();
	check_settings();
	char path[4096];
	snprintf(path, sizeof(path), "%s/kernel_orders.txt", argc > 1 ? argv[1] : "tests/data");
	check_against_kernel(path);
	return tu_summary("test_size_classes");
}
