#!/usr/bin/env bash
# Build the libFuzzer targets: tests/fuzz/build.sh [OUTDIR]   (default build/fuzz)
#
# clang with -fsanitize=fuzzer,address,undefined; the core sources - every .c file under
# core/ and size_classes.c, so a new core file is picked up - compiled in with coverage
# instrumentation. Standalone: the default meson build needs no clang. Needs clang and
# libclang-rt-14-dev (Debian 12), libnuma-dev and liburcu-dev.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
OUT=${1:-$ROOT/build/fuzz}
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT/obj"

mapfile -t SRC < <(cd "$ROOT" && { echo size_classes/size_classes.c; find core -name '*.c' | sort; })
((${#SRC[@]} > 1)) || { echo "build.sh: no core sources under $ROOT/core" >&2; exit 1; }

# The generated configuration header: the meson build's when there is one, else the
# defaults (no valgrind client requests, counters on).
if [[ -f $ROOT/build/uslub_config.h ]]; then
	cp "$ROOT/build/uslub_config.h" "$OUT/uslub_config.h"
else
	printf '#define USLUB_HAVE_VALGRIND 0\n#define USLUB_STATS_ENABLED 1\n' >"$OUT/uslub_config.h"
fi

CFLAGS=(-std=gnu11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -fno-omit-frame-pointer
	-fvisibility=hidden -ftls-model=initial-exec
	-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
	-include "$ROOT/tests/fuzz/clang_compat.h"
	-I"$OUT" -I"$ROOT" -I"$ROOT/include" -I"$ROOT/core" -I"$ROOT/size_classes")
LIBS=(-lurcu-bp -lurcu-common -lnuma -lpthread)

OBJS=() PIDS=()
for src in "${SRC[@]}"; do
	obj=$OUT/obj/$(echo "$src" | tr / _).o
	if [[ ! -f $obj || $ROOT/$src -nt $obj || $ROOT/core/meson.build -nt $obj ]] ||
		[[ -n $(find "$ROOT/core" "$ROOT/size_classes" -name '*.h' -newer "$obj") ]]; then
		"$CC" "${CFLAGS[@]}" -fsanitize=fuzzer-no-link -c "$ROOT/$src" -o "$obj" &
		PIDS+=($!)
	fi
	OBJS+=("$obj")
done
for pid in "${PIDS[@]}"; do
	wait "$pid" || { rm -f "${OBJS[@]}"; echo "build.sh: compile failed" >&2; exit 1; }
done
for target in fuzz_alloc fuzz_options; do
	"$CC" "${CFLAGS[@]}" -fsanitize=fuzzer "$ROOT/tests/fuzz/$target.c" "${OBJS[@]}" \
		"${LIBS[@]}" -o "$OUT/$target"
done
echo "$OUT/fuzz_alloc $OUT/fuzz_options"
