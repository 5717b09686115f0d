#!/usr/bin/env bash
# Builds and runs the fuzz targets on stable Rust without cargo-fuzz: the same coverage
# instrumentation cargo-fuzz passes (sancov + cfg fuzzing), no sanitizer.
#   fuzz/run.sh [seconds per target, default 60] [target ...]
# Corpora start from core/src/routing/corpus/ and grow in fuzz/corpus/<target>/
# (ignored by git); crashes land in fuzz/artifacts/<target>/: add each crasher as a
# line to core/src/routing/corpus/*.txt so the replay test pins it.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tres_request comment_hints snapshot)
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR=target
# An explicit --target keeps RUSTFLAGS off build scripts (as cargo-fuzz does).
triple=$(rustc -vV | sed -n "s/^host: //p")
cargo build --release --bins --target "$triple"
seed() {
  case $1 in
    tres_request) echo requests.txt ;;
    comment_hints) echo hints.txt ;;
    snapshot) echo snapshots.txt ;;
  esac
}
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  # One seed file per corpus line.
  n=0
  while IFS= read -r line; do
    case $line in '#'*) continue ;; esac
    printf '%s' "$line" > "corpus/$t/seed-$n"; n=$((n + 1))
  done < "../core/src/routing/corpus/$(seed "$t")"
  echo "== $t: ${secs}s"
  "target/$triple/release/$t" "corpus/$t" -max_total_time="$secs" -artifact_prefix="artifacts/$t/" \
    -print_final_stats=1 2>&1 | grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added|==.*ERROR|SUMMARY)" || true
  if ls "artifacts/$t"/crash-* >/dev/null 2>&1; then echo "crash in $t: see fuzz/artifacts/$t"; exit 1; fi
done
