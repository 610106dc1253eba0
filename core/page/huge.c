/* Huge blocks (past HUGE_THRESHOLD, 32 MiB, or above 4 MiB aligned past a page): a
 * mapping of their own, 2 MiB-aligned for transparent huge pages, moved by mremap. It is
 * accounted (no MAP_NORESERVE), so the kernel's overcommit heuristic refuses a size no
 * machine could back - malloc(1UL << 46) fails with ENOMEM, as under glibc - instead of
 * handing out a promise that ends in the OOM killer. When RLIMIT_AS refuses the mapping,
 * free region memory is unmapped and the mapping tried once more (region.c, section 2).
 * A small open-addressing table, itself mapped from the OS, records each one so free can
 * tell a huge block from a foreign pointer.
 *
 * Freed huge mappings are kept a while for reuse (the huge cache): a program replacing
 * such buffers would fault every page of each new one in (tools/bench/results/). A request
 * takes the closest cached mapping that holds it - whole, or with its tail unmapped when
 * it is far too big - or grows the largest smaller one with mremap, so only the
 * difference is faulted in. Entries go back to the OS after HUGE_DECAY_MS unused, looked
 * at on the huge and large paths by the coarse clock, at once on malloc_trim, and before
 * a mapping or growth refused under RLIMIT_AS or USLUB_MEM_LIMIT is tried again. A cached
 * mapping is still memory taken from the OS (uslub_mapped_bytes) but no block: free and
 * realloc of it report a double free, as of an unmapped one.
 *
 * Each block keeps the size the program asked for, for the checkers (debug.h, "large and
 * huge blocks"); outside their runs no hook is called. With Z or P for every cache
 * (uslub_block_pad) the block is laid out as a guarded large block (slab/large.c): its
 * mapping starts with a page of red zone (the `lead`; the block begins one page in) and
 * holds at least uslub_block_pad bytes after the request, red zones that free, realloc
 * and the sweep check. A block aligned to more than a page has no page before it. The
 * table and the block's callers know the block's start; the cache and the OS calls, the
 * mapping's (start - lead). */
#include "page/page.h"

#include "hooks.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

_Atomic uint64_t uslub_huge_bytes;
_Atomic uint64_t uslub_huge_cached_bytes;
_Atomic uint64_t uslub_huge_expiry_ms;

#define HUGE_ALIGN (2UL << 20)

/* A block's key is its page number plus 2 (mremap may move a block to any page): the
 * table then holds no pointer to the block, so memcheck's leak check still finds a huge
 * block the program lost ("definitely lost", not "still reachable"). */
struct huge_entry {
	uintptr_t key; /* 0: empty; 1: deleted */
	size_t len;    /* the mapping's, lead included */
	size_t size;   /* asked for, for the checkers (debug.h) */
	uint32_t kind; /* C++'s kind under USLUB_DEBUG (api/sized.c): enum dbg_kind */
	uint32_t lead; /* red zone before the block in its mapping: 0 or a page */
};

/* The lead a new block of alignment `align` gets. */
static size_t huge_lead(size_t align)
{
	return uslub_block_pad && align <= USLUB_PAGE_SIZE ? USLUB_PAGE_SIZE : 0;
}

/* The mapping's length for a block of `size` with `lead`. */
static size_t huge_len(size_t size, size_t lead)
{
	return lead + ((size + uslub_block_pad + USLUB_PAGE_SIZE - 1) & ~(USLUB_PAGE_SIZE - 1));
}

static uintptr_t huge_key(uintptr_t a)
{
	return (a >> USLUB_PAGE_SHIFT) + 2;
}

static pthread_mutex_t huge_lock = PTHREAD_MUTEX_INITIALIZER;
static struct huge_entry *huge_table;
static size_t huge_cap, huge_used, huge_tombs;

/* The last huge blocks freed, by key, so a second free of one is called a double free
 * rather than a foreign pointer. Under huge_lock. */
#define HUGE_FREED 64
static uintptr_t huge_freed[HUGE_FREED];
static unsigned huge_freed_next;

static void huge_note_freed(uintptr_t a)
{
	huge_freed[huge_freed_next++ % HUGE_FREED] = huge_key(a);
}

static void huge_forget_freed(uintptr_t a)
{
	for (unsigned i = 0; i < HUGE_FREED; i++)
		if (huge_freed[i] == huge_key(a))
			huge_freed[i] = 0;
}

/* The huge cache: freed mappings kept for reuse, under huge_lock. A few entries are
 * enough - a program that replaces buffers frees one for each it allocates - and their
 * bytes are bounded by HUGE_CACHE_MIN or a quarter of the huge bytes in use, whichever is
 * more, so what is kept follows the program's own huge blocks. */
#define HUGE_CACHE_SLOTS 8
#define HUGE_CACHE_MIN	 (64UL << 20)
/* Unused this long, a cached mapping goes back: the page allocator's decay epoch (one to
 * two seconds) is the same order. */
#define HUGE_DECAY_MS 1000
/* A cached mapping is reused whole when at most half of it is beyond the request; a
 * bigger one is split. Half faults in fewer pages than a quarter, for a little more peak
 * RSS (tools/bench/results/). */
#define HUGE_SLACK_SHIFT 1

struct huge_cached {
	uintptr_t addr;
	size_t len;
	uint64_t freed_ms;
};

static struct huge_cached huge_cache[HUGE_CACHE_SLOTS];
static unsigned huge_cached_count;

bool uslub_huge_was_freed(const void *p)
{
	bool found = false;
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	for (unsigned i = 0; i < HUGE_FREED && !found; i++)
		found = huge_freed[i] == huge_key((uintptr_t)p);
	/* A cached mapping's block began at its start, or a page in (its lead). */
	for (unsigned i = 0; i < huge_cached_count && !found; i++)
		found = huge_cache[i].addr == (uintptr_t)p ||
			(uslub_block_pad && huge_cache[i].addr + USLUB_PAGE_SIZE == (uintptr_t)p);
	pthread_mutex_unlock(&huge_lock);
	return found;
}

/* Entry i out of the cache, into `out`; under huge_lock. `evict`: bound for the
 * OS, uncounted here, under the lock the heap walker reads the counters under. */
static void cache_remove(unsigned i, struct huge_cached *out, bool evict)
{
	if (evict)
		atomic_fetch_sub(&uslub_mapped_bytes, huge_cache[i].len);
	*out = huge_cache[i];
	atomic_fetch_sub(&uslub_huge_cached_bytes, huge_cache[i].len);
	huge_cache[i] = huge_cache[--huge_cached_count];
}

/* uslub_huge_expiry_ms from the entries; under huge_lock, after any change. */
static void set_expiry(void)
{
	uint64_t oldest = UINT64_MAX;
	for (unsigned i = 0; i < huge_cached_count; i++)
		if (huge_cache[i].freed_ms < oldest)
			oldest = huge_cache[i].freed_ms;
	atomic_store_explicit(&uslub_huge_expiry_ms, huge_cached_count ? oldest + HUGE_DECAY_MS : 0,
			      memory_order_relaxed);
}

/* Entries unused for HUGE_DECAY_MS (all of them with `all`) moved to `out`, which has
 * room for HUGE_CACHE_SLOTS; how many. Under huge_lock. */
static unsigned cache_expire(uint64_t now, bool all, struct huge_cached *out)
{
	unsigned n = 0;
	for (unsigned i = 0; i < huge_cached_count;) {
		if (all || now - huge_cache[i].freed_ms >= HUGE_DECAY_MS)
			cache_remove(i, &out[n++], true);
		else
			i++;
	}
	return n;
}

/* Mappings out of the cache back to the OS, outside huge_lock (`evicted`: uncounted). */
static size_t unmap_entries(const struct huge_cached *e, unsigned n, bool evicted)
{
	size_t bytes = 0;
	for (unsigned i = 0; i < n; i++) {
		uslub_os_unmap((void *)e[i].addr, e[i].len);
		if (!evicted)
			atomic_fetch_sub(&uslub_mapped_bytes, e[i].len);
		bytes += e[i].len;
	}
	return bytes;
}

size_t uslub_huge_cache_release(bool all)
{
	struct huge_cached out[HUGE_CACHE_SLOTS];
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	unsigned n = huge_cached_count ? cache_expire(uslub_os_now_ms(), all, out) : 0;
	set_expiry();
	pthread_mutex_unlock(&huge_lock);
	return unmap_entries(out, n, true);
}

/* The oldest entry's index; the cache is not empty. Under huge_lock. */
static unsigned cache_oldest(void)
{
	unsigned oldest = 0;
	for (unsigned i = 1; i < huge_cached_count; i++)
		if (huge_cache[i].freed_ms < huge_cache[oldest].freed_ms)
			oldest = i;
	return oldest;
}

size_t uslub_huge_cache_trim(uint64_t keep)
{
	struct huge_cached out[HUGE_CACHE_SLOTS];
	unsigned n = 0;
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	while (huge_cached_count && atomic_load(&uslub_huge_cached_bytes) > keep)
		cache_remove(cache_oldest(), &out[n++], true);
	set_expiry();
	pthread_mutex_unlock(&huge_lock);
	return unmap_entries(out, n, true);
}

/* A freed mapping into the cache, making room by sending the oldest back; false (nothing
 * changed) when it should go back itself. Besides its own cap the cache stays within
 * what all free memory kept may reach (uslub_keep_bound): a program whose live set fell
 * keeps no huge mapping beyond it. */
static bool cache_put(uintptr_t addr, size_t len, uint64_t now)
{
	struct huge_cached out[HUGE_CACHE_SLOTS + 1];
	uint64_t in_use = atomic_load(&uslub_huge_bytes) / 4, bound = uslub_keep_bound();
	uint64_t cap = in_use > HUGE_CACHE_MIN ? in_use : HUGE_CACHE_MIN;
	if (cap > bound)
		cap = bound;
	if (len > cap)
		return false;
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	unsigned n = cache_expire(now, false, out);
	while (huge_cached_count && (huge_cached_count == HUGE_CACHE_SLOTS ||
				     atomic_load(&uslub_huge_cached_bytes) + len > cap))
		cache_remove(cache_oldest(), &out[n++], true);
	huge_cache[huge_cached_count++] = (struct huge_cached){addr, len, now};
	atomic_fetch_add(&uslub_huge_cached_bytes, len);
	set_expiry();
	pthread_mutex_unlock(&huge_lock);
	unmap_entries(out, n, true);
	return true;
}

/* A mapping of `len` bytes at `align` made from a cached one, or NULL. *got is its length
 * (more than len when reused whole), *dirty how much of it held a block before (what
 * mremap added reads as zero). Mappings unused too long go back on the way. */
static void *cache_take(size_t len, size_t align, size_t *got, size_t *dirty)
{
	struct huge_cached out[HUGE_CACHE_SLOTS], e;
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	if (!huge_cached_count) {
		pthread_mutex_unlock(&huge_lock);
		return NULL;
	}
	unsigned n = cache_expire(uslub_os_now_ms(), false, out);
	/* The smallest that holds len, else the largest (grown below). A mapping may move
	 * when it grows, so an alignment above the page's takes one that holds it. */
	int fit = -1, grow = -1;
	for (unsigned i = 0; i < huge_cached_count; i++) {
		const struct huge_cached *c = &huge_cache[i];
		if (c->addr & (align - 1))
			continue;
		if (c->len >= len && (fit < 0 || c->len < huge_cache[fit].len))
			fit = (int)i;
		if (c->len < len && align <= USLUB_PAGE_SIZE &&
		    (grow < 0 || c->len > huge_cache[grow].len))
			grow = (int)i;
	}
	int pick = fit >= 0 ? fit : grow;
	if (pick >= 0)
		cache_remove((unsigned)pick, &e, false);
	set_expiry();
	pthread_mutex_unlock(&huge_lock);
	unmap_entries(out, n, true);
	if (pick < 0)
		return NULL;

	void *p = (void *)e.addr;
	*dirty = e.len;
	if (e.len >= len) {
		*got = e.len;
		if (e.len - len <= e.len >> HUGE_SLACK_SHIFT)
			return p;
		/* Far too big: split. A tail that could hold a huge block stays cached with
		 * its pages (no system call: the kernel's mapping is not split until one of
		 * the two is unmapped or moved); a smaller one goes back. */
		*got = len;
		struct huge_cached tail = {e.addr + len, e.len - len, e.freed_ms};
		if (tail.len <= HUGE_THRESHOLD || !cache_put(tail.addr, tail.len, tail.freed_ms))
			unmap_entries(&tail, 1, false);
		return p;
	}
	/* Too small: grown, so only the difference is faulted in. */
	void *q = uslub_over_limit(len - e.len) ? NULL : uslub_os_remap(p, e.len, len);
	if (!q) {
		unmap_entries(&e, 1, false);
		return NULL;
	}
	atomic_fetch_add(&uslub_mapped_bytes, len - e.len);
	*got = len;
	return q;
}

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

static int huge_insert(uintptr_t a, size_t len, size_t size, size_t lead)
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
	huge_table[i].size = size;
	huge_table[i].kind = 0;
	huge_table[i].lead = (uint32_t)lead;
	huge_used++;
	huge_forget_freed(a);
	return 0;
}

static void huge_erase(struct huge_entry *e)
{
	e->key = 1;
	huge_used--;
	huge_tombs++;
}

void *uslub_huge_alloc(size_t size, size_t align, bool zero)
{
	if (size > PTRDIFF_MAX - HUGE_ALIGN) {
		errno = ENOMEM;
		return NULL;
	}
	size_t lead = huge_lead(align), len = huge_len(size, lead);
	size_t a = align > HUGE_ALIGN ? align : HUGE_ALIGN;
	size_t got = len, dirty = 0;
	char *m = cache_take(len, align ? align : 1, &got, &dirty);
	bool fresh = !m;
	if (fresh) {
		/* Cached mappings count against the cap, and hold address space. */
		if (uslub_over_limit(len) &&
		    (!uslub_huge_cache_release(true) || uslub_over_limit(len))) {
			errno = ENOMEM;
			return NULL;
		}
		m = uslub_os_map_aligned(len, a, align);
		if (!m && errno == ENOMEM && uslub_os_space_limited() &&
		    (uslub_huge_cache_release(true) | uslub_hooks.shrink() |
		     uslub_pages_unmap_free()))
			m = uslub_os_map_aligned(len, a, align);
		if (!m) {
			errno = ENOMEM;
			return NULL;
		}
		atomic_fetch_add(&uslub_mapped_bytes, len);
	}
	char *p = m + lead;
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	int rc = huge_insert((uintptr_t)p, got, size, lead);
	/* Under the lock, as every change of a block's red zone: the sweep reads them under
	 * it (uslub_huge_sweep). A fresh mapping reads as zero, but only calloc asked for
	 * that; a reused one holds the last block's bytes, so checkers see it undefined and
	 * calloc clears them below. */
	if (unlikely(uslub_block_debug) && !rc)
		uslub_hooks.block_alloc(p, size, got - lead, lead, zero && fresh);
	pthread_mutex_unlock(&huge_lock);
	if (rc) {
		uslub_os_unmap(m, got);
		atomic_fetch_sub(&uslub_mapped_bytes, got);
		errno = ENOMEM;
		return NULL;
	}
	atomic_fetch_add(&uslub_huge_bytes, got);
	uslub_note_in_use();
	/* A reused mapping's pages are resident: clearing them costs no memory, and
	 * MADV_DONTNEED would make the program fault each one in again - what the cache is
	 * there to save. */
	if (zero && !fresh) {
		/* All of it where a checker has just marked it undefined. */
		size_t clear = size < dirty - lead || uslub_block_debug ? size : dirty - lead;
		memset(p, 0, clear);
	}
	return p;
}

/* Checkers see the request; otherwise the whole mapping may be used. */
size_t uslub_huge_usable(const void *p)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	struct huge_entry *e = huge_find((uintptr_t)p);
	size_t len = !e ? 0 : unlikely(uslub_block_debug) ? e->size : e->len - e->lead;
	pthread_mutex_unlock(&huge_lock);
	return len;
}

bool uslub_huge_maps(const void *start)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	struct huge_entry *e = huge_find((uintptr_t)start);
	bool found = e && !e->lead;
	e = found ? NULL : huge_find((uintptr_t)start + USLUB_PAGE_SIZE);
	found |= e && e->lead == USLUB_PAGE_SIZE;
	pthread_mutex_unlock(&huge_lock);
	return found;
}

/* The free of huge block p, with uslub_huge_free's check, and for uslub_huge_move_out a copy
 * of its first bytes to `to` once it is out of the table (the bytes are still mapped). */
static int huge_release(void *p, size_t expect_pages, size_t *usable, void *to, size_t max)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	struct huge_entry *e = huge_find((uintptr_t)p);
	if (!e) {
		pthread_mutex_unlock(&huge_lock);
		return 0;
	}
	size_t len = e->len, size = e->size, lead = e->lead;
	/* The bytes the program may use (uslub_huge_usable): the request under a checker. */
	size_t bytes = unlikely(uslub_block_debug) ? size : len - lead;
	if (expect_pages && (bytes + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT != expect_pages) {
		pthread_mutex_unlock(&huge_lock);
		*usable = bytes;
		return -1;
	}
	huge_erase(e);
	huge_note_freed((uintptr_t)p);
	pthread_mutex_unlock(&huge_lock);
	if (to)
		memcpy(to, p, max < bytes ? max : bytes);
	if (unlikely(uslub_block_debug))
		uslub_hooks.block_free(p, size, len - lead, lead, NULL);
	uslub_bound_leaving(&uslub_huge_bytes, len);
	char *m = (char *)p - lead;
	if (!cache_put((uintptr_t)m, len, uslub_os_now_ms())) {
		uslub_os_unmap(m, len);
		atomic_fetch_sub(&uslub_mapped_bytes, len);
	}
	/* Less in use: the free pages kept may now be over the bound. */
	uslub_pages_bound();
	return 1;
}

int uslub_huge_free(void *p, size_t expect_pages, size_t *usable)
{
	return huge_release(p, expect_pages, usable, NULL, 0);
}

int uslub_huge_move_out(void *p, void *to, size_t max)
{
	return huge_release(p, 0, NULL, to, max);
}

/* Grow or shrink with mremap; NULL (errno ENOMEM) leaves the block as it was. With
 * `retry`, a growth refused under RLIMIT_AS is tried again once free region memory is
 * unmapped - outside huge_lock, which nests inside the zone locks (fork_prepare). */
static void *huge_realloc(void *p, size_t size, bool retry, bool *found)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	struct huge_entry *e = huge_find((uintptr_t)p);
	*found = e != NULL;
	if (!e) {
		pthread_mutex_unlock(&huge_lock);
		return NULL;
	}
	if (size > PTRDIFF_MAX - HUGE_ALIGN) {
		pthread_mutex_unlock(&huge_lock);
		errno = ENOMEM;
		return NULL;
	}
	size_t old = e->len, old_size = e->size, lead = e->lead, len = huge_len(size, lead);
	/* Checked while the bytes are where they were: a shrink unmaps the tail. */
	if (unlikely(uslub_block_debug))
		uslub_hooks.block_check(p, old_size, old - lead, lead, "realloc");
	if (len == old) {
		e->size = size;
		if (unlikely(uslub_block_debug))
			uslub_hooks.block_resize(p, p, old_size, old - lead, size, len - lead,
						 lead);
		pthread_mutex_unlock(&huge_lock);
		return p;
	}
	if (len > old && uslub_over_limit(len - old)) {
		pthread_mutex_unlock(&huge_lock);
		if (retry && uslub_huge_cache_release(true))
			return huge_realloc(p, size, false, found);
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
	char *q = uslub_os_remap((char *)p - lead, old, len);
	if (!q) {
		bool unmap = retry && len > old && errno == ENOMEM && uslub_os_space_limited();
		pthread_mutex_unlock(&huge_lock);
		if (unmap && (uslub_huge_cache_release(true) | uslub_hooks.shrink() |
			      uslub_pages_unmap_free()))
			return huge_realloc(p, size, false, found);
		errno = ENOMEM;
		return NULL;
	}
	q += lead;
	huge_erase(e);
	huge_insert((uintptr_t)q, len, size, lead); /* cannot fail: room was made above */
	if (unlikely(uslub_block_debug))
		uslub_hooks.block_resize(p, q, old_size, old - lead, size, len - lead, lead);
	pthread_mutex_unlock(&huge_lock);
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

void *uslub_huge_realloc(void *p, size_t size, bool *found)
{
	return huge_realloc(p, size, true, found);
}

int uslub_huge_kind(const void *p, int set)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	struct huge_entry *e = huge_find((uintptr_t)p);
	int had = e ? (int)e->kind : -1;
	if (e && set >= 0)
		e->kind = (uint32_t)set;
	pthread_mutex_unlock(&huge_lock);
	return had;
}

void uslub_huge_sweep(void (*check)(void *p, size_t size, size_t span, size_t lead, const char *op),
		      const char *op)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
	for (size_t i = 0; i < huge_cap; i++) {
		const struct huge_entry *e = &huge_table[i];
		if (e->key > 1)
			check((void *)((e->key - 2) << USLUB_PAGE_SHIFT), e->size, e->len - e->lead,
			      e->lead, op);
	}
	pthread_mutex_unlock(&huge_lock);
}

void uslub_huge_lock(void)
{
	uslub_lock(&huge_lock, USLUB_LOCK_HUGE);
}

void uslub_huge_unlock(void)
{
	pthread_mutex_unlock(&huge_lock);
}
