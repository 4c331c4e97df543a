#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz) as CI runs them: a clang build tree
# beside the gcc one, built for the fuzzers alone, then each fuzzer's test
# fuzz.<target>: CROWN_FUZZ_SECONDS (60) from its corpus, failing on any
# crash, leak, UB or input slower than 10 s.
# Usage: fuzz_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
fuzz_dir=$2/fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v clang++ >/dev/null || { echo "FAIL: no clang++ (launch/install-deps installs it)"; exit 1; }

echo "== configure $fuzz_dir with clang"
cmake -S "$source_dir" -B "$fuzz_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DCROWN_BUILD_FUZZ=ON -DCROWN_BUILD_TESTS=OFF \
  -DCROWN_BUILD_BENCH=OFF -DCROWN_WITH_PYTHON=OFF -DCROWN_WITH_CUDA=OFF -DCROWN_WITH_NCCL=OFF \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; echo "FAIL: configure"; exit 1; }

echo "== build the fuzzers"
cmake --build "$fuzz_dir" --target crown_fuzzers -j "$(nproc)" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; echo "FAIL: build"; exit 1; }

echo "== fuzz each target"
if ! ctest --test-dir "$fuzz_dir" -L fuzz --output-on-failure; then
  echo "FAIL: a fuzzer failed; its input is kept in $fuzz_dir/tests/fuzz/<target>/ (crash-*," \
       "leak-*, timeout-*); rerun it with $fuzz_dir/tests/fuzz/fuzz_<target> FILE"
  exit 1
fi
echo "fuzz_test: PASS"
