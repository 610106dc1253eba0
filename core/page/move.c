/* Moved pages: a span's fresh pages taken from the warm blocks that pay for them.
 *
 * 10. Section 9 of decay.c hands back as many warm free pages as a new span has pages
 *     never touched, so that resident memory does not grow by the span while the pieces
 *     too short for it stay resident. The program then faults the span's fresh pages in,
 *     each zeroed by the kernel. Moving the warm pages paid with into the span's fresh
 *     ones instead (mremap with MREMAP_DONTUNMAP: the page tables move, the source stays
 *     mapped and empty, as after MADV_DONTNEED) leaves resident memory where the pay
 *     leaves it and faults nothing in: 0.2 ms for 4 MiB moved and written against 1.7 ms
 *     faulted in and written on this VM. The source still costs its faults again if a
 *     later block lands on it; the pay takes the highest blocks, which are reused last
 *     (section 9), so what it saves is the span's own faults.
 *     - Which pages: the batch's resident ones only (mincore), in rising address order;
 *       a "warm" block may hold pages never touched (a warm half merged with a fresh
 *       one). Where a batch held too few, the pay takes the next highest blocks, a few
 *       rounds at most, within the keep; the blocks a move never reached go back onto
 *       the lists as they were, so a pay that moves hands back little beyond what it
 *       moved out. The zone keeps a quarter of the large blocks in use, as where
 *       nothing moves (an eighth, tried, cost more time than its lower peak was worth:
 *       decay.c, uslub_pages_pay).
 *     - What it costs: the kernel keeps each moved range a mapping of its own (its pages
 *       keep their old offsets, so it cannot join its neighbours; ranges moved from
 *       neighbouring pages to neighbouring places join), up to two more mappings toward
 *       vm.max_map_count (65530) each. A zone records the ranges it moved (MOVED_PIECES
 *       at most, so at most twice as many mappings), and a hand-back of memory that
 *       overlaps one maps it afresh instead of MADV_DONTNEED (uslub_os_renew), which
 *       joins it to its neighbours again and frees the record. With every record taken
 *       the pay hands back as section 9 alone does.
 *     - Where the kernel refuses (before 5.7; a source that crosses two mappings), under
 *       memcheck, or where a test makes mremap fail, nothing moves and the pay is section
 *       9's, keeping a quarter. The moved pages hold whatever the freed blocks held, as
 *       reused warm pages always do; calloc clears a span not known to be fresh
 *       (slab/large.c). */
#include "page/page.h"

#include "os/vg.h"

#include <errno.h>
#include <string.h>

/* Ranges moved for one span at most. */
#define MOVE_RANGES 16

/* Destination pages looked at per mincore call (a byte each on the stack). */
#define MOVE_WINDOW 512

/* Where the kernel refused the flag once: never asked again. */
static bool move_refused;

/* Each zone's records, kept apart from struct uslub_node: 16 KiB a zone, touched only by
 * a zone that moves pages, where inside the zones they put every zone's header on a page
 * of its own, all 2 * MAX_NODES of them written at start (144 KiB of a do-nothing
 * program's resident memory). Under the zone's lock. */
static struct uslub_moved zone_moved[NR_ZONES];

static struct uslub_moved *moved_of(struct uslub_node *n)
{
	return &zone_moved[n - uslub_nodes];
}

bool uslub_pages_can_move(void)
{
	return !__atomic_load_n(&move_refused, __ATOMIC_RELAXED) && !uslub_memcheck;
}

/* The records are kept apart and in address order: the first that ends after `lo`. */
static unsigned moved_first(const struct uslub_moved *m, uintptr_t lo)
{
	unsigned a = 0, b = m->count;
	while (a < b) {
		unsigned mid = (a + b) / 2;
		if (m->piece[mid].hi <= lo)
			a = mid + 1;
		else
			b = mid;
	}
	return a;
}

/* Take [lo, hi) out of the records, splitting one that holds it inside: false (and
 * nothing changed) where that needs a record there is no room for. Under the lock. */
static bool moved_carve(struct uslub_moved *m, uintptr_t lo, uintptr_t hi)
{
	unsigned i = moved_first(m, lo), j = i;
	while (j < m->count && m->piece[j].lo < hi)
		j++;
	if (i == j)
		return true;
	struct moved_piece head = m->piece[i], tail = m->piece[j - 1];
	unsigned keep = (head.lo < lo) + (hi < tail.hi);
	if (m->count - (j - i) + keep + m->reserved > MOVED_PIECES)
		return false;
	struct moved_piece left[2];
	unsigned k = 0;
	if (head.lo < lo)
		left[k++] = (struct moved_piece){head.lo, lo};
	if (hi < tail.hi)
		left[k++] = (struct moved_piece){hi, tail.hi};
	memmove(&m->piece[i + k], &m->piece[j], (m->count - j) * sizeof(m->piece[0]));
	for (unsigned x = 0; x < k; x++)
		m->piece[i + x] = left[x];
	__atomic_store_n(&m->count, m->count - (j - i) + k, __ATOMIC_RELAXED);
	return true;
}

bool uslub_moved_take(struct uslub_node *n, void *addr, size_t size)
{
	if (!__atomic_load_n(&moved_of(n)->count, __ATOMIC_RELAXED))
		return false;
	uintptr_t lo = (uintptr_t)addr, hi = lo + size;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	struct uslub_moved *m = moved_of(n);
	unsigned i = moved_first(m, lo);
	bool met = i < m->count && m->piece[i].lo < hi && moved_carve(m, lo, hi);
	uslub_zone_unlock(n);
	return met;
}

void uslub_moved_forget_locked(struct uslub_node *n, void *addr, size_t size)
{
	/* Unmapped: a record there would only take room. Splitting none (the range is a
	 * region's top), the carve cannot fail for room; if it did, the record stays, which
	 * costs a renew of memory that is ours. */
	moved_carve(moved_of(n), (uintptr_t)addr, (uintptr_t)addr + size);
}

/* A range moved into [lo, hi): recorded, over whatever was recorded there. Room was
 * reserved (two records: this one and a split). Under the lock. */
static void moved_add(struct uslub_moved *m, uintptr_t lo, uintptr_t hi)
{
	m->reserved -= 2;
	moved_carve(m, lo, hi);
	unsigned i = moved_first(m, lo);
	memmove(&m->piece[i + 1], &m->piece[i], (m->count - i) * sizeof(m->piece[0]));
	m->piece[i] = (struct moved_piece){lo, hi};
	__atomic_store_n(&m->count, m->count + 1, __ATOMIC_RELAXED);
}

/* The batch's resident pages, block by block, as a cursor: a warm block may hold pages
 * never touched (a warm half merged with a fresh one), and moving those moves nothing. */
struct move_source {
	struct page_desc *d;
	size_t page;   /* of d's block: the cursor */
	size_t window; /* of d's block: where vec begins */
	size_t len;    /* pages in vec; 0: none read */
	unsigned char vec[MOVE_WINDOW];
};

/* Resident pages that follow one another from the cursor on, at most `max`, the cursor
 * moved to the first of them; 0 where the batch has none left. */
static size_t source_run(struct move_source *s, size_t max)
{
	while (s->d) {
		size_t pages = 1UL << s->d->order;
		if (s->page == pages) {
			*s = (struct move_source){.d = s->d->next};
			continue;
		}
		if (!s->len || s->page >= s->window + s->len) {
			s->window = s->page;
			s->len = pages - s->page < MOVE_WINDOW ? pages - s->page : MOVE_WINDOW;
			char *at = (char *)page_address(s->d) + (s->window << USLUB_PAGE_SHIFT);
			if (uslub_os_residency(at, s->len << USLUB_PAGE_SHIFT, s->vec) != 0)
				return s->d = NULL, 0;
		}
		size_t i = s->page - s->window, run = 0;
		while (i + run < s->len && run < max && (s->vec[i + run] & 1))
			run++;
		if (run)
			return run;
		s->page++;
	}
	return 0;
}

size_t uslub_pages_move(struct uslub_node *n, struct page_desc *span, size_t npages,
			struct page_desc *batch, size_t want, struct page_desc **rest)
{
	*rest = NULL;
	if (!want || !uslub_pages_can_move())
		return 0;
	/* Room for the records first: each range moved takes one and may split one. */
	unsigned ranges;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	ranges = (MOVED_PIECES - moved_of(n)->count - moved_of(n)->reserved) / 2;
	if (ranges > MOVE_RANGES)
		ranges = MOVE_RANGES;
	moved_of(n)->reserved += 2 * ranges;
	uslub_zone_unlock(n);
	if (!ranges)
		return 0;

	struct moved_piece done[MOVE_RANGES];
	unsigned nr = 0;
	struct move_source src = {.d = batch};
	uintptr_t base = (uintptr_t)page_address(span);
	size_t moved = 0;
	uintptr_t last_from = 0;
	unsigned char vec[MOVE_WINDOW];
	for (size_t at = 0; at < npages && moved < want && nr < ranges && src.d;) {
		size_t window = npages - at < MOVE_WINDOW ? npages - at : MOVE_WINDOW;
		if (uslub_os_residency((void *)(base + (at << USLUB_PAGE_SHIFT)),
				       window << USLUB_PAGE_SHIFT, vec) != 0)
			break;
		size_t i = 0;
		while (i < window && moved < want && nr < ranges) {
			if (vec[i] & 1) {
				i++;
				continue;
			}
			size_t fresh = 1;
			while (i + fresh < window && !(vec[i + fresh] & 1))
				fresh++;
			size_t pages =
			    source_run(&src, fresh < want - moved ? fresh : want - moved);
			if (!pages)
				goto out;
			uintptr_t to = base + ((at + i) << USLUB_PAGE_SHIFT);
			uintptr_t from =
			    (uintptr_t)page_address(src.d) + (src.page << USLUB_PAGE_SHIFT);
			if (uslub_os_move((void *)from, (void *)to, pages << USLUB_PAGE_SHIFT) !=
			    0) {
				if (errno == EINVAL)
					__atomic_store_n(&move_refused, true, __ATOMIC_RELAXED);
				goto out;
			}
			/* Pages that follow the last ones moved, to the place that follows
			 * theirs, join their mapping (the kernel merges them): one record.
			 * The batch is in rising address order, so neighbouring blocks do. */
			if (nr && done[nr - 1].hi == to && last_from == from)
				done[nr - 1].hi = to + (pages << USLUB_PAGE_SHIFT);
			else
				done[nr++] =
				    (struct moved_piece){to, to + (pages << USLUB_PAGE_SHIFT)};
			last_from = from + (pages << USLUB_PAGE_SHIFT);
			moved += pages;
			i += pages;
			src.page += pages;
		}
		at += window;
	}
out:
	/* The blocks the cursor never reached are the caller's to put back. */
	if (moved && src.d) {
		struct page_desc *cut = src.page || src.len ? src.d->next : src.d;
		for (struct page_desc *b = batch; cut && b; b = b->next)
			if (b->next == cut) {
				b->next = NULL;
				*rest = cut;
			}
	}
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	for (unsigned i = 0; i < nr; i++)
		moved_add(moved_of(n), done[i].lo, done[i].hi);
	moved_of(n)->reserved -= 2 * (ranges - nr);
	n->moved_pages += moved;
	uslub_zone_unlock(n);
	return moved;
}
