/* What debug.c and block.c share with the reports (report.c). Inside core/debug/ only. */
#ifndef USLUB_DEBUG_REPORT_H
#define USLUB_DEBUG_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct uslub_cache;
struct page_desc;

/* A report about an object whose request is not known (a free one, a broken state). */
#define REQ_UNKNOWN SIZE_MAX

/* The operation a report was found in, and the program's call site, for its last line.
 * Set just before the checks of one operation; a report ends the process, so a thread
 * that overwrites another's is harmless. */
extern __thread const char *uslub_debug_op;
extern __thread void *uslub_debug_caller;

/* The first byte in [p, p + n) that is not `val`, or NULL. */
const unsigned char *uslub_debug_first_not(const void *p, size_t n, int val);
/* The first bad byte of the red zones of an object holding `size` bytes (`val`: active or
 * inactive), or of a free object's poison; NULL when intact (debug.c). */
const unsigned char *uslub_debug_bad_redzone(const struct uslub_cache *c, void *object, size_t size,
					     int val);
const unsigned char *uslub_debug_bad_poison(const struct uslub_cache *c, void *object);

/* A debug slab is set up, or goes back: the sweep looks only at ready ones (sweep.c). */
void uslub_debug_sweep_ready(struct page_desc *s);
void uslub_debug_sweep_gone(struct page_desc *s);

/* Q: a freed object (state free, poisoned) handed to the quarantine, which keeps it and
 * frees it later; false when it does not take it (quarantine.c). */
bool uslub_quarantine_put(struct uslub_cache *c, struct page_desc *s, void *object);

/* uslub_debug_report with the object's request (`req`, or REQ_UNKNOWN) for its lines. */
__attribute__((noreturn)) void uslub_debug_report_object(const struct uslub_cache *c,
							 struct page_desc *s, void *object,
							 const char *what, const void *fault,
							 size_t req);
/* A large or huge block at p whose red zone (before p, or the rest of its span) or, freed,
 * whose poison was overwritten at `fault`; `what` says which. */
__attribute__((noreturn)) void uslub_debug_report_block(void *p, size_t size, size_t span,
							const char *what,
							const unsigned char *fault);
/* Q: large block d leaving the quarantine: its poison and red zones checked, then handed
 * back (block.c). */
void uslub_debug_block_leave(struct page_desc *d);

#pragma GCC visibility pop

#endif
