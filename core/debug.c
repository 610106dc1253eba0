/* Debug caches (see debug.h for the slot layout): USLUB_DEBUG's slub_debug letters, the
 * hardened freelist, and the valgrind and ASan hooks. Everything here runs on the slow
 * path of a debug cache only; nothing allocates, and reports go through print.c. */
#include "debug.h"

#include "options.h"
#include "print.h"
#include "slab.h"
#include "vg.h"

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

#define DBG_ALL_LETTERS (DBG_CHECK | DBG_REDZONE | DBG_POISON | DBG_TRACK)

/* The operation a report was found in, and the program's call site, for its last line.
 * Set just before the checks of one operation; a report ends the process, so a thread
 * that overwrites another's is harmless. */
static __thread const char *cur_op;
static __thread void *cur_caller;

/* ---- start-up ---------------------------------------------------------------------- */

static unsigned letter_flag(char l)
{
	switch (l) {
	case 'F':
	case 'f':
		return DBG_CHECK;
	case 'Z':
	case 'z':
		return DBG_REDZONE;
	case 'P':
	case 'p':
		return DBG_POISON;
	case 'U':
	case 'u':
		return DBG_TRACK;
	case 'T':
	case 't':
		return DBG_TRACE;
	default:
		return 0;
	}
}

/* Does the cache list `list` (comma-separated, up to `end`) name `name`? */
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

/* USLUB_DEBUG as slub_debug reads it: "1" (or empty letters) means F, Z, P and U; letters
 * apply to every cache unless a comma-separated cache list follows them. */
static void parse_debug(const char *spec, unsigned *flags, const char **list)
{
	*flags = 0;
	*list = NULL;
	if (!spec[0] || strcmp(spec, "0") == 0)
		return;
	if (strcmp(spec, "1") == 0) {
		*flags = DBG_ALL_LETTERS;
		return;
	}
	const char *p = spec;
	for (; *p && *p != ','; p++) {
		unsigned f = letter_flag(*p);
		if (!f) {
			uslub_message("uslub: USLUB_DEBUG=%s: '%c' is not one of F Z P U T; "
				      "ignored\n",
				      spec, *p);
			continue;
		}
		*flags |= f;
	}
	if (p == spec)
		*flags = DBG_ALL_LETTERS;
	if (*p == ',' && p[1])
		*list = p + 1;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The kernel's 16 random bytes for this process (AT_RANDOM), read without allocating. */
static uint64_t random_seed(void)
{
	uint64_t seed = (uintptr_t)&seed, r[2];
	const void *bytes = (const void *)getauxval(AT_RANDOM);
	if (bytes) {
		memcpy(r, bytes, sizeof(r)); /* not necessarily aligned */
		seed ^= r[0] ^ (r[1] << 1);
	}
	return seed;
}

static _Atomic uint64_t slab_seed_state;

uint64_t uslub_debug_random(void)
{
	uint64_t x = atomic_fetch_add_explicit(&slab_seed_state, 0x9e3779b97f4a7c15ULL,
					       memory_order_relaxed);
	return splitmix64(&x);
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
	uint64_t seed = random_seed();
	atomic_store_explicit(&slab_seed_state, splitmix64(&seed), memory_order_relaxed);
	parse_debug(uslub_config.debug, &flags, &list);
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
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		c->secret = splitmix64(&seed) | 1;
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

static void fill_redzones(const struct uslub_cache *c, void *object, int val)
{
	char *o = object;
	mem_open(o - DBG_RZ, DBG_RZ);
	mem_open(o + c->size, DBG_RZ);
	memset(o - DBG_RZ, val, DBG_RZ);
	memset(o + c->size, val, DBG_RZ);
	mem_close(o - DBG_RZ, DBG_RZ);
	mem_close(o + c->size, DBG_RZ);
}

void uslub_debug_init_object(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	memset(m, 0, sizeof(*m));
	m->state = (uintptr_t)object ^ STATE_FREE;
	if (c->debug & DBG_REDZONE)
		fill_redzones(c, object, RED_INACTIVE);
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

static void check_redzones(struct uslub_cache *c, struct page_desc *s, void *object, int val)
{
	char *o = object;
	mem_open(o - DBG_RZ, DBG_RZ);
	mem_open(o + c->size, DBG_RZ);
	const unsigned char *bad = first_not(o - DBG_RZ, DBG_RZ, val);
	if (!bad)
		bad = first_not(o + c->size, DBG_RZ, val);
	if (bad)
		uslub_debug_report(c, s, object, "Redzone overwritten", bad);
	mem_close(o - DBG_RZ, DBG_RZ);
	mem_close(o + c->size, DBG_RZ);
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

static void check_slab(struct uslub_cache *c, struct page_desc *s, void *object)
{
	const char *why = NULL;
	if (!uslub_slab_is_valid(s, &why))
		uslub_debug_report(c, s, object, why, NULL);
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

void uslub_debug_alloc(struct uslub_cache *c, struct page_desc *s, void *object, void *caller)
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
		check_redzones(c, s, object, RED_INACTIVE);
		fill_redzones(c, object, RED_ACTIVE);
	}
	/* After the checks, so a report shows the sites of the object's last life. */
	if (c->debug & DBG_TRACK) {
		mem_open(m, sizeof(*m));
		set_track(&m->track[TRACK_ALLOC], caller);
		mem_close(m, sizeof(*m));
	}
	cur_op = NULL;
	if (c->debug & DBG_TRACE)
		trace(c, s, "alloc", object, caller);
	asan_unpoison(object, c->size);
	vg_malloclike(object, c->size, DBG_RZ);
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
	if (c->debug & DBG_REDZONE) {
		check_redzones(c, s, object, RED_ACTIVE);
		fill_redzones(c, object, RED_INACTIVE);
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
		uslub_printf(&o, "INFO: 0x%lx @offset=%ld in the object. First byte 0x%02x\n",
			     (unsigned long)(uintptr_t)f, (long)(f - obj), *f);
	}
	uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
	uslub_printf(&o, "INFO: Slab 0x%lx objects=%u used=%u order=%u frozen=%u\n",
		     (unsigned long)(uintptr_t)page_address(s), s->objects, w_inuse(w), s->order,
		     (w & W_FROZEN) ? 1 : 0);
	uslub_printf(&o, "INFO: Object 0x%lx size=%u\n", (unsigned long)(uintptr_t)obj, c->size);
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(m, sizeof(*m));
	if (c->debug & DBG_TRACK) {
		print_track(&o, "Allocated", &m->track[TRACK_ALLOC]);
		print_track(&o, "Freed", &m->track[TRACK_FREE]);
	}
	if (cur_op) {
		uslub_printf(&o, "INFO: Found in %s() called from ", cur_op);
		uslub_debug_print_addr(&o, (uintptr_t)cur_caller);
		uslub_printf(&o, "\n");
	}
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
