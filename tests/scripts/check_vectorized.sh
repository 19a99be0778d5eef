#!/usr/bin/env bash
# test_gpt_vectorized (tests/gpt.cmake): every loop marked /* vec */ in the given
# sources is one GCC vectorizes when it compiles them as the AVX2 (x86-64-v3) and
# AVX-512 (x86-64-v4) clones of GPT_CLONES (examples/gpt/ops_simd.h), with the
# sources' own options: their -O3, -fno-math-errno, -fno-trapping-math.
#
#   check_vectorized.sh CC "FLAGS" SOURCE...
#
# Each source is compiled with -DZS_GPT_NO_CLONES -march=ARCH FLAGS
# -fopt-info-vec-optimized (what the clone's target attribute compiles), and each
# marked line must be reported "loop vectorized". Exit 0 pass, 1 fail, 77 skipped
# (not GCC, or not x86-64).
set -uo pipefail
cc=${1:?compiler}
flags=${2:?flags}
shift 2
[ "$(uname -m)" = x86_64 ] || { echo "skipped: not x86-64"; exit 77; }
"$cc" --version 2>/dev/null | grep -qi "gcc\|Free Software Foundation" || { echo "skipped: $cc is not GCC"; exit 77; }
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for src in "$@"; do
  marked=$(grep -n '/\* vec \*/' "$src" | cut -d: -f1)
  [ -n "$marked" ] || { echo "FAIL: $src has no loop marked /* vec */"; fail=1; continue; }
  for arch in x86-64-v3 x86-64-v4; do
    # shellcheck disable=SC2086
    if ! "$cc" -DZS_GPT_NO_CLONES -march=$arch $flags -fopt-info-vec-optimized -c "$src" -o "$tmp/x.o" \
      2>"$tmp/report"; then
      echo "FAIL: $src does not compile for $arch:"; cat "$tmp/report"; fail=1; continue
    fi
    base=$(basename "$src")
    for line in $marked; do
      if grep -q "$base:$line:[0-9]*: optimized: loop vectorized" "$tmp/report"; then
        echo "ok: $base:$line vectorized ($arch)"
      else
        echo "FAIL: $base:$line is marked /* vec */ but GCC left it scalar for $arch: $(sed -n "${line}p" "$src" | sed 's/^ *//')"
        fail=1
      fi
    done
  done
done
exit $fail
