/* gbench_c.h: Google Benchmark for benchmarks written in C.
 *
 * Google Benchmark is a C++ library; gbench_c.cpp wraps the few calls the micro-benchmarks
 * need behind C functions, so the cases themselves stay in C like the rest of uslub.
 *
 *	static void bm_pair(gb_state *st)
 *	{
 *		size_t n = (size_t)gb_range(st, 0);
 *		while (gb_keep_running(st))
 *			free(malloc(n));
 *	}
 *	...
 *	gb_arg(gb_register("pair", bm_pair), 64);
 *	return gb_main(argc, argv);
 */
#ifndef USLUB_GBENCH_C_H
#define USLUB_GBENCH_C_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gb_state gb_state; /* benchmark::State */
typedef struct gb_bench gb_bench; /* benchmark::internal::Benchmark */
typedef void (*gb_fn)(gb_state *st);

/* Registers fn under name; the handle takes arguments (one run per gb_arg). */
gb_bench *gb_register(const char *name, gb_fn fn);
gb_bench *gb_arg(gb_bench *b, int64_t arg);
gb_bench *gb_arg_name(gb_bench *b, const char *name);
/* Rates from wall-clock time instead of the calling thread's CPU time: for cases whose
 * work is partly done by a thread of their own. */
gb_bench *gb_use_real_time(gb_bench *b);

/* One iteration, or `batch` iterations at once where the loop body does a batch. */
bool gb_keep_running(gb_state *st);
bool gb_keep_running_batch(gb_state *st, int64_t batch);
int64_t gb_range(gb_state *st, int index);
void gb_set_items_processed(gb_state *st, int64_t items);
int64_t gb_iterations(gb_state *st);
void gb_skip_with_error(gb_state *st, const char *msg);

/* Initialise from argv (--benchmark_filter=..., --benchmark_format=json, ...), run. */
int gb_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
