/* Debug caches (see debug.h for the slot layout): USLUB_DEBUG's slub_debug letters, the
 * hardened freelist, and the valgrind and ASan hooks. Everything here runs on the slow
 * path of a debug cache only; nothing allocates, and reports go through print.c. */
#include "debug/debug.h"

#include "os/options.h"
#include "os/os.h"
#include "os/print.h"
#include "slab/slab.h"
#include "os/vg.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* The state word tells an allocated object from a free one, and both from bytes that are
 * no state at all (libumem's XOR-encoded buffer control): XOR with the object's address
 * so a state copied from another object does not pass. */
#define STATE_ALLOC 0xa110ca7eda110ca7ULL
#define STATE_FREE  0xf7eedf7eedf7eed0ULL

/* A report about an object whose request is not known (a free one, a broken state). */
#define REQ_UNKNOWN SIZE_MAX

/* The operation a report was found in, and the program's call site, for its last line.
 * Set just before the checks of one operation; a report ends the process, so a thread
 * that overwrites another's is harmless. */
static __thread const char *cur_op;
static __thread void *cur_caller;

/* ---- start-up ---------------------------------------------------------------------- */

/* Is `name` one of the comma-separated cache names of USLUB_DEBUG's list? */
static int names_cache(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && memcmp(p, name, n) == 0)
			return 1;
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
}

/* USLUB_DEBUG's letters (options.c) as this file's flags. */
static unsigned letter_flags(unsigned letters)
{
	return (letters & USLUB_DEBUG_F ? DBG_CHECK : 0) |
	       (letters & USLUB_DEBUG_Z ? DBG_REDZONE : 0) |
	       (letters & USLUB_DEBUG_P ? DBG_POISON : 0) |
	       (letters & USLUB_DEBUG_U ? DBG_TRACK : 0) |
	       (letters & USLUB_DEBUG_T ? DBG_TRACE : 0);
}

/* A debug cache's slots: pad (red zones and metadata) in front of each object, a
 * multiple of the alignment the class promises, so objects keep it. */
static void debug_layout(struct uslub_cache *c)
{
	uint32_t align = c->size & -c->size;
	if (align > USLUB_PAGE_SIZE)
		align = USLUB_PAGE_SIZE;
	uint32_t pad = (DBG_PAD_MIN + align - 1) & ~(align - 1);
	c->offset = pad;
	c->stride = pad + c->size;
}

int uslub_memcheck;
bool uslub_debug_any;
bool uslub_debug_every_cache;

void uslub_debug_init(void)
{
	unsigned flags;
	const char *list;
	uint64_t seed = uslub_random_seed();
	uslub_random_init(&seed);
	flags = letter_flags(uslub_config.debug_letters);
	list = uslub_config.debug_caches;
	uslub_debug_any = flags != 0;
	uslub_debug_every_cache = flags && !list;
	/* Checked once: every cache then takes the slow path, which tells memcheck. */
	unsigned all = 0;
	if (vg_running()) {
		all |= DBG_VALGRIND;
		uslub_memcheck = 1;
	}
	if (USLUB_ASAN)
		all |= DBG_ASAN;
	if (uslub_config.harden == USLUB_HARDEN_FULL)
		all |= DBG_HARDEN;
	/* Large and huge blocks belong to no cache: Z reaches them only when it is asked
	 * for every cache. */
	uslub_block_debug = (all & (DBG_VALGRIND | DBG_ASAN)) | (list ? 0 : flags & DBG_REDZONE);
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		c->secret = uslub_splitmix64(&seed) | 1;
		c->debug = all;
		if (flags && (!list || names_cache(list, c->name)))
			c->debug |= flags;
		if (c->debug)
			debug_layout(c);
	}
	if (list) {
		/* A name that matches no cache is most likely a typo: say so. */
		for (const char *p = list; *p;) {
			const char *comma = strchr(p, ',');
			size_t len = comma ? (size_t)(comma - p) : strlen(p);
			int found = 0;
			for (unsigned i = 0; i < USLUB_NR_CLASSES && !found; i++)
				found = strlen(uslub_caches[i].name) == len &&
					memcmp(uslub_caches[i].name, p, len) == 0;
			if (!found) {
				char name[32];
				size_t n = len < sizeof(name) - 1 ? len : sizeof(name) - 1;
				memcpy(name, p, n);
				name[n] = '\0';
				uslub_message("uslub: USLUB_DEBUG: no cache named '%s'\n", name);
			}
			if (!comma)
				break;
			p = comma + 1;
		}
	}
}

/* ---- free pointers -------------------------------------------------------------- */

static inline uintptr_t harden_key(const struct uslub_cache *c, const void *slot)
{
	/* The kernel's freelist_ptr: the secret, and the address the pointer is stored at,
	 * so the same pointer reads differently in every slot. */
	return (c->debug & DBG_HARDEN) ? c->secret ^ (uintptr_t)slot : 0;
}

void *uslub_debug_get_next(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->link, sizeof(m->link));
	uintptr_t v = __atomic_load_n(&m->link, __ATOMIC_RELAXED) ^ harden_key(c, &m->link);
	mem_close(&m->link, sizeof(m->link));
	if (v && (c->debug & (DBG_HARDEN | DBG_CHECK))) {
		/* It must be an object of the same slab: the pop that follows would
		 * otherwise hand out whatever the pointer was made to name. */
		struct page_desc *s = page_desc_of(object)->head;
		if (uslub_slab_object_start(s, (void *)v) != (void *)v)
			uslub_debug_report(c, s, object, "Freelist pointer corrupted", &m->link);
	}
	return (void *)v;
}

void uslub_debug_set_next(const struct uslub_cache *c, void *object, void *next)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->link, sizeof(m->link));
	__atomic_store_n(&m->link, (uintptr_t)next ^ harden_key(c, &m->link), __ATOMIC_RELAXED);
	mem_close(&m->link, sizeof(m->link));
}

/* ---- objects ---------------------------------------------------------------------- */

static void fill_poison(const struct uslub_cache *c, void *object)
{
	memset(object, POISON_FREE, c->size - 1);
	((unsigned char *)object)[c->size - 1] = POISON_END;
}

static size_t get_orig_size(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->orig_size, sizeof(m->orig_size));
	size_t size = __atomic_load_n(&m->orig_size, __ATOMIC_RELAXED);
	mem_close(&m->orig_size, sizeof(m->orig_size));
	return size;
}

static void set_orig_size(const struct uslub_cache *c, void *object, size_t size)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->orig_size, sizeof(m->orig_size));
	__atomic_store_n(&m->orig_size, size, __ATOMIC_RELAXED);
	mem_close(&m->orig_size, sizeof(m->orig_size));
}

/* The red zones of an object holding `size` bytes: 16 bytes before it, and from `size` to
 * the end of its slot (the kmalloc red zone up to the class size, then 16 bytes). A free
 * object's are filled from the class size on: its poison covers the whole object. */
static void fill_redzones(const struct uslub_cache *c, void *object, size_t size, int val)
{
	char *o = object;
	size_t right = c->size - size + DBG_RZ;
	mem_open(o - DBG_RZ, DBG_RZ);
	mem_open(o + size, right);
	memset(o - DBG_RZ, val, DBG_RZ);
	memset(o + size, val, right);
	mem_close(o - DBG_RZ, DBG_RZ);
	mem_close(o + size, right);
}

void uslub_debug_init_object(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	memset(m, 0, sizeof(*m));
	m->state = (uintptr_t)object ^ STATE_FREE;
	if (c->debug & DBG_REDZONE)
		fill_redzones(c, object, c->size, RED_INACTIVE);
	if (c->debug & DBG_POISON)
		fill_poison(c, object);
}

static size_t slab_bytes(const struct page_desc *s)
{
	return USLUB_PAGE_SIZE << s->order;
}

void uslub_debug_slab_ready(const struct uslub_cache *c, struct page_desc *s)
{
	(void)c;
	mem_close(page_address(s), slab_bytes(s));
}

void uslub_debug_slab_discard(const struct uslub_cache *c, struct page_desc *s)
{
	(void)c;
	mem_release(page_address(s), slab_bytes(s));
}

/* The first byte in [p, p + n) that is not `val`, or NULL. */
static const unsigned char *first_not(const void *p, size_t n, int val)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)val)
			return b + i;
	return NULL;
}

__attribute__((noreturn)) static void report_object(const struct uslub_cache *c,
						    struct page_desc *s, void *object,
						    const char *what, const void *fault,
						    size_t req);

/* The first byte of the red zones around an object holding `size` bytes (see
 * fill_redzones) that is not `val`, or NULL. */
static const unsigned char *bad_redzone(const struct uslub_cache *c, void *object, size_t size,
					int val)
{
	char *o = object;
	size_t right = c->size - size + DBG_RZ;
	mem_open(o - DBG_RZ, DBG_RZ);
	mem_open(o + size, right);
	const unsigned char *bad = first_not(o - DBG_RZ, DBG_RZ, val);
	if (!bad)
		bad = first_not(o + size, right, val);
	mem_close(o - DBG_RZ, DBG_RZ);
	mem_close(o + size, right);
	return bad;
}

/* `req`: the object's request for the report, or REQ_UNKNOWN. */
static void check_redzones(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			   int val, size_t req)
{
	const unsigned char *bad = bad_redzone(c, object, size, val);
	if (bad)
		report_object(c, s, object, "Redzone overwritten", bad, req);
}

static void check_poison(struct uslub_cache *c, struct page_desc *s, void *object)
{
	mem_open(object, c->size);
	const unsigned char *bad = first_not(object, c->size - 1, POISON_FREE);
	if (!bad && ((unsigned char *)object)[c->size - 1] != POISON_END)
		bad = (unsigned char *)object + c->size - 1;
	if (bad)
		uslub_debug_report(c, s, object, "Poison overwritten", bad);
	mem_close(object, c->size);
}

/* The walker's part for Z: the red zones of every allocated object of the slab, the
 * kmalloc red zone after its request included, so an overflow is found at the next
 * operation on the slab rather than when that object is freed. Only the slab's owner
 * walks (as slab_is_valid does): it is the only thread that allocates from the slab, so
 * what another thread may do meanwhile is free or resize one of its objects, and an object
 * whose state or size changed while it was looked at is skipped (the loads around the
 * look, as a seqlock reader's). Not under memcheck or ASan: they see each access as it
 * happens, and opening another thread's red zones would race with its own opening and
 * closing of them. */
static void check_allocated(struct uslub_cache *c, struct page_desc *s)
{
	if (!(c->debug & DBG_REDZONE) || (c->debug & (DBG_VALGRIND | DBG_ASAN)) ||
	    __atomic_load_n(&s->owner, __ATOMIC_RELAXED) != uslub_tls_thread)
		return;
	char *first = (char *)page_address(s) + c->offset;
	for (unsigned i = 0; i < s->objects; i++) {
		char *o = first + (size_t)i * c->stride;
		struct dbg_meta *m = dbg_meta_of(c, o);
		uint64_t alloc = (uintptr_t)o ^ STATE_ALLOC;
		if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) != alloc)
			continue;
		uint64_t req = __atomic_load_n(&m->orig_size, __ATOMIC_ACQUIRE);
		const unsigned char *bad = req <= c->size ? bad_redzone(c, o, req, RED_ACTIVE)
							  : (const unsigned char *)&m->orig_size;
		atomic_thread_fence(memory_order_acquire);
		if (!bad || __atomic_load_n(&m->state, __ATOMIC_RELAXED) != alloc ||
		    __atomic_load_n(&m->orig_size, __ATOMIC_RELAXED) != req)
			continue;
		if (req > c->size)
			report_object(c, s, o, "Object metadata overwritten", bad, REQ_UNKNOWN);
		report_object(c, s, o, "Redzone overwritten", bad, req);
	}
}

static void check_slab(struct uslub_cache *c, struct page_desc *s, void *object)
{
	const char *why = NULL;
	if (!uslub_slab_is_valid(s, &why))
		uslub_debug_report(c, s, object, why, NULL);
	check_allocated(c, s);
}

bool uslub_debug_is_free(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->state, sizeof(m->state));
	uint64_t st = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
	mem_close(&m->state, sizeof(m->state));
	return st == ((uintptr_t)object ^ STATE_FREE);
}

static void set_track(struct dbg_track *t, void *caller)
{
	t->addr = (uintptr_t)caller;
	t->tid = (uint32_t)gettid();
	int cpu = sched_getcpu();
	t->cpu = cpu < 0 ? 0 : (uint32_t)cpu;
}

static void trace(const struct uslub_cache *c, struct page_desc *s, const char *op, void *object,
		  void *caller)
{
	uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
	uslub_message("uslub: TRACE %s %s 0x%lx slab=0x%lx inuse=%u caller=0x%lx\n", c->name, op,
		      (unsigned long)(uintptr_t)object, (unsigned long)(uintptr_t)page_address(s),
		      w_inuse(w), (unsigned long)(uintptr_t)caller);
}

void uslub_debug_alloc(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
		       void *caller)
{
	cur_op = "malloc";
	cur_caller = caller;
	if (c->debug & DBG_CHECK)
		check_slab(c, s, object);
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(m, sizeof(*m));
	uint64_t old =
	    __atomic_exchange_n(&m->state, (uintptr_t)object ^ STATE_ALLOC, __ATOMIC_RELAXED);
	if (old != ((uintptr_t)object ^ STATE_FREE))
		uslub_debug_report(c, s, object,
				   old == ((uintptr_t)object ^ STATE_ALLOC)
				       ? "Freelist corrupted: object already allocated"
				       : "Object metadata overwritten",
				   &m->state);
	mem_close(m, sizeof(*m));
	if (c->debug & DBG_POISON)
		check_poison(c, s, object);
	if (c->debug & DBG_REDZONE) {
		check_redzones(c, s, object, c->size, RED_INACTIVE, REQ_UNKNOWN);
		fill_redzones(c, object, size, RED_ACTIVE);
	}
	/* Over the free pointer, which the pop that handed the object out has read. */
	set_orig_size(c, object, size);
	/* After the checks, so a report shows the sites of the object's last life. */
	if (c->debug & DBG_TRACK) {
		mem_open(m, sizeof(*m));
		set_track(&m->track[TRACK_ALLOC], caller);
		mem_close(m, sizeof(*m));
	}
	cur_op = NULL;
	if (c->debug & DBG_TRACE)
		trace(c, s, "alloc", object, caller);
	asan_unpoison(object, size);
	vg_malloclike(object, size, DBG_RZ);
}

void uslub_debug_free(struct uslub_cache *c, struct page_desc *s, void *object, void *caller)
{
	cur_op = "free";
	cur_caller = caller;
	/* memcheck first: a free of what it does not know as a block (a double free) is
	 * reported with both stacks, before our own report stops the program. */
	vg_freelike(object, DBG_RZ);
	if (c->debug & DBG_CHECK)
		check_slab(c, s, object);
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(m, sizeof(*m));
	/* Read before the state says "free": from then on the word may become a link. */
	size_t req = __atomic_load_n(&m->orig_size, __ATOMIC_RELAXED);
	/* One exchange, so of two threads freeing the same object one sees the other. */
	uint64_t old =
	    __atomic_exchange_n(&m->state, (uintptr_t)object ^ STATE_FREE, __ATOMIC_RELAXED);
	if (old != ((uintptr_t)object ^ STATE_ALLOC))
		uslub_debug_report(c, s, object,
				   old == ((uintptr_t)object ^ STATE_FREE)
				       ? "double free"
				       : "Object metadata overwritten",
				   old == ((uintptr_t)object ^ STATE_FREE) ? NULL : &m->state);
	mem_close(m, sizeof(*m));
	if (req > c->size)
		report_object(c, s, object, "Object metadata overwritten", &m->orig_size,
			      REQ_UNKNOWN);
	if (c->debug & DBG_REDZONE) {
		check_redzones(c, s, object, req, RED_ACTIVE, req);
		fill_redzones(c, object, c->size, RED_INACTIVE);
	}
	if (c->debug & DBG_TRACK) {
		mem_open(m, sizeof(*m));
		set_track(&m->track[TRACK_FREE], caller);
		mem_close(m, sizeof(*m));
	}
	cur_op = NULL;
	if (c->debug & DBG_TRACE)
		trace(c, s, "free", object, caller);
	if (c->debug & DBG_POISON) {
		mem_open(object, c->size);
		fill_poison(c, object);
	}
	mem_close(object, c->size);
}

void uslub_debug_resize(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			const char *op)
{
	cur_op = op;
	cur_caller = NULL;
	size_t old = get_orig_size(c, object);
	if (old > c->size)
		report_object(c, s, object, "Object metadata overwritten",
			      &dbg_meta_of(c, object)->orig_size, REQ_UNKNOWN);
	if (c->debug & DBG_REDZONE)
		check_redzones(c, s, object, old, RED_ACTIVE, old);
	set_orig_size(c, object, size);
	if (c->debug & DBG_REDZONE)
		fill_redzones(c, object, size, RED_ACTIVE);
	cur_op = NULL;
	vg_resize(object, old, size);
	asan_poison(object, c->size);
	asan_unpoison(object, size);
}

size_t uslub_debug_usable(struct uslub_cache *c, void *object, const char *op)
{
	if (uslub_debug_is_free(c, object))
		uslub_report_bad_free(op[0] == 'r' ? "double free" : "pointer to a free object", op,
				      object, c); /* realloc frees what it is given */
	if (!(c->debug & DBG_SLACK))
		return c->size;
	/* Bounded: realloc copies this many bytes. */
	size_t size = get_orig_size(c, object);
	return size <= c->size ? size : c->size;
}

/* ---- reports ------------------------------------------------------------------------ */

static uintptr_t parse_hex(const char **p, const char *end)
{
	uintptr_t v = 0;
	for (; *p < end; (*p)++) {
		char ch = **p;
		unsigned d;
		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a' + 10);
		else
			break;
		v = v * 16 + d;
	}
	return v;
}

/* One line of /proc/self/maps: "start-end perms offset dev inode   path". */
static int maps_line(struct uslub_out *o, const char *line, const char *end, uintptr_t addr)
{
	const char *p = line;
	uintptr_t start = parse_hex(&p, end);
	if (p >= end || *p != '-')
		return 0;
	p++;
	uintptr_t stop = parse_hex(&p, end);
	if (addr < start || addr >= stop)
		return 0;
	while (p < end && *p == ' ')
		p++;
	while (p < end && *p != ' ')
		p++; /* perms */
	while (p < end && *p == ' ')
		p++;
	uintptr_t off = parse_hex(&p, end);
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
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[4096];
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - len);
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
	close(fd);
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
	if (!cur_op)
		return;
	uslub_printf(o, "INFO: Found in %s()", cur_op);
	if (cur_caller) {
		uslub_printf(o, " called from ");
		uslub_debug_print_addr(o, (uintptr_t)cur_caller);
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
	report_object(c, s, object, what, fault, REQ_UNKNOWN);
}

__attribute__((noreturn)) static void report_object(const struct uslub_cache *c,
						    struct page_desc *s, void *object,
						    const char *what, const void *fault, size_t req)
{
	struct uslub_out o;
	uslub_out_init(&o, 2);
	const unsigned char *obj = object;
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
	hex_dump(&o, "Redzone", obj - DBG_RZ, DBG_RZ);
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
	hex_dump(&o, "Redzone", obj + c->size, DBG_RZ);
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_out_flush(&o);
	abort();
}

/* ---- large and huge blocks --------------------------------------------------------- */

/* A block's red zone is the rest of its span: no metadata, no tracks, so the report has
 * the block, the first bad byte, and the bytes on either side of the request's end. */
__attribute__((noreturn)) static void report_block(void *p, size_t size, size_t span,
						   const unsigned char *fault)
{
	struct uslub_out o;
	uslub_out_init(&o, 2);
	const unsigned char *b = p;
	const char *kind = region_of(p) ? "large block" : "huge block";
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_printf(&o, "BUG %s (uslub): Redzone overwritten\n", kind);
	uslub_printf(&o, "--------------------------------------------------------------"
			 "---------------\n");
	mem_open((void *)fault, 1);
	uslub_printf(&o,
		     "INFO: 0x%lx @offset=%zu in the block (requested %zu of %zu). First byte "
		     "0x%02x\n",
		     (unsigned long)(uintptr_t)fault, (size_t)(fault - b), size, span, *fault);
	uslub_printf(&o, "INFO: Block 0x%lx size=%zu requested=%zu\n", (unsigned long)(uintptr_t)b,
		     span, size);
	print_site(&o);
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
	uslub_printf(&o, "=============================================================="
			 "===============\n");
	uslub_out_flush(&o);
	abort();
}

/* With Z the tail is filled before memcheck and ASan are told: their marks then hold. */
void uslub_debug_block_alloc(void *p, size_t size, size_t span, bool zeroed)
{
	char *b = p;
	if (uslub_block_debug & DBG_REDZONE) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if (uslub_block_debug & DBG_VALGRIND) {
		if (zeroed)
			vg_malloclike_zeroed(p, size);
		else
			vg_malloclike(p, size, 0);
		vg_noaccess(b + size, span - size);
	}
	asan_unpoison(p, size);
	asan_poison(b + size, span - size);
}

void uslub_debug_block_check(void *p, size_t size, size_t span, const char *op)
{
	if (!(uslub_block_debug & DBG_REDZONE) || size == span)
		return;
	char *b = p;
	mem_open(b + size, span - size);
	const unsigned char *bad = first_not(b + size, span - size, RED_ACTIVE);
	if (bad) {
		cur_op = op;
		cur_caller = NULL;
		report_block(p, size, span, bad);
	}
	mem_close(b + size, span - size);
}

void uslub_debug_block_free(void *p, size_t size, size_t span)
{
	uslub_debug_block_check(p, size, span, "free");
	/* memcheck keeps it inaccessible until the page allocator hands its pages out
	 * again; ASan's marks go, as the pages may be anything next. */
	if (uslub_block_debug & DBG_VALGRIND)
		vg_freelike(p, 0);
	asan_unpoison(p, span);
}

void uslub_debug_block_resize(void *p, void *q, size_t old, size_t old_span, size_t size,
			      size_t span)
{
	char *b = q;
	if (uslub_block_debug & DBG_REDZONE) {
		mem_open(b + size, span - size);
		memset(b + size, RED_ACTIVE, span - size);
	}
	if ((uslub_block_debug & DBG_VALGRIND) && q == p) {
		vg_resize(p, old, size);
	} else if (uslub_block_debug & DBG_VALGRIND) {
		/* mremap carried the bytes' definedness over; a new block record marks them
		 * undefined, so the kept part is declared defined (an approximation:
		 * uninitialised bytes moved with a huge block are no longer reported). */
		vg_freelike(p, 0);
		vg_malloclike(q, size, 0);
		vg_defined(q, old < size ? old : size);
	}
	if (uslub_block_debug & DBG_VALGRIND)
		vg_noaccess(b + size, span - size);
	/* Pages the block no longer covers leave without ASan's marks (a range mremap left
	 * may be mapped again by anyone). */
	if (q != p)
		asan_unpoison(p, old_span);
	else if (old_span > span)
		asan_unpoison(b + span, old_span - span);
	asan_unpoison(q, size);
	asan_poison(b + size, span - size);
}
