// gbench_c.cpp: the C registration API of gbench_c.h over Google Benchmark.
//
// A gb_state is a benchmark::State and a gb_bench a benchmark::internal::Benchmark, passed
// through C as opaque pointers; nothing is copied, so gb_keep_running costs one call on
// top of State's own loop test, the same for every allocator measured.
#include "gbench_c.h"

#include <benchmark/benchmark.h>

static benchmark::State &state(gb_state *st)
{
	return *reinterpret_cast<benchmark::State *>(st);
}

static benchmark::internal::Benchmark *bench(gb_bench *b)
{
	return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}

gb_bench *gb_register(const char *name, gb_fn fn)
{
	auto *b = benchmark::RegisterBenchmark(
	    name, [fn](benchmark::State &st) { fn(reinterpret_cast<gb_state *>(&st)); });
	return reinterpret_cast<gb_bench *>(b);
}

gb_bench *gb_arg(gb_bench *b, int64_t arg)
{
	bench(b)->Arg(arg);
	return b;
}

gb_bench *gb_arg_name(gb_bench *b, const char *name)
{
	bench(b)->ArgName(name);
	return b;
}

gb_bench *gb_use_real_time(gb_bench *b)
{
	bench(b)->UseRealTime();
	return b;
}

bool gb_keep_running(gb_state *st)
{
	return state(st).KeepRunning();
}

bool gb_keep_running_batch(gb_state *st, int64_t batch)
{
	return state(st).KeepRunningBatch(batch);
}

int64_t gb_range(gb_state *st, int index)
{
	return state(st).range(static_cast<std::size_t>(index));
}

void gb_set_items_processed(gb_state *st, int64_t items)
{
	state(st).SetItemsProcessed(items);
}

int64_t gb_iterations(gb_state *st)
{
	return static_cast<int64_t>(state(st).iterations());
}

void gb_skip_with_error(gb_state *st, const char *msg)
{
	state(st).SkipWithError(msg);
}

int gb_main(int argc, char **argv)
{
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
