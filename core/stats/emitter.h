/* The emitter under stats/emit.c: the calls that write one figure either as a line of the
 * table or as a JSON item, into a sink (sink.c) (jemalloc's emitter.h is the model). Only
 * emit.c includes it. */
#ifndef USLUB_STATS_EMITTER_H
#define USLUB_STATS_EMITTER_H

#include "os/print.h"
#include "stats/snapshot.h"
#include "types.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- the emitter ------------------------------------------------------------------ */

enum emit_mode { EMIT_TABLE, EMIT_JSON };

#define EMIT_DEPTH 6

struct emitter {
	struct sink sink;
	enum emit_mode mode;
	bool quiet;		      /* table output held back (a line only some runs have) */
	unsigned depth;		      /* JSON objects and arrays open */
	bool item[EMIT_DEPTH];	      /* an item written at this depth: the next needs a comma */
	const char *line[EMIT_DEPTH]; /* items at this depth start a line with this indent */
	const char *next_line;	      /* ... and so does the next item, once */
};

static inline void emit_v(struct emitter *e, const char *fmt, va_list ap)
{
	uslub_sink_write(&e->sink, fmt, ap);
}

/* Raw output, in either mode. */
__attribute__((format(printf, 2, 3))) static inline void emit(struct emitter *e, const char *fmt,
							      ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_v(e, fmt, ap);
	va_end(ap);
}

/* Text of the table only. */
__attribute__((format(printf, 2, 3))) static inline void table(struct emitter *e, const char *fmt,
							       ...)
{
	if (e->mode != EMIT_TABLE || e->quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	emit_v(e, fmt, ap);
	va_end(ap);
}

/* The start of a JSON item: the comma after the one before, the line it starts, and its
 * key (NULL in an array). */
static inline void json_item(struct emitter *e, const char *key)
{
	unsigned d = e->depth;
	const char *indent = e->next_line ? e->next_line : e->line[d];
	emit(e, "%s", e->item[d] ? "," : "");
	if (indent)
		emit(e, "\n%s", indent);
	else if (e->item[d])
		emit(e, " ");
	e->item[d] = true;
	e->next_line = NULL;
	if (key)
		emit(e, "\"%s\": ", key);
}

/* An object ('{') or array ('['), whose items start a line with `indent` (NULL: none). */
static inline void json_open(struct emitter *e, const char *key, char bracket, const char *indent)
{
	if (e->mode != EMIT_JSON)
		return;
	json_item(e, key);
	emit(e, "%c", bracket);
	e->depth++;
	e->item[e->depth] = false;
	e->line[e->depth] = indent;
}

static inline void json_close(struct emitter *e, char bracket)
{
	if (e->mode != EMIT_JSON)
		return;
	e->depth--;
	emit(e, "%c", bracket);
}

/* From here on, the items of the open level start a line with `indent`. */
static inline void json_lines(struct emitter *e, const char *indent)
{
	e->line[e->depth] = indent;
}

/* The next item starts a line with `indent`. */
static inline void json_break(struct emitter *e, const char *indent)
{
	e->next_line = indent;
}

/* One JSON item: its key, then the value as `fmt` writes it. */
__attribute__((format(printf, 3, 4))) static inline void json_kv(struct emitter *e, const char *key,
								 const char *fmt, ...)
{
	if (e->mode != EMIT_JSON)
		return;
	json_item(e, key);
	va_list ap;
	va_start(ap, fmt);
	emit_v(e, fmt, ap);
	va_end(ap);
}

#define json_u64(e, key, v) json_kv(e, key, "%lu", (uint64_t)(v))
#define json_str(e, key, v) json_kv(e, key, "\"%s\"", v)

/* What a figure counts: the table shows bytes and pages in KiB, JSON as they are. */
enum unit { COUNT, BYTES, PAGES };

#define KIB(x) ((x) >> 10)

static inline uint64_t shown(enum unit u, uint64_t v)
{
	return u == BYTES ? KIB(v) : u == PAGES ? KIB(v << USLUB_PAGE_SHIFT) : v;
}

/* One figure: `"key": v` in JSON; in the table `text`, a format with one %lu. A NULL key
 * or text leaves the figure out of that format. */
static inline void emit_kv(struct emitter *e, const char *key, const char *text, enum unit u,
			   uint64_t v)
{
	if (e->mode == EMIT_JSON && key)
		json_u64(e, key, v);
	else if (e->mode == EMIT_TABLE && text && !e->quiet)
		emit(e, text, shown(u, v));
}

/* A row of figures: `"key": [a, b]` in JSON; in the table `text`, then " %lu" each. */
static inline void emit_array(struct emitter *e, const char *key, const char *text,
			      const uint64_t *v, unsigned n)
{
	if (e->mode == EMIT_JSON && key) {
		json_item(e, key);
		emit(e, "[");
		for (unsigned k = 0; k < n; k++)
			emit(e, "%s%lu", k ? ", " : "", v[k]);
		emit(e, "]");
	} else if (e->mode == EMIT_TABLE && text && !e->quiet) {
		emit(e, "%s", text);
		for (unsigned k = 0; k < n; k++)
			emit(e, " %lu", v[k]);
	}
}

#endif
