/* The statistics written out: one walk over a snapshot that writes either the table or
 * JSON (jemalloc's emitter.c is the model). Each figure is named once, with its JSON key
 * and its words in the table, so a new one is added in one place.
 *
 * 1. Sinks (sink.c). The allocator's own formatter, into an fd or a memory buffer (the
 *    live page), never stdio: a dump allocates nothing from the heap it describes.
 * 2. JSON. A compact layout rather than one item a line: items are separated by ", ", and
 *    a level can ask that its items start a line (the top level, the caches, the nodes),
 *    or one item can (a cache's counters).
 * 3. The table. Each cache is a row (the columns below), sorted by memory, the unused ones
 *    left out; the other figures are lines of text, each figure's words beside it. The
 *    table has the totals at its foot, JSON near its head. tools/stats/uslub_stats.py
 *    prints the same table from a JSON dump, so a change to it is made there too. */
#include "stats/emitter.h"
#include "stats/live.h"
#include "stats/snapshot.h"
#include "stats/stats.h"

#include "os/options.h"
#include "slab/slab.h"
#include "os/print.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the caches' table ------------------------------------------------------------ */

/* The caches' table: column, heading, width (negative: left-aligned), unit. */
/* clang-format off: a table, aligned by hand */
#define TABLE_COLUMNS(X)                                                                           \
	X(NAME, "# name", -14, COUNT)                                                              \
	X(ACTIVE, "active", 9, COUNT)                                                              \
	X(TOTAL, "total", 9, COUNT)                                                                \
	X(USE, "use", 4, COUNT)                                                                    \
	X(OBJSIZE, "objsize", 7, COUNT)                                                            \
	X(OBJPER, "objper", 6, COUNT)                                                              \
	X(ORDER, "order", 5, COUNT)                                                                \
	X(SLABS, "slabs", 7, COUNT)                                                                \
	X(PARTIAL, "partial", 7, COUNT)                                                            \
	X(MEM, "mem_KiB", 9, BYTES)                                                                \
	X(WASTE, "waste_KiB", 9, COUNT)                                                            \
	X(ALLOCS, "allocs", 10, COUNT)                                                             \
	X(FREES, "frees", 10, COUNT)                                                               \
	X(SLOW_AL, "slow_al", 9, COUNT)                                                            \
	X(SLOW_FR, "slow_fr", 9, COUNT)                                                            \
	X(FALLBACK, "fallback", 8, COUNT)
/* clang-format on */

enum column {
#define X(id, head, width, unit) COL_##id,
	TABLE_COLUMNS(X)
#undef X
	    NR_COLUMNS,
	NO_COLUMN = NR_COLUMNS /* a figure of the JSON only */
};

static const struct {
	const char *head;
	int width;
	enum unit unit;
} columns[NR_COLUMNS] = {
#define X(id, head, width, unit) {head, width, unit},
    TABLE_COLUMNS(X)
#undef X
};

/* The counters the table shows. */
static enum column stat_column(unsigned item)
{
	switch (item) {
	case USLUB_STAT_ALLOC_SLOWPATH:
		return COL_SLOW_AL;
	case USLUB_STAT_FREE_SLOWPATH:
		return COL_SLOW_FR;
	case USLUB_STAT_ORDER_FALLBACK:
		return COL_FALLBACK;
	default:
		return NO_COLUMN;
	}
}

struct row {
	char cell[NR_COLUMNS][32];
};

/* A cell of the table, whatever the JSON has. */
__attribute__((format(printf, 4, 5))) static void table_cell(struct emitter *e, struct row *r,
							     enum column col, const char *fmt, ...)
{
	if (e->mode != EMIT_TABLE)
		return;
	struct uslub_out t;
	uslub_out_init(&t, -1);
	va_list ap;
	va_start(ap, fmt);
	uslub_vprintf(&t, fmt, ap);
	va_end(ap);
	size_t n = t.len < sizeof(r->cell[col]) - 1 ? t.len : sizeof(r->cell[col]) - 1;
	memcpy(r->cell[col], t.buf, n);
	r->cell[col][n] = '\0';
}

/* One figure of a cache: `"key": v` in JSON, the cell `col` of its row in the table. */
static void emit_cell(struct emitter *e, struct row *r, enum column col, const char *key,
		      uint64_t v)
{
	if (e->mode == EMIT_JSON)
		json_u64(e, key, v);
	else if (col != NO_COLUMN)
		table_cell(e, r, col, "%lu", shown(columns[col].unit, v));
}

/* A line of the table, the cells padded to their columns' widths: a cache's row, or the
 * headings (r NULL). */
static void table_row(struct emitter *e, const struct row *r)
{
	static const char spaces[] = "                                ";
	if (e->mode != EMIT_TABLE)
		return;
	for (unsigned k = 0; k < NR_COLUMNS; k++) {
		const char *cell = r ? r->cell[k] : columns[k].head;
		int w = columns[k].width < 0 ? -columns[k].width : columns[k].width;
		int len = (int)strlen(cell);
		const char *fill = spaces + sizeof(spaces) - 1 - (w > len ? w - len : 0);
		if (columns[k].width < 0)
			table(e, "%s%s%s", k ? " " : "", cell, fill);
		else
			table(e, "%s%s%s", k ? " " : "", fill, cell);
	}
	table(e, "\n");
}

/* ---- the layout ------------------------------------------------------------------- */

static void emit_header(struct emitter *e)
{
	const struct uslub_config *cf = &uslub_config;
	table(e, "uslub: slabinfo for pid %d, caches by memory\n", (int)getpid());
	if (e->mode != EMIT_JSON)
		return;
	struct timespec ts;
	uslub_os_clock(CLOCK_REALTIME, &ts);
	json_open(e, NULL, '{', NULL);
	json_u64(e, "version", 1);
	json_u64(e, "pid", (uint64_t)getpid());
	json_kv(e, "time", "%lu.%03lu", (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec / 1000000);
	json_lines(e, " ");
	json_open(e, "config", '{', NULL);
	json_u64(e, "min_order", cf->min_order);
	json_u64(e, "max_order", cf->max_order);
	json_u64(e, "min_objects", cf->min_objects);
	json_str(e, "high_order", cf->high_order_wait ? "wait" : "nowait");
	json_u64(e, "mem_limit", (uint64_t)cf->mem_limit);
	json_kv(e, "stats_enabled", "%s", USLUB_STATS_ENABLED ? "true" : "false");
	json_u64(e, "page_size", (uint64_t)USLUB_PAGE_SIZE);
	json_u64(e, "max_page_order", (unsigned)USLUB_MAX_ORDER);
	json_u64(e, "nodes", uslub_stats_nr_nodes());
	json_u64(e, "background", cf->background);
	json_str(e, "numa", cf->numa[0] ? cf->numa : "auto");
	json_u64(e, "stats", cf->stats);
	json_str(e, "stats_file", cf->stats_file);
	json_close(e, '}');
}

static void emit_totals(struct emitter *e, const struct snap *s)
{
	json_open(e, "totals", '{', NULL);
	table(e, "uslub: totals:");
	emit_kv(e, "mapped", " mapped %lu KiB", BYTES, s->tot.mapped);
	emit_kv(e, "peak_mapped", " (peak %lu)", BYTES, s->tot.peak_mapped);
	emit_kv(e, "in_use", ", in use %lu KiB", BYTES, s->tot.in_use);
	emit_kv(e, "peak_in_use", " (peak %lu)", BYTES, s->tot.peak_in_use);
	emit_kv(e, "slab_bytes", ", slabs %lu KiB", BYTES, s->slab_bytes);
	emit_kv(e, "large_bytes", ", large %lu KiB", BYTES, s->large_bytes);
	emit_kv(e, "huge", ", huge %lu KiB", BYTES, s->tot.huge);
	emit_kv(e, "free_pages", ", free pages %lu KiB", BYTES, s->tot.free_pages);
	emit_kv(e, "returned", ", returned %lu KiB\n", BYTES, s->tot.returned);
	emit_kv(e, "requested_estimate", "uslub: requested ~%lu KiB", BYTES, s->requested);
	emit_kv(e, "sampled_in_use", " of %lu KiB handed out from sampled caches", BYTES,
		s->sampled_in_use);
	emit_kv(e, "threads", "; threads %lu\n", COUNT, s->threads);
	emit_kv(e, "rcu_pending_objects", "uslub: rcu: pending objects %lu", COUNT,
		s->rcu_pending_objects);
	emit_kv(e, "rcu_pending_slabs", ", slabs %lu", COUNT, s->rcu_pending_slabs);
	emit_kv(e, "rcu_batches", ", batches %lu", COUNT, s->rcu_batches);
	emit_kv(e, "rcu_freed_objects", ", freed %lu\n", COUNT, s->rcu_freed_objects);
	emit_kv(e, "threads_reaped", NULL, COUNT,
		atomic_load_explicit(&uslub_threads_reaped, memory_order_relaxed));
	emit_kv(e, "threads_parked", NULL, COUNT,
		atomic_load_explicit(&uslub_threads_parked, memory_order_relaxed));
	if (s->have_smaps) {
		emit_kv(e, "resident", "uslub: resident: process %lu KiB", BYTES, s->smaps.rss);
		emit_kv(e, "resident_ours", ", ours %lu KiB", BYTES, s->smaps.our_rss);
		emit_kv(e, "anon_huge", NULL, BYTES, s->smaps.anon_huge);
		emit_kv(e, "anon_huge_ours", "; huge-page backed: ours %lu KiB", BYTES,
			s->smaps.our_anon_huge);
		table(e, ", process %lu KiB\n", KIB(s->smaps.anon_huge));
	}
	json_close(e, '}');
}

/* The names merged into a cache (SLUB's aliases): a JSON array, and in the table after
 * the row's name. */
static void emit_alias(const struct uslub_cache *a, void *arg)
{
	struct emitter *e = arg;
	json_item(e, NULL);
	emit(e, "\"%s\"", a->name);
}

static void emit_cache(struct emitter *e, const struct snap *s, unsigned i)
{
	unsigned nn = uslub_stats_nr_nodes();
	const struct uslub_cache *c = &uslub_caches[i];
	const struct cache_snap *f = &s->c[i];
	uint64_t partial = 0;
	for (unsigned n = 0; n < nn; n++)
		partial += f->partial[n];
	struct row r;
	json_open(e, NULL, '{', NULL);
	json_str(e, "name", c->name);
	table_cell(e, &r, COL_NAME, "%s%s", c->name, c->aliases ? "+" : "");
	if (e->mode == EMIT_JSON && c->aliases) {
		json_open(e, "aliases", '[', NULL);
		uslub_objcache_aliases(c, emit_alias, e);
		json_close(e, ']');
	}
	emit_cell(e, &r, COL_OBJSIZE, "object_size", c->size);
	emit_cell(e, &r, NO_COLUMN, "order", c->order);
	emit_cell(e, &r, NO_COLUMN, "min_order", c->min_order);
	emit_cell(e, &r, COL_OBJPER, "objects_per_slab", c->objects);
	emit_cell(e, &r, NO_COLUMN, "min_objects_per_slab", c->min_objects);
	emit_cell(e, &r, COL_SLABS, "slabs", f->slabs);
	emit_array(e, "slabs_by_order", NULL, f->by_order, NORDERS);
	emit_cell(e, &r, COL_ACTIVE, "active_objects", f->active);
	emit_cell(e, &r, COL_TOTAL, "total_objects", f->total);
	emit_cell(e, &r, COL_PARTIAL, "partial_slabs", partial);
	emit_array(e, "partial_slabs_by_node", NULL, f->partial, nn);
	emit_cell(e, &r, COL_MEM, "memory_bytes", f->memory);
	emit_cell(e, &r, NO_COLUMN, "handed_out_bytes", f->handed_out);
	emit_cell(e, &r, NO_COLUMN, "requested_bytes", f->requested);
	json_break(e, "   ");
	json_open(e, "counters", '{', NULL);
	for (unsigned k = 0; k < USLUB_NR_STATS; k++)
		emit_cell(e, &r, stat_column(k), uslub_stat_names[k], f->stat[k]);
	json_close(e, '}');
	json_close(e, '}');
	/* The table's own columns. */
	table_cell(e, &r, COL_USE, "%3lu%%", f->total ? f->active * 100 / f->total : 0);
	table_cell(e, &r, COL_ORDER, "%u/%u", c->order, c->min_order);
	if (f->stat[USLUB_STAT_SAMPLE_REQUESTS])
		table_cell(e, &r, COL_WASTE, "%lu", KIB(f->handed_out - f->requested));
	else
		table_cell(e, &r, COL_WASTE, "-");
	table_cell(e, &r, COL_ALLOCS, "%lu",
		   f->stat[USLUB_STAT_ALLOC_FASTPATH] + f->stat[USLUB_STAT_ALLOC_SLOWPATH]);
	table_cell(e, &r, COL_FREES, "%lu",
		   f->stat[USLUB_STAT_FREE_FASTPATH] + f->stat[USLUB_STAT_FREE_SLOWPATH]);
	table_row(e, &r);
}

/* Caches by memory, largest first (insertion sort: 32 entries, and no allocation). */
static void sort_by_memory(const struct snap *s, unsigned idx[USLUB_NR_CACHES])
{
	for (unsigned i = 0; i < s->nr_caches; i++) {
		unsigned j = i;
		for (; j > 0 && s->c[idx[j - 1]].memory < s->c[i].memory; j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
}

/* JSON has every cache in class order; the table those in use, by memory. */
static void emit_caches(struct emitter *e, const struct snap *s)
{
	unsigned idx[USLUB_NR_CACHES];
	for (unsigned i = 0; i < s->nr_caches; i++)
		idx[i] = i;
	if (e->mode == EMIT_TABLE)
		sort_by_memory(s, idx);
	table_row(e, NULL);
	json_open(e, "caches", '[', "  ");
	for (unsigned j = 0; j < s->nr_caches; j++) {
		const struct cache_snap *f = &s->c[idx[j]];
		if (!uslub_cache_shown(idx[j]))
			continue;
		bool used =
		    f->stat[USLUB_STAT_ALLOC_FASTPATH] + f->stat[USLUB_STAT_ALLOC_SLOWPATH] ||
		    f->slabs;
		if (used || e->mode == EMIT_JSON)
			emit_cache(e, s, idx[j]);
	}
	json_close(e, ']');
	uint64_t by_order[NORDERS] = {0};
	for (unsigned i = 0; i < s->nr_caches; i++)
		for (unsigned k = 0; k < NORDERS; k++)
			by_order[k] += s->c[i].by_order[k];
	emit_array(e, NULL, "uslub: slabs by order:", by_order, NORDERS);
	table(e, "\n");
}

static void emit_nodes(struct emitter *e, const struct snap *s)
{
	unsigned nn = uslub_stats_nr_nodes();
	json_open(e, "nodes", '[', "  ");
	for (unsigned n = 0; n < nn; n++) {
		const struct node_snap *ns = &s->n[n];
		uint64_t partial = 0;
		for (unsigned i = 0; i < s->nr_caches; i++)
			partial += s->c[i].partial[n];
		json_open(e, NULL, '{', NULL);
		/* The free blocks open the table's line and close the JSON object. */
		table(e, "uslub: page allocator node %u: free blocks by order:", n);
		emit_array(e, NULL, "", ns->free_blocks, NORDERS);
		json_u64(e, "node", n);
		json_u64(e, "partial_slabs", partial);
		emit_kv(e, "free_pages", "; free %lu KiB", PAGES, ns->free_pages);
		emit_kv(e, "warm_free_pages", " (warm %lu KiB)", PAGES, ns->warm_free_pages);
		emit_kv(e, "regions", NULL, COUNT, ns->regions);
		emit_kv(e, "grows", "; grows %lu", COUNT, ns->grows);
		emit_kv(e, "nowait_misses", ", no-wait misses %lu", COUNT, ns->nowait_misses);
		emit_kv(e, "reclaims", NULL, COUNT, ns->reclaims);
		emit_kv(e, "large_runs", ", large runs %lu", COUNT, ns->runs);
		emit_kv(e, "extent_hits", ", kept-run hits %lu", COUNT, ns->extent_hits);
		emit_kv(e, "extent_flushes", NULL, COUNT, ns->extent_flushes);
		emit_kv(e, "moved_bytes", NULL, BYTES, ns->moved);
		emit_kv(e, "returned_bytes", ", returned %lu KiB\n", BYTES, ns->released);
		json_break(e, "   ");
		/* The table's second line only where there is more than one node. */
		e->quiet = nn < 2;
		table(e, "uslub: node %u:", n);
		emit_kv(e, "local_partial_hits", " local partial hits %lu", COUNT,
			ns->local_partial_hits);
		emit_kv(e, "get_any_partial_calls", ", get_any_partial calls %lu", COUNT,
			ns->any_partial_calls);
		emit_kv(e, "nodes_tried", ", nodes tried %lu", COUNT, ns->any_partial_tried);
		emit_kv(e, "nodes_tried_again", " (again %lu)", COUNT, ns->any_partial_again);
		emit_kv(e, "remote_slabs", ", remote slabs %lu", COUNT, ns->remote_slabs);
		emit_kv(e, "remote_objects", NULL, COUNT, ns->remote_objects);
		emit_array(e, "search_order", "; search order", ns->search_order, nn - 1);
		table(e, "\n");
		e->quiet = false;
		emit_array(e, "free_blocks", NULL, ns->free_blocks, NORDERS);
		json_close(e, '}');
	}
	json_close(e, ']');
}

static void emit_page_allocator(struct emitter *e, const struct snap *s)
{
	unsigned nn = uslub_stats_nr_nodes();
	uint64_t free_blocks[NORDERS] = {0}, nowait = 0, grows = 0, calls = 0, reclaims = 0;
	uint64_t moved = 0;
	for (unsigned n = 0; n < nn; n++) {
		for (unsigned k = 0; k < NORDERS; k++)
			free_blocks[k] += s->n[n].free_blocks[k];
		nowait += s->n[n].nowait_misses;
		grows += s->n[n].grows;
		calls += s->n[n].release_calls;
		reclaims += s->n[n].reclaims;
		moved += s->n[n].moved;
	}
	json_open(e, "page_allocator", '{', NULL);
	emit_array(e, "free_blocks", NULL, free_blocks, NORDERS);
	emit_kv(e, "nowait_misses", NULL, COUNT, nowait);
	emit_kv(e, "grows", NULL, COUNT, grows);
	emit_kv(e, "reclaims", NULL, COUNT, reclaims);
	emit_kv(e, "returned_bytes", NULL, BYTES, s->tot.returned);
	emit_kv(e, "release_calls", NULL, COUNT, calls);
	emit_kv(e, "moved_bytes", NULL, BYTES, moved);
	emit_kv(e, "pcp_bytes", "uslub: thread page caches: %lu KiB;", BYTES,
		s->pcp_pages << USLUB_PAGE_SHIFT);
	/* The threads' page caches, one array by order (0..3) per counter. */
	for (unsigned k = 0; k < USLUB_NR_PCP_STATS; k++) {
		table(e, "%s %s by order", k ? "," : "", uslub_pcp_stat_names[k]);
		emit_array(e, uslub_pcp_stat_names[k], "", s->pcp[k], PCP_ORDERS);
	}
	/* The threads' medium-block caches (slab/medium.c). */
	emit_kv(e, "medium_bytes", "\nuslub: thread medium-block caches: %lu KiB", BYTES,
		s->medium_pages << USLUB_PAGE_SHIFT);
	emit_kv(e, "depot_bytes", ", depots %lu KiB", BYTES, s->depot_pages << USLUB_PAGE_SHIFT);
	for (unsigned k = 0; k < USLUB_NR_MEDIUM_STATS; k++) {
		table(e, "%s %s", k ? "," : ";", uslub_medium_stat_names[k]);
		emit_kv(e, uslub_medium_stat_names[k], " %lu", COUNT, s->medium[k]);
	}
	table(e, "\n");
	json_close(e, '}');
}

/* lock_stat.h: per kind of lock, waits and trylock failures. */
static void emit_locks(struct emitter *e, const struct snap *s)
{
	json_open(e, "locks", '{', NULL);
	table(e, "uslub: lock contention (waits/trylock failures):");
	for (unsigned k = 0; k < USLUB_NR_LOCKS; k++) {
		json_open(e, uslub_lock_names[k], '{', NULL);
		table(e, "%s %s", k ? "," : "", uslub_lock_names[k]);
		emit_kv(e, "waits", " %lu", COUNT, s->lock_waits[k]);
		emit_kv(e, "trylock_failures", "/%lu", COUNT, s->lock_trylock_failures[k]);
		json_close(e, '}');
	}
	table(e, "\n");
	json_close(e, '}');
}

static void emit_stats(struct emitter *e, const struct snap *s)
{
	emit_header(e);
	if (e->mode == EMIT_JSON)
		emit_totals(e, s);
	emit_caches(e, s);
	emit_nodes(e, s);
	emit_page_allocator(e, s);
	emit_locks(e, s);
	if (e->mode == EMIT_TABLE)
		emit_totals(e, s);
	else
		emit(e, "\n}\n");
}

void uslub_stats_emit(int fd, int json)
{
	struct snap s;
	uslub_stats_snap(&s, true);
	struct emitter e = {0};
	e.mode = json ? EMIT_JSON : EMIT_TABLE;
	uslub_sink_fd(&e.sink, fd);
	emit_stats(&e, &s);
	uslub_sink_end(&e.sink);
}

size_t uslub_stats_format_json(char *buf, size_t cap, bool with_smaps)
{
	/* The live page reads smaps only now and then (live.c); in between it shows the
	 * last figures. Only the live thread comes here. */
	static struct uslub_os_smaps last;
	static int have_last;
	struct snap s;
	uslub_stats_snap(&s, with_smaps);
	if (with_smaps) {
		last = s.smaps;
		have_last = s.have_smaps;
	} else {
		s.smaps = last;
		s.have_smaps = have_last;
	}
	struct emitter e = {0};
	e.mode = EMIT_JSON;
	uslub_sink_mem(&e.sink, buf, cap);
	emit_stats(&e, &s);
	return e.sink.overflow ? 0 : e.sink.len;
}
