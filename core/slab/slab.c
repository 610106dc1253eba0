/* uslub: caches and slabs, the SLUB design in user space.
 *
 * 1. Overview. Every request up to 8 KiB goes to one of 32 caches (kmalloc-16 ...
 *    kmalloc-8k). A cache carves slabs - runs of 2^order pages from the page allocator -
 *    into equal objects and threads a freelist through the free ones. Each thread has, per
 *    cache, a sheaf of free objects that malloc and free use (section 6), and below it one
 *    current slab whose freelist refills the sheaf without locks or atomics
 *    (kmem_cache_cpu) and a short list of more slabs (the kernel's per-CPU partial list).
 *    Behind those, each cache has one partial list per NUMA node behind a lock
 *    (kmem_cache_node), and one barn per node.
 *
 * 2. Start-up under LD_PRELOAD. The first malloc may come from the dynamic loader, from
 *    a constructor of a library loaded before us (libnuma's calls malloc 48 times), or
 *    from TLS set-up. uslub_init runs on the first call of any entry point, reads its
 *    settings from `environ` and needs nothing from libc that allocates. Threads start
 *    with their TLS pointer on a static empty thread whose freelists are all empty, so the
 *    fast path needs no "initialised?" test: the first allocation fails into the slow
 *    path, which builds the thread's state. Nothing is torn down at exit: libraries'
 *    destructors free after ours ran.
 *
 * 3. Thread slabs. A slab a thread holds is "frozen": its descriptor names the thread
 *    (owner). The owner allocates from the thread's freelist and frees onto the slab's
 *    local list, both plain stores. Other threads free with one compare-and-swap onto the
 *    slab's remote list, which lives in one 64-bit word with the slab's inuse count and
 *    frozen bit - SLUB's cmpxchg_double of freelist and counters, packed (the freelist
 *    as an offset in the slab):
 *
 *        bits  0..31  remote freelist head, offset from the slab start + 1 (0: empty)
 *        bits 32..55  inuse: objects carved (section 9) and not on the slab's freelist
 *        bit  63      frozen
 *
 *    When its freelist runs dry the owner takes the local list, then the remote list
 *    (one exchange), and only then looks elsewhere.
 *
 * 4. Slab states. THREAD (current slab), THREAD-PARTIAL (on a thread's partial list),
 *    both frozen; NODE-PARTIAL (unfrozen, some objects free, on the node's list); FULL
 *    (unfrozen, no free object, on no list). Moves:
 *      - current slab runs out and has no frees pending: unfrozen as FULL;
 *      - a free into a FULL slab freezes it for the freeing thread, which puts it on its
 *        partial list (SLUB's put_cpu_partial), so a thread that frees what others
 *        allocated reuses that memory without touching a lock;
 *      - a thread partial list longer than cpu_partial_slabs is unfrozen to the node;
 *      - get_partial freezes up to half of cpu_partial_slabs node slabs at once;
 *      - an unfrozen slab whose last object is freed goes back to the page allocator,
 *        unless the node keeps fewer than min_partial slabs, then it stays as a partial.
 *    A thread that exits unfreezes everything it holds and gives back its pages.
 *
 * 5. Locks. The order, outermost first - thread.c's sweep lock -> liburcu's grace-period
 *    lock (synchronize_rcu) -> orphan lock -> registry lock -> a thread's slow_lock -> stat
 *    lock -> a cache's node list_lock -> a barn's lock -> a medium depot's lock -> a page
 *    allocator zone's lock -> the huge-block lock.
 *    What each guards:
 *
 *      sweep_lock (thread.c)       one reaper of dead threads' states at a time
 *      uslub_orphan_lock           the shared state of threads that have none of their own
 *      uslub_registry_lock         the registry's links (readers walk it under RCU)
 *      uslub_thread.slow_lock      what lies below a thread's sheaves (its slabs,
 *                                  freelists, page cache; the medium-block cache with
 *                                  medium_busy/medium_claim, medium.c): its owner's
 *                                  slow paths, and the idle drain (thread.c), which takes
 *                                  it with trylock under the registry lock
 *      uslub_stat_lock             folding an exiting thread's counters into its caches
 *      cache_node.list_lock        a node's partial list, nr_partial, PF_ON_PARTIAL, and an
 *                                  unfrozen slab's moves between partial, full and freed;
 *                                  taking objects off a partial slab's list (sheaf.c)
 *      barn.lock (barn.c)          a barn's objects and count; held for a copy only, no
 *                                  other lock taken under it
 *      depot.lock (depot.c)        a node's depot of medium blocks; dropped before the
 *                                  blocks it turns away go to the zones
 *      uslub_node.lock (zone)      buddy lists, region growth, release, the zone counters
 *      huge_lock (large.c)         the huge-block table and the ring of freed ones
 *
 *    In practice list_lock is dropped before pages are freed, so list_lock and a zone
 *    lock are never held together. fork and the heap walker take every lock in this
 *    order (lock.c). Lock-free fields, who writes them and who may read them:
 *
 *      field                  written by                         read by
 *      tls thread pointer     its thread                         its thread
 *      cache_cpu sheaf,       its thread (plain stores)          its thread; the heap
 *        stat                                                    walker with every lock
 *                                                                and the threads quiet
 *      cache_cpu freelist,    its thread, or the idle drain,     the same
 *        slab, partial        under the thread's slow_lock
 *      page_desc.local_free,  the slab's owner (plain)           the owner only: others
 *        local_count                                             first load owner
 *      page_desc.owner        the thread that freezes or lets    anyone (relaxed): only
 *                             go (relaxed; the slab word's CAS    "is it me?" is asked
 *                             orders it)
 *      page_desc.word         CAS by any freeing thread and the  anyone (acquire)
 *        (remote list, inuse,  owner; acq_rel publishes the links
 *        frozen)              the objects carry
 *      page_desc.kind         atomic byte store by whoever       the buddy's merge under
 *                             changes a block's use              the zone lock, free's
 *                                                                slow path
 *      page_desc.head         release store when a block is      free's fast path
 *                             formed (slab, large, thread state)  (plain load of a word)
 *      page_desc.objects and  the carver (section 9): the owner, anyone (free's bound):
 *        page_test.objects    or a list_lock holder of an        relaxed under TSan,
 *                             unfrozen slab; relaxed, growing    else plain (objects_of)
 *      registry links         under uslub_registry_lock,         the dump and live view
 *                             release stores (rcu_assign)        under RCU
 *      uslub_fold_seq         the folding thread (odd while it   a dump, which retries
 *                             folds)                             over an odd or changed
 *                                                                value
 *      uslub_keys             start-up, before the first slab    every free and pop
 *
 * 6. Sheaves and barns (Linux 6.18), and why they are the fast path. Each thread has, per
 *    cache, a sheaf: an array of up to 28 free objects (fewer for large objects). malloc
 *    pops it, free pushes onto it, whichever slab the object lies in and whichever thread
 *    holds that slab; neither takes an atomic or touches a slab. The per-thread slabs of
 *    sections 3-4 stay, one layer down: an empty sheaf is refilled from the barn, else
 *    from the thread's slab (its freelist, then SLUB's refill order), and a full sheaf
 *    goes to the barn, else back to its slabs. The barn is per node and cache: full
 *    sheaves left by threads whose frees outrun their allocations, for threads of the node
 *    whose allocations outrun their frees (up to 4 MiB of objects a cache, 8 to 36
 *    sheaves) - one thread's surplus feeds another's demand with one lock round trip per
 *    sheaf. A slow path moves half a sheaf, or a whole one when the same end was met
 *    twice in a row (sheaf.c, sheaf_turn: a random walk then stays off both ends for
 *    longer; a batch still moves whole sheaves). A sheaf of objects above 256 B opens at
 *    8 and grows at each turn from one end to the other (thread.h, uslub_sheaf_start).
 *    What finds the barn full goes back to its slabs in bulk (kmem_cache_free_bulk): the
 *    objects of one slab are gathered into a detached list and pushed with one
 *    compare-and-swap, or onto the local list when the thread holds the slab. Sheaves
 *    are copied into and out of the barn rather than swapped (the kernel swaps sheaf
 *    pointers): the copy is 28 words per 28 operations, and the fast paths index an
 *    array inside cache_cpu instead of loading a sheaf pointer first.
 *
 *    Why: with SLUB's own fast paths - pop the thread freelist, push onto a slab the
 *    thread holds - only frees into the thread's current or partial slabs were cheap. A
 *    program that keeps objects for a while and frees them in an order of its own (a cache,
 *    an index, a server's requests, glibc's thread benchmark) frees mostly into slabs it
 *    does not hold: in the random-replacement workload 86% of frees took the earlier,
 *    out-of-line sheaf and 14% the compare-and-swap and list moves (tools/bench/results/).
 *    The alternatives: mimalloc's thread-owned pages make the owner's free to any of its
 *    pages a plain push, but a thread then owns every slab it ever allocated from until it
 *    exits, and frees by other threads still take an atomic each; tcmalloc's transfer
 *    cache is the barn without the slab layer's NUMA placement. Putting the sheaf first
 *    keeps SLUB's slabs, partial lists and node search for what they are good at - placing
 *    and reclaiming memory - and takes them off the per-object path, as the kernel did.
 *    The free fast path stays short by reading the test of the pointer's own page, which
 *    carries the slab's start, carved count and cache_cpu offset on every page, instead
 *    of following `head`; by keeping the class's magic in the thread's cache_cpu, in the
 *    line the push reads anyway; by a region table whose empty slots read as an all-zero
 *    region instead of NULL; and by deriving free_fastpath from the sheaf's count instead
 *    of counting it (types.h, uslub_cc_stat). The tests are 8 bytes a page, apart from
 *    the 64-byte descriptors: a free into a random page of a large heap misses the cache
 *    on its page's metadata, and with eight pages to a line it misses less
 *    (tools/bench/results/). The magic is written when the sheaf opens, so a thread's
 *    first free of a class (and every free of a thread without state) takes the slow
 *    path, which opens the sheaf. A whole-sheaf overflow finds the class from the
 *    cache_cpu's place and reads no descriptor either. The barn is sized in bytes, not
 *    sheaves: a barn of 8 sheaves sent most of a large batch back to its slabs.
 *
 *    A thread's first objects of a cache come from the node's shared partial slabs (3
 *    early objects one at a time, then 4) before it takes a slab of its own (sheaf.c): a
 *    thread that holds a dozen small blocks costs a dozen objects, not a slab per cache.
 *    The early ones come with the sheaf closed, and until a sheaf of the thread opens its
 *    state is not published (thread.h): the fast paths read the empty state's cpu[], and
 *    such a thread has written and read its own state's fields alone. Sheaves are emptied
 *    into their slabs by malloc_trim and at thread exit; barns by malloc_trim. Debug
 *    caches have no sheaf, and with USLUB_SHEAVES=0 every operation takes the slab layer
 *    (SLUB as it was, for comparison). Objects in a sheaf or a barn keep their free mark,
 *    and the sheaf is outside the objects, so a use after free that writes a freed
 *    object's first word steers nothing.
 *
 * 7. Bad frees and protected free pointers. A free object may sit on a thread freelist,
 *    a local list, a remote list or any thread's sheaf, and only the owner may walk the
 *    first two, so "is p already free?" cannot be answered by walking lists. Instead,
 *    every free object of a plain cache carries a mark in its second word - a secret
 *    drawn at start-up, xor'ed with the object's address - written when the object is
 *    freed (and when a slab's objects are carved), cleared when it is handed out. Every free
 *    path checks it first, so a double free is caught whichever list or sheaf the first
 *    free put the object on, also after its thread exited and in a slab whose objects are
 *    all free. This is glibc's tcache key, made per object: with the address mixed in, a
 *    mark copied elsewhere (the program reading freed memory) is not a mark there, so a
 *    match needs no confirming walk, and the program cannot make one without the secret.
 *    Large blocks are caught by their state (cached, or their pages free), huge ones by a
 *    ring of the last 64 unmapped. A debug cache keeps the state in its metadata.
 *
 *    Free pointers are stored mixed with a second secret and the byte-swapped address
 *    they are stored at (the kernel's CONFIG_SLAB_FREELIST_HARDENED; glibc's
 *    safe-linking), so a use after free that writes a pointer steers nothing: the value
 *    decodes to an address outside the slab. The pop checks that each object it is about
 *    to read lies inside the thread's current slab (slabs are aligned to their size, so
 *    cache_cpu keeps the slab's address and log2 size in one word); walks of other lists
 *    check each link names an object of the slab and stop after `objects` steps, so a
 *    corrupted list is reported ("corrupted free list"), never followed forever.
 *    USLUB_HARDEN=off stores the pointers in the clear (for comparison); the marks and
 *    the checks stay. Two threads freeing one object at the same instant can both pass
 *    the mark check, as with glibc: the remote list's CAS then catches the case where
 *    it is still the list's head, and a slab's inuse never goes below zero.
 *
 * 8. One request through the files, each layer calling only down (core/meson.build
 *    lists the order; docs/design.md has the file map):
 *
 *      malloc(n)   preload/malloc.c -> api/api.h uslub_malloc_inline: pop the thread's
 *                  sheaf of n's class. Empty: thread/alloc.c uslub_slab_alloc_slow ->
 *                  the node's barn (thread/barn.c) -> the sheaf's refill (thread/sheaf.c:
 *                  shared slabs for a new thread, else the thread's slab) -> the slab
 *                  layer (slab/partial.c get_partial: thread partial slabs, the node's
 *                  list, other nodes by distance; slab/slab.c new_slab) -> pages
 *                  (page/pcp.c, the thread's page cache; page/buddy.c at the preferred
 *                  order without waiting, else the minimum; page/region.c grows a region
 *                  through os/os.c). n > 8 KiB: slab/large.c (a run of pages), n > 4 MiB:
 *                  page/huge.c (a mapping of its own).
 *      free(p)     preload/malloc.c -> api/api.h uslub_free_inline: the test of p's own
 *                  page says it is an object of an open sheaf's class, not free: push it.
 *                  A full sheaf: thread/sheaf.c uslub_sheaf_overflow -> the barn, or the
 *                  objects back to their slabs (thread/barn.c, thread/free.c's remote
 *                  list; slab/partial.c when a slab changes lists). Anything else:
 *                  api/lookup.c uslub_free_slow -> uslub_classify, the one answer to "what
 *                  is p" (a slab object, a large block, a huge block, or a report that
 *                  stops the program) -> that kind's free: thread/free.c
 *                  uslub_object_free, slab/large.c, page/huge.c. realloc, the sized frees
 *                  and malloc_usable_size (api/api.c, api/sized.c) take the same answer.
 *
 * 9. Carving: a new slab's free list is threaded a step at a time (issue 13, memory
 *    follows the live set). Threading a whole order-3 slab writes a link and a mark into
 *    every object and so faults in all 32 KiB at once, for a thread that may take two
 *    objects and park. mimalloc does the same as here: when a page's free lists are
 *    both empty, mi_page_extend_free threads at most MI_MAX_EXTEND_SIZE (4 KiB) of
 *    further blocks, and in its secure builds shuffles them within that extension. A
 *    step here is 4 KiB of objects and at least CARVE_MIN (4): a step of one object
 *    cannot be shuffled, and a sheaf refill wants several. Caches whose slab holds one
 *    step (up to 4 KiB slabs, and 8 KiB objects) carve it all at creation, as before.
 *
 *    Representation. The descriptor's `objects` - and every page's test, since free's
 *    fast path reads the pointer's own page's - counts the objects carved so far; the
 *    slab's capacity is the cache's (uslub_slab_capacity). Objects past `objects` were
 *    never touched, are free, and are on no list. The alternatives: a field of its own
 *    (page_desc has no spare bytes); a tagged last link ("the rest starts at object k"),
 *    which every walker and every splice (deactivate appends lists by rewriting a tail
 *    link) would have to carry along, and which leaves the free fast path accepting an
 *    untouched object - it is an object's start and carries no mark (a fresh page reads
 *    zero, a recycled one whatever its last user left), so it would go into a sheaf and
 *    be handed out again when its step is carved; the slab word's seven spare bits, too
 *    few for the count, and every carve a compare-and-swap against remote frees. The
 *    count costs nothing anywhere: the free fast path's bound (slab.h: an index
 *    below `objects`) sends a free of an untouched object to the slow path, which
 *    reports it as an invalid pointer, which it is; walks of free lists (get_next_checked,
 *    check.c) stop at the same bound, so a link into untouched memory reads as a
 *    corrupted list. The count only grows while the slab lives: carvers store it
 *    relaxed and every other reader loads it relaxed (the free fast path of any thread
 *    included), and an object is handed out only after the store that carved it.
 *
 *    Counts. The slab word's inuse counts carved objects not on the slab's list, so
 *    untouched objects are neither in use nor listed: inuse 0 still means every object
 *    is free (the slab is discarded as before), the heap walker's live count is still
 *    inuse less the owner's lists, and it never sees an untouched object. The cache's
 *    total_objects and the walker's per-class totals count capacities.
 *
 *    Who carves. The owner of a frozen slab, when its thread freelist, local list and
 *    remote list are all empty (alloc.c, take_slab_freelist): touched memory is reused
 *    before more is touched; and a sheaf refill whose freelist ends before the sheaf is
 *    full carves on, step by step, up to what the sheaf asks for (sheaf.c, carve_more),
 *    so the sheaf's slow paths stay as rare as with whole slabs threaded: carving then
 *    touches what the sheaf takes, rounded up to a step. The owner holds what it
 *    carved, so inuse grows by the step (an atomic add: remote frees change the word
 *    meanwhile). For an unfrozen slab on a
 *    partial list, the holder of the node's list_lock (sheaf.c, take_shared): it pushes
 *    the step onto the slab's list with one compare-and-swap, like a chain of frees,
 *    with inuse unchanged. One rule ties them: an unfrozen slab with untouched objects
 *    keeps some free objects on its list, because an unfrozen slab whose list is empty
 *    is FULL - on no list, and frozen by the next free for the freeing thread (free.c),
 *    which must never happen to a slab on a partial list. So deactivate_slab carves a
 *    step when it would let go of a slab with nothing listed, and take_shared carves one
 *    before a take would empty the list. A take that empties the list of a slab with
 *    nothing left to carve takes the slab off the partial list before the
 *    compare-and-swap that shows it empty, never after: in between, a free could freeze
 *    it and link it through the room the list shares (thread_churn crashed so, about
 *    one run in ten on a busy machine). check.c reports a slab that breaks the rule.
 *
 *    Order. With USLUB_HARDEN on, each step is threaded in an order drawn afresh (start
 *    and stride, section 7's thread_freelist): within a step which object follows which
 *    is not known in advance, but the steps themselves come in address order, as in
 *    mimalloc. Every carved free object carries its free mark from the moment it is
 *    carved (section 7).
 *
 *    Debug caches carve whole slabs at creation: uslub_debug_init_object writes every
 *    slot's red zones and metadata then anyway, so there is nothing to keep untouched.
 *
 *    A program's first malloc(2048) leaves 2 of a new slab's 8 pages resident, not 8
 *    (tests/test_lazy.c checks it); only batches that make and discard a slab each round
 *    pay for the second step (tools/bench/results/).
 */
#include "hooks.h"
#include "os/os.h"
#include "slab/slab.h"

void *uslub_slab_next_free(const struct uslub_cache *c, void *object)
{
	return get_next(c, object);
}

/* ---- slabs ------------------------------------------------------------------------ */

/* Thread the freelist through a new slab's objects; it starts frozen for the owner, who
 * holds every object. */
static unsigned gcd(unsigned a, unsigned b)
{
	while (b) {
		unsigned r = a % b;
		a = b;
		b = r;
	}
	return a;
}

/* CONFIG_SLAB_FREELIST_RANDOM, without a table: objects are threaded in the order
 * start, start + step, ... (mod objects), start and step (coprime with the count) drawn
 * at random per slab, so which object follows which is not known in advance. That is
 * weaker than the kernel's shuffled sequence (the order is an arithmetic progression),
 * but needs no memory, costs the new slab one compare per object and the fast path
 * nothing. `objects` is one carving step (section 9), so the order is drawn afresh for
 * each. Returns the list's head, its last object in *tail. */
static void *thread_freelist(struct uslub_cache *c, char *first, unsigned objects, void **tail)
{
	size_t step = 1, start = 0;
	if (uslub_config.harden != USLUB_HARDEN_OFF && objects > 2) {
		uint64_t r = uslub_random();
		start = (unsigned)(r % objects);
		step = 1 + (unsigned)((r >> 32) % (objects - 1));
		while (gcd((unsigned)step, objects) != 1)
			step = step + 1 == objects ? 1 : step + 1;
	}
	size_t span = (size_t)objects * c->stride, delta = step * c->stride;
	char *end = first + span, *head = first + start * c->stride, *p = head;
	if (unlikely(c->debug)) {
		for (unsigned i = 0; i + 1 < objects; i++) {
			char *q = p + delta >= end ? p + delta - span : p + delta;
			uslub_hooks.set_next(c, p, q);
			p = q;
		}
		uslub_hooks.set_next(c, p, NULL);
		*tail = p;
		return head;
	}
	/* Each object gets its free mark too: a free of an object the slab never handed
	 * out is a double free as well. */
	if (step == 1 && start == 0) {
		for (; p + delta < end; p += delta) {
			link_set(p, p + delta);
			mark_free(p);
		}
	} else {
		/* The walk ends at the object one step before the head. */
		char *last = first + (start + objects - step) % objects * c->stride;
		while (p != last) {
			char *q = p + delta >= end ? p + delta - span : p + delta;
			link_set(p, q);
			mark_free(p);
			p = q;
		}
	}
	link_set(p, NULL);
	mark_free(p);
	*tail = p;
	return head;
}

/* The count of carved objects, in the slab's descriptor and every page's test: free's
 * fast path reads the pointer's own page's (slab.h). Relaxed: every thread that frees an object of
 * s reads it, and the objects carved are handed out only later, by whoever takes them from the
 * list, which orders the rest. The count only grows while the slab lives, so a stale
 * read is still above every object handed out. */
static void set_carved(struct page_desc *s, unsigned n)
{
	struct page_test *e = page_test_of(s);
	__atomic_store_n(&s->objects, (uint16_t)n, __ATOMIC_RELAXED);
	for (size_t i = 0; i < (1UL << s->order); i++)
		__atomic_store_n(&e[i].objects, (uint16_t)n, __ATOMIC_RELAXED);
}

static unsigned carve_count(const struct uslub_cache *c, unsigned capacity, unsigned carved)
{
	unsigned n = uslub_carve_step[c->cls];
	return n < capacity - carved ? n : capacity - carved;
}

/* An object cache's constructor, once for each object as it is carved (the kernel's
 * setup_object): freeing never writes into a constructed object (types.h, user_off), so
 * the program gets its objects back in the state it left them. */
static void construct(const struct uslub_cache *c, char *first, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		USLUB_OUT_VOID(c->ctor(first + (size_t)i * c->stride + c->user_off));
}

void *uslub_slab_carve(struct uslub_cache *c, struct page_desc *s, void **tail, unsigned *count)
{
	unsigned n = carve_count(c, uslub_slab_capacity(c, s), s->objects);
	*count = n;
	if (!n)
		return NULL;
	char *first = (char *)page_address(s) + c->offset + (size_t)s->objects * c->stride;
	if (unlikely(c->ctor))
		construct(c, first, n);
	void *head = thread_freelist(c, first, n, tail);
	set_carved(s, s->objects + n);
	return head;
}

void *uslub_slab_extend(struct uslub_cache *c, struct page_desc *s, unsigned *count)
{
	void *tail;
	void *head = uslub_slab_carve(c, s, &tail, count);
	/* The owner holds what it carved: in use, as the slab word counts. */
	if (head)
		atomic_fetch_add_explicit(&s->word, (uint64_t)*count << W_INUSE_SHIFT,
					  memory_order_relaxed);
	return head;
}

static void *init_slab(struct uslub_cache *c, struct page_desc *s, unsigned order,
		       struct uslub_thread *t)
{
	unsigned objects = uslub_cache_objects(c, order);
	char *base = page_address(s);
	for (size_t i = 1; i < (1UL << order); i++)
		s[i].head = s;
	s->order = (uint8_t)order;
	s->cls = (uint8_t)c->cls;
	/* The first step (section 9); a debug cache carves the whole slab at once. */
	unsigned carved = c->debug ? objects : carve_count(c, objects, 0);
	/* Every page answers free's object test itself (slab.h). */
	struct page_test *e = page_test_of(s);
	for (size_t i = 0; i < (1UL << order); i++) {
		e[i].start = (uint32_t)(uintptr_t)base;
		e[i].cpu_off = CPU_OFF(c->cls);
	}
	set_carved(s, carved);
	s->flags = 0;
	s->local_free = NULL;
	s->local_count = 0;
	s->next = NULL;
	atomic_store_explicit(&s->word, w_make(0, carved, W_FROZEN), memory_order_relaxed);
	/* The page allocator reads a neighbour's kind under its own lock when it merges
	 * buddies, so kind changes made outside that lock are atomic stores. */
	__atomic_store_n(&s->kind, PAGE_SLAB, __ATOMIC_RELAXED);
	__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
	__atomic_store_n(&s->head, s, __ATOMIC_RELEASE);

	char *first = base + c->offset;
	if (unlikely(c->debug))
		for (unsigned i = 0; i < objects; i++)
			uslub_hooks.init_object(c, first + (size_t)i * c->stride);
	if (unlikely(c->ctor))
		construct(c, first, carved);
	void *tail;
	void *head = thread_freelist(c, first, carved, &tail);
	if (unlikely(c->debug))
		uslub_hooks.slab_ready(c, s);

	atomic_fetch_add(&c->nr_slabs, 1);
	atomic_fetch_add(&c->nr_slabs_by_order[order], 1);
	atomic_fetch_add(&c->total_objects, objects);
	atomic_fetch_add(&uslub_slab_bytes, USLUB_PAGE_SIZE << order);
	return head;
}

/* allocate_slab: the preferred order only if it is at hand (no waiting for the lock, no
 * growing), otherwise the minimum order at once - the kernel's __GFP_NORETRY try of
 * s->oo before s->min. With USLUB_HIGH_ORDER=wait the caller blocks for the preferred
 * order instead, as the kernel did before that change. */
static struct page_desc *allocate_slab(struct uslub_cache *c, struct uslub_thread *t,
				       struct cache_cpu *cc, unsigned *order_out)
{
	struct page_desc *s = NULL;
	unsigned order = c->order;

	if (order > c->min_order) {
		s = uslub_pcp_alloc(t, t->node, order, GFP_NOWAIT);
		if (!s) {
			if (uslub_config.high_order_wait) {
				/* The pre-fix kernel: wait for the lock, grow, and at the cap
				 * hand memory back to make room - all on the caller's time. */
				stat_to(cc, c, HIGH_ORDER_STALL);
				s = uslub_pages_alloc(t->node, order, GFP_RECLAIM);
			} else {
				uslub_hooks.background_kick();
			}
		}
		if (!s) {
			stat_to(cc, c, ORDER_FALLBACK);
			order = c->min_order;
		}
	}
	if (!s)
		s = uslub_pcp_alloc(t, t->node, order, 0);
	*order_out = order;
	return s;
}

/* new_slab: a slab for the thread's cache_cpu, frozen for it; its objects in *fl. NULL when
 * no memory is left (the caller reports ENOMEM). */
struct page_desc *uslub_new_slab(struct uslub_cache *c, struct uslub_thread *t,
				 struct cache_cpu *cc, void **fl)
{
	unsigned order;
	struct page_desc *s = allocate_slab(c, t, cc, &order);
	if (!s)
		return NULL;
	stat_to(cc, c, ALLOC_SLAB);
	*fl = init_slab(c, s, order, t);
	uslub_note_in_use();
	return s;
}

void uslub_discard_slab(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	unsigned order = s->order;
	atomic_fetch_sub(&c->nr_slabs, 1);
	atomic_fetch_sub(&c->nr_slabs_by_order[order], 1);
	atomic_fetch_sub(&c->total_objects, uslub_slab_capacity(c, s));
	atomic_fetch_sub(&uslub_slab_bytes, USLUB_PAGE_SIZE << order);
	atomic_store_explicit(&s->word, 0, memory_order_relaxed);
	s->local_free = NULL;
	s->local_count = 0;
	__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);
	struct page_test *e = page_test_of(s);
	for (size_t i = 0; i < (1UL << order); i++) {
		e[i].cpu_off = 0;
		__atomic_store_n(&e[i].objects, 0, __ATOMIC_RELAXED);
	}
	stat_shared(t, c->cls, USLUB_STAT_FREE_SLAB);
	if (unlikely(c->debug))
		uslub_hooks.slab_discard(c, s);
	__atomic_store_n(&s->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	if (unlikely(c->uflags & USLUB_CACHE_TYPESAFE_BY_RCU)) {
		/* A reader may still stand on one of its objects: the memory stays this
		 * cache's until a grace period has passed (objcache.c). */
		uslub_rcu_defer_slab(s);
	} else if (t->state == THREAD_LIVE || t->state == THREAD_ORPHAN) {
		uslub_pcp_free(t, s, order);
	} else {
		uslub_pages_free(s, order);
	}
}

void *uslub_slab_object_start(struct page_desc *s, const void *p)
{
	const struct uslub_cache *c = &uslub_caches[s->cls];
	uintptr_t off = (uintptr_t)p - (uintptr_t)page_address(s);
	if (off >= (uintptr_t)__atomic_load_n(&s->objects, __ATOMIC_RELAXED) * c->stride)
		return NULL;
	uintptr_t in_slot = off % c->stride;
	/* In a debug cache, red zones and metadata are no object's inside. */
	if (in_slot < c->offset)
		return NULL;
	return (char *)p - (in_slot - c->offset);
}
