/* Large and huge blocks.
 *
 * Large (8 KiB < size <= 4 MiB): pages straight from the page allocator. The block is
 * taken at the power-of-two order that fits and its unused tail pages go back at once
 * (the kernel's alloc_pages_exact), so a 20 KiB request holds 5 pages, not 8. realloc
 * grows a large block in place when the pages after it are free, and shrinks it in place.
 *
 * Huge (> 4 MiB): a mapping of its own, aligned to 2 MiB so transparent huge pages can
 * back it, and moved with mremap when it grows. It is accounted (no MAP_NORESERVE), so the
 * kernel's overcommit heuristic refuses a size no machine could back - malloc(1UL << 46)
 * fails with ENOMEM, as under glibc - instead of handing out a promise that ends in the
 * OOM killer. When RLIMIT_AS refuses the mapping, free region memory is unmapped and the
 * mapping tried once more (page_alloc.c, section 2). A small open-addressing table,
 * itself mapped from the OS, records each one so free can tell a huge block from a
 * foreign pointer. */
#include "internal.h"
#include "options.h"
#include "os.h"
#include "vg.h"

#include <errno.h>
#include <string.h>

_Atomic uint64_t uslub_large_bytes;
_Atomic uint64_t uslub_huge_bytes;
_Atomic uint64_t uslub_peak_in_use;

#define HUGE_ALIGN (2UL << 20)

static size_t pages_for(size_t size)
{
	return (size + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT;
}

static void mark_large(struct page_desc *d, size_t npages, size_t from)
{
	for (size_t i = from; i < npages; i++)
		d[i].head = d;
}

void *uslub_large_alloc(size_t size, size_t align, bool zero)
{
	size_t npages = pages_for(size);
	unsigned order = uslub_get_order(size);
	unsigned align_order = align > USLUB_PAGE_SIZE ? uslub_get_order(align) : 0;
	if (align_order > order)
		order = align_order;
	if (order > USLUB_MAX_ORDER)
		return uslub_huge_alloc(size, align);

	struct uslub_thread *t = uslub_tls_thread;
	if (npages <= LCACHE_PAGES && align_order == 0 && t->state == THREAD_LIVE &&
	    t->lcache_count[npages]) {
		struct page_desc *d = t->lcache[npages][--t->lcache_count[npages]];
		d->flags = 0;
		atomic_fetch_add(&uslub_large_bytes, npages << USLUB_PAGE_SHIFT);
		void *p = page_address(d);
		if (uslub_memcheck)
			vg_malloclike(p, npages << USLUB_PAGE_SHIFT, 0);
		if (zero)
			memset(p, 0, size);
		return p;
	}
	/* What the zone has first, in one block or in neighbouring pieces; only then may the
	 * heap grow (or the slab zone lend a block). An aligned block must be one block. */
	struct page_desc *d =
	    align_order ? NULL : uslub_pages_alloc_run(LARGE_ZONE(t->node), npages);
	if (!d) {
		d = uslub_pages_alloc_exact(LARGE_ZONE(t->node), order, npages, align_order != 0);
		if (!d) {
			errno = ENOMEM;
			return NULL;
		}
	}
	bool cold = d->flags & PF_COLD;
	__atomic_store_n(&d->kind, PAGE_LARGE, __ATOMIC_RELAXED);
	d->objects = (uint16_t)npages;
	d->order = (uint8_t)order;
	d->owner = NULL;
	d->flags = 0;
	mark_large(d, npages, 1);
	__atomic_store_n(&d->head, d, __ATOMIC_RELEASE);
	atomic_fetch_add(&uslub_large_bytes, npages << USLUB_PAGE_SHIFT);
	uslub_note_in_use();
	void *p = page_address(d);
	/* memcheck sees the whole pages, as malloc_usable_size reports them. */
	if (uslub_memcheck && cold)
		vg_malloclike_zeroed(p, npages << USLUB_PAGE_SHIFT);
	else if (uslub_memcheck)
		vg_malloclike(p, npages << USLUB_PAGE_SHIFT, 0);
	if (zero && !cold)
		memset(p, 0, size);
	return p;
}

void uslub_large_free(struct page_desc *d, void *p)
{
	if (p != page_address(d))
		uslub_report_bad_free("invalid pointer", "free", p, NULL);
	if (d->flags & PF_CACHED)
		uslub_report_bad_free("double free", "free", p, NULL);
	size_t npages = d->objects;
	atomic_fetch_sub(&uslub_large_bytes, npages << USLUB_PAGE_SHIFT);
	if (uslub_memcheck)
		vg_freelike(p, 0); /* inaccessible until the page allocator hands it out again */
	struct uslub_thread *t = uslub_tls_thread;
	if (npages <= LCACHE_PAGES && t->state == THREAD_LIVE &&
	    t->lcache_count[npages] < LCACHE_DEPTH) {
		d->flags = PF_CACHED;
		t->lcache[npages][t->lcache_count[npages]++] = d;
		return;
	}
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	uslub_pages_free_range(d, npages);
}

void uslub_large_cache_drain(struct uslub_thread *t)
{
	for (unsigned n = 1; n <= LCACHE_PAGES; n++) {
		while (t->lcache_count[n]) {
			struct page_desc *d = t->lcache[n][--t->lcache_count[n]];
			d->flags = 0;
			__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
			uslub_pages_free_range(d, n);
		}
	}
}

size_t uslub_large_usable(struct page_desc *d)
{
	return (size_t)d->objects << USLUB_PAGE_SHIFT;
}

/* In place or NULL; the caller moves the block when this fails. */
void *uslub_large_realloc(struct page_desc *d, void *p, size_t size)
{
	size_t old = d->objects, npages = pages_for(size);
	if (npages == old)
		return p;
	if (npages < old) {
		if (uslub_memcheck)
			vg_resize(p, old << USLUB_PAGE_SHIFT, npages << USLUB_PAGE_SHIFT);
		uslub_pages_free_range(d + npages, old - npages);
		d->objects = (uint16_t)npages;
		atomic_fetch_sub(&uslub_large_bytes, (old - npages) << USLUB_PAGE_SHIFT);
		return p;
	}
	if (size > HUGE_THRESHOLD || uslub_pages_claim(d + old, npages - old) != 0)
		return NULL;
	mark_large(d, npages, old);
	if (uslub_memcheck)
		vg_resize(p, old << USLUB_PAGE_SHIFT, npages << USLUB_PAGE_SHIFT);
	d->objects = (uint16_t)npages;
	atomic_fetch_add(&uslub_large_bytes, (npages - old) << USLUB_PAGE_SHIFT);
	uslub_note_in_use();
	return p;
}

/* ---- huge ------------------------------------------------------------------------ */

/* A block's key is its page number plus 2 (mremap may move a block to any page): the
 * table then holds no pointer to the block, so memcheck's leak check still finds a huge
 * block the program lost ("definitely lost", not "still reachable"). */
struct huge_entry {
	uintptr_t key; /* 0: empty; 1: deleted */
	size_t len;
};

static uintptr_t huge_key(uintptr_t a)
{
	return (a >> USLUB_PAGE_SHIFT) + 2;
}

static pthread_mutex_t huge_lock = PTHREAD_MUTEX_INITIALIZER;
static struct huge_entry *huge_table;
static size_t huge_cap, huge_used, huge_tombs;

static size_t huge_hash(uintptr_t key, size_t cap)
{
	return (size_t)(key * 0x9E3779B97F4A7C15ULL) & (cap - 1);
}

static struct huge_entry *huge_find(uintptr_t a)
{
	if (!huge_cap || (a & (USLUB_PAGE_SIZE - 1)))
		return NULL;
	uintptr_t key = huge_key(a);
	for (size_t i = huge_hash(key, huge_cap);; i = (i + 1) & (huge_cap - 1)) {
		if (huge_table[i].key == key)
			return &huge_table[i];
		if (huge_table[i].key == 0)
			return NULL;
	}
}

/* Room for one more entry, growing the table if needed; -1 when the OS refuses. */
static int huge_reserve(void)
{
	if ((huge_used + huge_tombs + 1) * 2 > huge_cap) {
		size_t cap = huge_cap ? huge_cap * 2 : 512;
		if (huge_used * 4 < huge_cap)
			cap = huge_cap; /* mostly tombstones: rebuild at the same size */
		struct huge_entry *t = uslub_os_map(cap * sizeof(*t));
		if (!t)
			return -1;
		for (size_t i = 0; i < huge_cap; i++) {
			uintptr_t x = huge_table[i].key;
			if (x > 1) {
				size_t j = huge_hash(x, cap);
				while (t[j].key)
					j = (j + 1) & (cap - 1);
				t[j] = huge_table[i];
			}
		}
		if (huge_table)
			uslub_os_unmap(huge_table, huge_cap * sizeof(*t));
		huge_table = t;
		huge_cap = cap;
		huge_tombs = 0;
	}
	return 0;
}

static int huge_insert(uintptr_t a, size_t len)
{
	if (huge_reserve() != 0)
		return -1;
	size_t i = huge_hash(huge_key(a), huge_cap);
	while (huge_table[i].key > 1)
		i = (i + 1) & (huge_cap - 1);
	if (huge_table[i].key == 1)
		huge_tombs--;
	huge_table[i].key = huge_key(a);
	huge_table[i].len = len;
	huge_used++;
	return 0;
}

static void huge_erase(struct huge_entry *e)
{
	e->key = 1;
	huge_used--;
	huge_tombs++;
}

static bool over_limit(size_t len)
{
	uint64_t limit = uslub_config.mem_limit;
	return limit && atomic_load(&uslub_mapped_bytes) + len > limit;
}

void *uslub_huge_alloc(size_t size, size_t align)
{
	if (size > PTRDIFF_MAX - HUGE_ALIGN) {
		errno = ENOMEM;
		return NULL;
	}
	size_t len = (size + USLUB_PAGE_SIZE - 1) & ~(USLUB_PAGE_SIZE - 1);
	if (over_limit(len)) {
		errno = ENOMEM;
		return NULL;
	}
	size_t a = align > HUGE_ALIGN ? align : HUGE_ALIGN;
	void *p = uslub_os_map_aligned(len, a, align);
	if (!p && errno == ENOMEM && uslub_os_space_limited() && uslub_pages_unmap_free())
		p = uslub_os_map_aligned(len, a, align);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&huge_lock);
	int rc = huge_insert((uintptr_t)p, len);
	pthread_mutex_unlock(&huge_lock);
	if (rc) {
		uslub_os_unmap(p, len);
		errno = ENOMEM;
		return NULL;
	}
	atomic_fetch_add(&uslub_huge_bytes, len);
	atomic_fetch_add(&uslub_mapped_bytes, len);
	uslub_note_in_use();
	if (uslub_memcheck)
		vg_malloclike_zeroed(p, len); /* a fresh mapping */
	return p;
}

size_t uslub_huge_usable(const void *p)
{
	pthread_mutex_lock(&huge_lock);
	struct huge_entry *e = huge_find((uintptr_t)p);
	size_t len = e ? e->len : 0;
	pthread_mutex_unlock(&huge_lock);
	return len;
}

int uslub_huge_free(void *p)
{
	pthread_mutex_lock(&huge_lock);
	struct huge_entry *e = huge_find((uintptr_t)p);
	if (!e) {
		pthread_mutex_unlock(&huge_lock);
		return 0;
	}
	size_t len = e->len;
	huge_erase(e);
	pthread_mutex_unlock(&huge_lock);
	if (uslub_memcheck)
		vg_freelike(p, 0);
	uslub_os_unmap(p, len);
	atomic_fetch_sub(&uslub_huge_bytes, len);
	atomic_fetch_sub(&uslub_mapped_bytes, len);
	return 1;
}

/* Grow or shrink with mremap; NULL (errno ENOMEM) leaves the block as it was. With
 * `retry`, a growth refused under RLIMIT_AS is tried again once free region memory is
 * unmapped - outside huge_lock, which nests inside the zone locks (fork_prepare). */
static void *huge_realloc(void *p, size_t size, bool retry)
{
	if (size > PTRDIFF_MAX - HUGE_ALIGN) {
		errno = ENOMEM;
		return NULL;
	}
	size_t len = (size + USLUB_PAGE_SIZE - 1) & ~(USLUB_PAGE_SIZE - 1);
	pthread_mutex_lock(&huge_lock);
	struct huge_entry *e = huge_find((uintptr_t)p);
	size_t old = e->len;
	if (len == old) {
		pthread_mutex_unlock(&huge_lock);
		return p;
	}
	if (len > old && over_limit(len - old)) {
		pthread_mutex_unlock(&huge_lock);
		errno = ENOMEM;
		return NULL;
	}
	/* Make the table's room first: once the mapping has moved, the entry must fit. */
	if (huge_reserve() != 0) {
		pthread_mutex_unlock(&huge_lock);
		errno = ENOMEM;
		return NULL;
	}
	e = huge_find((uintptr_t)p); /* the table may have been rebuilt */
	void *q = uslub_os_remap(p, old, len);
	if (!q) {
		bool unmap = retry && len > old && errno == ENOMEM && uslub_os_space_limited();
		pthread_mutex_unlock(&huge_lock);
		if (unmap && uslub_pages_unmap_free())
			return huge_realloc(p, size, false);
		errno = ENOMEM;
		return NULL;
	}
	huge_erase(e);
	huge_insert((uintptr_t)q, len); /* cannot fail: room was made above */
	pthread_mutex_unlock(&huge_lock);
	if (uslub_memcheck && q == p) {
		vg_resize(p, old, len);
	} else if (uslub_memcheck) {
		/* mremap carried the bytes' definedness over; a new block record would mark
		 * them undefined, so the kept part is declared defined (an approximation:
		 * uninitialised bytes moved with a huge block are no longer reported). */
		vg_freelike(p, 0);
		vg_malloclike(q, len, 0);
		vg_defined(q, old < len ? old : len);
	}
	if (len > old) {
		atomic_fetch_add(&uslub_huge_bytes, len - old);
		atomic_fetch_add(&uslub_mapped_bytes, len - old);
	} else {
		atomic_fetch_sub(&uslub_huge_bytes, old - len);
		atomic_fetch_sub(&uslub_mapped_bytes, old - len);
	}
	uslub_note_in_use();
	return q;
}

void *uslub_huge_realloc(void *p, size_t size)
{
	return huge_realloc(p, size, true);
}

void uslub_huge_lock(void)
{
	pthread_mutex_lock(&huge_lock);
}

void uslub_huge_unlock(void)
{
	pthread_mutex_unlock(&huge_lock);
}

void uslub_huge_reinit_lock(void)
{
	pthread_mutex_init(&huge_lock, NULL);
}
