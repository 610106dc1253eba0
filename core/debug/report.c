/* The kernel-style reports of the debug caches: a banner naming the cache and what was
 * found, the slab, the object's alloc and free sites, hex dumps of the object and its red
 * zones; then the process stops. Code addresses are written with the module they lie in,
 * read from /proc/self/maps without allocating. Everything goes through print.c. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/os.h"
#include "os/print.h"
#include "slab/slab.h"
#include "os/vg.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the checks of one operation (report.h). */
__thread const char *uslub_debug_op;
__thread void *uslub_debug_caller;

/* One line of /proc/self/maps: "start-end perms offset dev inode   path". */
static int maps_line(struct uslub_out *o, const char *line, const char *end, uintptr_t addr)
{
	const char *p = line;
	uintptr_t start = uslub_parse_hex(&p, end);
	if (p >= end || *p != '-')
		return 0;
	p++;
	uintptr_t stop = uslub_parse_hex(&p, end);
	if (addr < start || addr >= stop)
		return 0;
	while (p < end && *p == ' ')
		p++;
	while (p < end && *p != ' ')
		p++; /* perms */
	while (p < end && *p == ' ')
		p++;
	uintptr_t off = uslub_parse_hex(&p, end);
	for (int field = 0; field < 2; field++) { /* dev, inode */
		while (p < end && *p == ' ')
			p++;
		while (p < end && *p != ' ')
			p++;
	}
	while (p < end && *p == ' ')
		p++;
	if (p < end && *p == '/') {
		/* print.c has no %.*s: the path byte by byte. */
		uslub_printf(o, " (");
		for (; p < end; p++)
			uslub_printf(o, "%c", *p);
		uslub_printf(o, "+0x%lx)", (unsigned long)(addr - (start - off)));
	}
	return 1;
}

void uslub_debug_print_addr(struct uslub_out *o, uintptr_t addr)
{
	uslub_printf(o, "0x%lx", (unsigned long)addr);
	if (!addr)
		return;
	int fd = USLUB_OUT(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
	if (fd < 0)
		return;
	char buf[4096];
	size_t len = 0;
	for (;;) {
		ssize_t r = USLUB_OUT(read(fd, buf + len, sizeof(buf) - len));
		if (r <= 0)
			break;
		len += (size_t)r;
		size_t used = 0;
		int done = 0;
		for (char *nl; (nl = memchr(buf + used, '\n', len - used));
		     used = (size_t)(nl - buf) + 1)
			if (maps_line(o, buf + used, nl, addr)) {
				done = 1;
				break;
			}
		if (done)
			break;
		if (used == 0 && len == sizeof(buf))
			used = len; /* a line longer than the buffer: skip it */
		memmove(buf, buf + used, len - used);
		len -= used;
	}
	USLUB_OUT(close(fd));
}

static void hex_line(struct uslub_out *o, const char *label, const unsigned char *p, size_t n)
{
	uslub_printf(o, "%-8s 0x%lx: ", label, (unsigned long)(uintptr_t)p);
	for (size_t i = 0; i < n; i++)
		uslub_printf(o, "%02x%s", p[i], i + 1 < n ? " " : "");
	uslub_printf(o, "\n");
}

static void hex_dump(struct uslub_out *o, const char *label, const unsigned char *p, size_t n)
{
	mem_open((void *)p, n);
	for (size_t i = 0; i < n; i += 16)
		hex_line(o, label, p + i, n - i < 16 ? n - i : 16);
}

/* The operation the report was found in, and the program's call site when known. */
static void print_site(struct uslub_out *o)
{
	if (!uslub_debug_op)
		return;
	uslub_printf(o, "INFO: Found in %s()", uslub_debug_op);
	if (uslub_debug_caller) {
		uslub_printf(o, " called from ");
		uslub_debug_print_addr(o, (uintptr_t)uslub_debug_caller);
	}
	uslub_printf(o, "\n");
}

static void print_track(struct uslub_out *o, const char *what, const struct dbg_track *t)
{
	if (!t->addr) {
		uslub_printf(o, "INFO: %s: no record\n", what);
		return;
	}
	uslub_printf(o, "INFO: %s in ", what);
	uslub_debug_print_addr(o, t->addr);
	uslub_printf(o, " tid=%u cpu=%u\n", t->tid, t->cpu);
}

__attribute__((noreturn)) void uslub_debug_report(const struct uslub_cache *c, struct page_desc *s,
						  void *object, const char *what, const void *fault)
{
	uslub_debug_report_object(c, s, object, what, fault, REQ_UNKNOWN);
}

__attribute__((noreturn)) void uslub_debug_report_object(const struct uslub_cache *c,
							 struct page_desc *s, void *object,
							 const char *what, const void *fault,
							 size_t req)
{
	struct uslub_out o;
	uslub_out_init(&o, 2);
	const unsigned char *obj = object;
	/* One line that says who speaks, for a log's reader and grep; the kernel's form
	 * follows. */
	uslub_printf(&o, "uslub: %s: %s, object 0x%lx\n", c->name, what,
		     (unsigned long)(uintptr_t)obj);
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_printf(&o, "BUG %s (uslub): %s\n", c->name, what);
	uslub_printf(&o, "--------------------------------------------------------------"
			 "---------------\n");
	if (fault) {
		const unsigned char *f = fault;
		mem_open((void *)f, 1);
		uslub_printf(&o, "INFO: 0x%lx @offset=%ld in the object",
			     (unsigned long)(uintptr_t)f, (long)(f - obj));
		if (req != REQ_UNKNOWN)
			uslub_printf(&o, " (requested %zu of %u)", req, c->size);
		uslub_printf(&o, ". First byte 0x%02x\n", *f);
	}
	uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
	uslub_printf(&o, "INFO: Slab 0x%lx objects=%u used=%u order=%u frozen=%u\n",
		     (unsigned long)(uintptr_t)page_address(s), s->objects, w_inuse(w), s->order,
		     (w & W_FROZEN) ? 1 : 0);
	uslub_printf(&o, "INFO: Object 0x%lx size=%u", (unsigned long)(uintptr_t)obj, c->size);
	if (req != REQ_UNKNOWN)
		uslub_printf(&o, " requested=%zu", req);
	uslub_printf(&o, "\n");
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(m, sizeof(*m));
	if (c->debug & DBG_TRACK) {
		print_track(&o, "Allocated", &m->track[TRACK_ALLOC]);
		print_track(&o, "Freed", &m->track[TRACK_FREE]);
	}
	print_site(&o);
	/* The red zones' 32 bytes next to the object, and the fault's line when it lies
	 * farther out in one. */
	const unsigned char *fb = fault;
	size_t near = DBG_RZ < 32 ? DBG_RZ : 32;
	if (fb && fb >= obj - DBG_RZ && fb < obj - near)
		hex_dump(&o, "Redzone", (const unsigned char *)((uintptr_t)fb & ~(uintptr_t)15),
			 16);
	hex_dump(&o, "Redzone", obj - near, near);
	/* The object around the fault: all of it when small, else 128 bytes. */
	size_t from = 0, n = c->size;
	if (n > 128) {
		size_t at = fault && (const unsigned char *)fault >= obj &&
				    (const unsigned char *)fault < obj + c->size
				? (size_t)((const unsigned char *)fault - obj)
				: 0;
		from = at > 64 ? (at - 64) & ~(size_t)15 : 0;
		n = from + 128 > c->size ? c->size - from : 128;
	}
	hex_dump(&o, "Object", obj + from, n);
	hex_dump(&o, "Redzone", obj + c->size, near);
	if (fb && fb >= obj + c->size + near && fb < obj + c->size + DBG_RZ)
		hex_dump(&o, "Redzone", (const unsigned char *)((uintptr_t)fb & ~(uintptr_t)15),
			 16);
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_out_flush(&o);
	abort();
}

/* A block's red zone is the rest of its span: no metadata, no tracks, so the report has
 * the block, the first bad byte, and the bytes on either side of the request's end. */
__attribute__((noreturn)) void uslub_debug_report_block(void *p, size_t size, size_t span,
							const char *what,
							const unsigned char *fault)
{
	struct uslub_out o;
	uslub_out_init(&o, 2);
	const unsigned char *b = p;
	const char *kind = region_of(p) ? "large block" : "huge block";
	uslub_printf(&o, "uslub: %s: %s, block 0x%lx\n", kind, what, (unsigned long)(uintptr_t)b);
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_printf(&o, "BUG %s (uslub): %s\n", kind, what);
	uslub_printf(&o, "--------------------------------------------------------------"
			 "---------------\n");
	bool past = fault >= b + span; /* a write checked before it was made (bounds.c) */
	if (!past)
		mem_open((void *)fault, 1);
	if (past)
		uslub_printf(&o,
			     "INFO: 0x%lx @offset=%zu, past the block's pages (requested %zu of "
			     "%zu)\n",
			     (unsigned long)(uintptr_t)fault, (size_t)(fault - b), size, span);
	else if (fault < b)
		uslub_printf(&o,
			     "INFO: 0x%lx @offset=-%zu, before the block (requested %zu of %zu). "
			     "First byte 0x%02x\n",
			     (unsigned long)(uintptr_t)fault, (size_t)(b - fault), size, span,
			     *fault);
	else
		uslub_printf(&o,
			     "INFO: 0x%lx @offset=%zu in the block (requested %zu of %zu). First "
			     "byte 0x%02x\n",
			     (unsigned long)(uintptr_t)fault, (size_t)(fault - b), size, span,
			     *fault);
	uslub_printf(&o, "INFO: Block 0x%lx size=%zu requested=%zu\n", (unsigned long)(uintptr_t)b,
		     span, size);
	print_site(&o);
	const unsigned char *line = (const unsigned char *)((uintptr_t)fault & ~(uintptr_t)15);
	if (past) {
		size_t before = size < 16 ? size : 16;
		hex_dump(&o, "Object", b + size - before, before);
	} else if (fault < b || fault < b + size) {
		/* Before the block, or in a freed block's poison: the fault's line. */
		hex_dump(&o, fault < b ? "Redzone" : "Object", line, 16);
	} else {
		size_t before = size < 16 ? size : 16;
		hex_dump(&o, "Object", b + size - before, before);
		/* The red zone from its start, up to the line with the bad byte. */
		size_t upto = (size_t)(fault - b) + 1, n = upto - size;
		if (n > 64) {
			hex_dump(&o, "Redzone", b + size, 16);
			uslub_printf(&o, "...\n");
			size_t from = (upto - 1) & ~(size_t)15;
			hex_dump(&o, "Redzone", b + from, span - from < 16 ? span - from : 16);
		} else {
			size_t len = (n + 15) & ~(size_t)15;
			hex_dump(&o, "Redzone", b + size, len < span - size ? len : span - size);
		}
	}
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_out_flush(&o);
	abort();
}

/* The first byte in [p, p + n) that is not `val`, or NULL. */
const unsigned char *uslub_debug_first_not(const void *p, size_t n, int val)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)val)
			return b + i;
	return NULL;
}
