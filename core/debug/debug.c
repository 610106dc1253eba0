/* Debug caches (see debug.h for the slot layout): USLUB_DEBUG's slub_debug letters, the
 * hardened freelist, the objects' states, red zones and poison, and the valgrind and ASan
 * hooks. Everything here runs on the slow path of a debug cache only; nothing allocates.
 * The reports are in report.c, large and huge blocks in block.c. */
#include "debug/debug.h"
#include "debug/report.h"

#include "thread/thread.h"
#include "os/options.h"
#include "os/os.h"
#include "os/print.h"
#include "slab/slab.h"
#include "os/vg.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The state word tells an allocated object from a free one, and both from bytes that are
 * no state at all (libumem's XOR-encoded buffer control): XOR with the object's address
 * so a state copied from another object does not pass. */
#define STATE_ALLOC DBG_STATE_ALLOC
#define STATE_FREE  DBG_STATE_FREE

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
	       (letters & USLUB_DEBUG_T ? DBG_TRACE : 0) |
	       /* A held object is poisoned, and its poison checked as it leaves. */
	       (letters & USLUB_DEBUG_Q ? DBG_QUARANTINE | DBG_POISON : 0) |
	       (letters & USLUB_DEBUG_B ? DBG_BOUNDS : 0);
}

/* A debug cache's slots: pad (red zones and metadata) in front of each object, a
 * multiple of the alignment the class promises, so objects keep it. */
static void debug_layout(struct uslub_cache *c)
{
	uint32_t align = c->size & -c->size;
	if (align > USLUB_PAGE_SIZE)
		align = USLUB_PAGE_SIZE;
	uint32_t pad = (2 * DBG_RZ + DBG_META_SIZE + align - 1) & ~(align - 1);
	c->offset = pad;
	c->stride = pad + c->size;
	c->tail = DBG_RZ;
}

bool uslub_debug_any;
bool uslub_debug_every_cache;
/* What every cache gets (the checkers, USLUB_HARDEN=full), set by uslub_debug_init. */
static unsigned debug_all;

unsigned uslub_debug_cache_flags(const char *name, unsigned letters, bool typed)
{
	unsigned flags = letter_flags(uslub_config.debug_letters);
	const char *list = uslub_config.debug_caches;
	unsigned f = debug_all | letter_flags(letters);
	if (flags && (!list || names_cache(list, name)))
		f |= flags;
	/* An object that keeps its state while free (a constructor's, or RCU readers') is
	 * not poisoned nor hidden from ASan, as the kernel and KASAN (memcheck: dbg_vg_alloc). */
	if (typed)
		f &= ~(unsigned)(DBG_POISON | DBG_QUARANTINE | DBG_ASAN);
	return f;
}

void uslub_debug_cache_layout(struct uslub_cache *c)
{
	c->secret = uslub_random() | 1;
	if (c->debug)
		debug_layout(c);
}
unsigned uslub_debug_rz = 64;

void uslub_debug_init(void)
{
	uint64_t seed = uslub_random_seed();
	uslub_random_init(&seed);
	unsigned flags = letter_flags(uslub_config.debug_letters);
	const char *list = uslub_config.debug_caches;
	uslub_debug_rz = (uslub_config.redzone + 15) & ~15u;
	uslub_debug_any = flags != 0;
	uslub_debug_bounds = (flags & DBG_BOUNDS) != 0;
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
	/* Blocks of no cache: letters for every cache reach them, Z and P pad (large.c). */
	unsigned block = list ? 0 : flags & (DBG_REDZONE | DBG_POISON | DBG_QUARANTINE);
	uslub_block_debug = (all & (DBG_VALGRIND | DBG_ASAN)) | block;
	if (block && !(all & (DBG_VALGRIND | DBG_ASAN)))
		uslub_block_pad = uslub_debug_rz;
	debug_all = all;
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		c->secret = uslub_splitmix64(&seed) | 1;
		c->debug = all;
		if (flags && (!list || names_cache(list, c->name)))
			c->debug |= flags;
		if (c->debug)
			debug_layout(c);
		if ((c->debug & (DBG_REDZONE | DBG_POISON)) && !(all & (DBG_VALGRIND | DBG_ASAN)))
			uslub_debug_sweep_wanted = true;
	}
	if (list) {
		/* A name that matches no cache is most likely a typo: say so. */
		for (const char *p = list; *p;) {
			const char *comma = strchr(p, ',');
			size_t len = comma ? (size_t)(comma - p) : strlen(p);
			/* An object cache's name may come later (uslub_cache_create). */
			int found = strncmp(p, "kmalloc-", 8) != 0;
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

/* The object's sequence count (dbg_meta.seq): odd from seq_begin to seq_end. */
static void seq_begin(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->seq, sizeof(m->seq));
	__atomic_store_n(&m->seq, __atomic_load_n(&m->seq, __ATOMIC_RELAXED) | 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
	mem_close(&m->seq, sizeof(m->seq));
}

static void seq_end(const struct uslub_cache *c, void *object)
{
	struct dbg_meta *m = dbg_meta_of(c, object);
	mem_open(&m->seq, sizeof(m->seq));
	__atomic_store_n(&m->seq, __atomic_load_n(&m->seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
	mem_close(&m->seq, sizeof(m->seq));
}

/* The red zones of an object holding `size` bytes: W bytes before it, and from `size` to
 * the end of its slot (the kmalloc red zone up to the class size, then W bytes). A free
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
	/* Odd first: a sweep may look at the slab as soon as its descriptor is set. */
	__atomic_store_n(&m->seq, 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
	m->link = 0;
	memset(m->track, 0, sizeof(m->track));
	m->kind = KIND_MALLOC;
	m->state = (uintptr_t)object ^ STATE_FREE;
	if (c->debug & DBG_REDZONE)
		fill_redzones(c, object, c->size, RED_INACTIVE);
	if (c->debug & DBG_POISON)
		fill_poison(c, object);
	__atomic_store_n(&m->seq, 2, __ATOMIC_RELEASE);
}

static size_t slab_bytes(const struct page_desc *s)
{
	return USLUB_PAGE_SIZE << s->order;
}

void uslub_debug_slab_ready(const struct uslub_cache *c, struct page_desc *s)
{
	(void)c;
	uslub_debug_sweep_ready(s);
	mem_close(page_address(s), slab_bytes(s));
}

void uslub_debug_slab_discard(const struct uslub_cache *c, struct page_desc *s)
{
	(void)c;
	mem_release(page_address(s), slab_bytes(s));
	uslub_debug_sweep_gone(s);
}

/* The first byte of the red zones around an object holding `size` bytes (see
 * fill_redzones) that is not `val`, or NULL. */
const unsigned char *uslub_debug_bad_redzone(const struct uslub_cache *c, void *object, size_t size,
					     int val)
{
	char *o = object;
	size_t right = c->size - size + DBG_RZ;
	mem_open(o - DBG_RZ, DBG_RZ);
	mem_open(o + size, right);
	const unsigned char *bad = uslub_debug_first_not(o - DBG_RZ, DBG_RZ, val);
	if (!bad)
		bad = uslub_debug_first_not(o + size, right, val);
	mem_close(o - DBG_RZ, DBG_RZ);
	mem_close(o + size, right);
	return bad;
}

/* `req`: the object's request for the report, or REQ_UNKNOWN. */
static void check_redzones(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			   int val, size_t req)
{
	const unsigned char *bad = uslub_debug_bad_redzone(c, object, size, val);
	if (bad)
		uslub_debug_report_object(c, s, object, "Redzone overwritten", bad, req);
}

const unsigned char *uslub_debug_bad_poison(const struct uslub_cache *c, void *object)
{
	mem_open(object, c->size);
	const unsigned char *bad = uslub_debug_first_not(object, c->size - 1, POISON_FREE);
	if (!bad && ((unsigned char *)object)[c->size - 1] != POISON_END)
		bad = (unsigned char *)object + c->size - 1;
	mem_close(object, c->size);
	return bad;
}

static void check_poison(struct uslub_cache *c, struct page_desc *s, void *object)
{
	const unsigned char *bad = uslub_debug_bad_poison(c, object);
	if (bad)
		uslub_debug_report(c, s, object, "Poison overwritten", bad);
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
	/* By the build and the run: a typed cache's metadata is closed whatever its flags. */
	if (!(c->debug & DBG_REDZONE) || USLUB_ASAN || uslub_memcheck ||
	    __atomic_load_n(&s->owner, __ATOMIC_RELAXED) != uslub_tls_thread)
		return;
	char *first = (char *)page_address(s) + c->offset;
	for (unsigned i = 0; i < s->objects; i++) {
		char *o = first + (size_t)i * c->stride;
		struct dbg_meta *m = dbg_meta_of(c, o);
		uint64_t alloc = (uintptr_t)o ^ STATE_ALLOC;
		if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) != alloc)
			continue;
		/* orig_size shares its word with the free pointer, closed to the checkers. */
		mem_open(&m->orig_size, sizeof(m->orig_size));
		uint64_t req = __atomic_load_n(&m->orig_size, __ATOMIC_ACQUIRE);
		mem_close(&m->orig_size, sizeof(m->orig_size));
		const unsigned char *bad = req <= c->size
					       ? uslub_debug_bad_redzone(c, o, req, RED_ACTIVE)
					       : (const unsigned char *)&m->orig_size;
		atomic_thread_fence(memory_order_acquire);
		if (!bad || __atomic_load_n(&m->state, __ATOMIC_RELAXED) != alloc ||
		    get_orig_size(c, o) != req)
			continue;
		if (req > c->size)
			uslub_debug_report_object(c, s, o, "Object metadata overwritten", bad,
						  REQ_UNKNOWN);
		uslub_debug_report_object(c, s, o, "Redzone overwritten", bad, req);
	}
}

/* The slab_is_valid() walker of USLUB_DEBUG=F (check_slab below) and the tests. */

/* Objects on a free list of s, or -1 (with *why) when a link is not a free object of s
 * or the list is longer than the slab. */
static long free_list_length(struct uslub_cache *c, struct page_desc *s, void *head,
			     const char **why)
{
	long n = 0;
	for (void *p = head; p; p = get_next(c, p)) {
		if (uslub_slab_object_start(s, p) != p) {
			*why = "Freelist pointer outside the slab";
			return -1;
		}
		if (c->debug && !uslub_debug_is_free(c, p)) {
			*why = "Freelist holds an allocated object";
			return -1;
		}
		if (++n > s->objects) {
			*why = "Freelist cycle";
			return -1;
		}
	}
	return n;
}

bool uslub_slab_is_valid(struct page_desc *s, const char **why)
{
	if (s->kind != PAGE_SLAB || s->head != s || s->cls >= USLUB_NR_CACHES) {
		*why = "Slab descriptor corrupted";
		return false;
	}
	struct uslub_cache *c = &uslub_caches[s->cls];
	/* Objects are carved a step at a time (slab.c, section 9); a debug cache's at once. */
	unsigned capacity = uslub_slab_capacity(c, s);
	if (!s->objects || s->objects > capacity || (c->debug && s->objects != capacity)) {
		*why = "Slab object count wrong";
		return false;
	}
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
	if (w_inuse(w) > s->objects) {
		*why = "Slab inuse above its objects";
		return false;
	}
	/* Only the owner may walk the lists: anyone else's walk races with the owner
	 * taking and handing out their objects. */
	if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) != uslub_tls_thread)
		return true;
	long remote = free_list_length(c, s, decode(w_head(w), page_address(s)), why);
	if (remote < 0)
		return false;
	long local = free_list_length(c, s, s->local_free, why);
	if (local < 0)
		return false;
	if (local != s->local_count) {
		*why = "Local freelist count wrong";
		return false;
	}
	/* The word counts the remote list's objects as free, the local list's as held. */
	if (remote != (long)(s->objects - w_inuse(w))) {
		*why = "Slab inuse does not match its remote freelist";
		return false;
	}
	if (local > (long)w_inuse(w)) {
		*why = "Local freelist longer than the slab's inuse";
		return false;
	}
	return true;
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
	uslub_debug_op = "malloc";
	uslub_debug_caller = caller;
	if (c->debug & DBG_CHECK)
		check_slab(c, s, object);
	struct dbg_meta *m = dbg_meta_of(c, object);
	seq_begin(c, object);
	mem_open(m, sizeof(*m));
	m->kind = KIND_MALLOC;
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
	seq_end(c, object);
	uslub_debug_op = NULL;
	if (c->debug & DBG_TRACE)
		trace(c, s, "alloc", object, caller);
	asan_unpoison(object, size);
	dbg_vg_alloc(c, object, size);
}

bool uslub_debug_free(struct uslub_cache *c, struct page_desc *s, void *object, void *caller)
{
	uslub_debug_op = "free";
	uslub_debug_caller = caller;
	/* memcheck first: a free of what it does not know as a block (a double free) is
	 * reported with both stacks, before our own report stops the program. */
	dbg_vg_free(c, object);
	if (c->debug & DBG_CHECK)
		check_slab(c, s, object);
	struct dbg_meta *m = dbg_meta_of(c, object);
	seq_begin(c, object);
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
	/* operator delete and delete[] checked theirs and left KIND_MALLOC (sized.c). */
	if (m->kind != KIND_MALLOC)
		uslub_debug_report_object(c, s, object,
					  m->kind == KIND_NEW
					      ? "alloc-dealloc-mismatch (operator new vs free)"
					      : "alloc-dealloc-mismatch (operator new [] vs free)",
					  NULL, req);
	mem_close(m, sizeof(*m));
	if (req > c->size)
		uslub_debug_report_object(c, s, object, "Object metadata overwritten",
					  &m->orig_size, REQ_UNKNOWN);
	if (c->debug & DBG_REDZONE) {
		check_redzones(c, s, object, req, RED_ACTIVE, req);
		fill_redzones(c, object, c->size, RED_INACTIVE);
	}
	if (c->debug & DBG_TRACK) {
		mem_open(m, sizeof(*m));
		set_track(&m->track[TRACK_FREE], caller);
		mem_close(m, sizeof(*m));
	}
	uslub_debug_op = NULL;
	if (c->debug & DBG_TRACE)
		trace(c, s, "free", object, caller);
	if (c->debug & DBG_POISON) {
		mem_open(object, c->size);
		fill_poison(c, object);
	}
	dbg_close_freed(c, object);
	seq_end(c, object);
	return (c->debug & DBG_QUARANTINE) && uslub_quarantine_put(c, s, object);
}

void uslub_debug_resize(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			const char *op)
{
	uslub_debug_op = op;
	uslub_debug_caller = NULL;
	seq_begin(c, object);
	size_t old = get_orig_size(c, object);
	if (old > c->size)
		uslub_debug_report_object(c, s, object, "Object metadata overwritten",
					  &dbg_meta_of(c, object)->orig_size, REQ_UNKNOWN);
	if (c->debug & DBG_REDZONE)
		check_redzones(c, s, object, old, RED_ACTIVE, old);
	set_orig_size(c, object, size);
	if (c->debug & DBG_REDZONE)
		fill_redzones(c, object, size, RED_ACTIVE);
	seq_end(c, object);
	uslub_debug_op = NULL;
	vg_resize(object, old, size);
	asan_poison(object, c->size);
	asan_unpoison(object, size);
}

size_t uslub_debug_usable(struct uslub_cache *c, struct page_desc *s, void *object, const char *op)
{
	if (uslub_debug_is_free(c, object))
		uslub_report_bad_free(op[0] == 'r' ? "double free" : "pointer to a free object", op,
				      object, c, s); /* realloc frees what it is given */
	if (!(c->debug & DBG_SLACK))
		return c->size;
	/* Bounded: realloc copies this many bytes. */
	size_t size = get_orig_size(c, object);
	return size <= c->size ? size : c->size;
}
