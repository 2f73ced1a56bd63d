#!/usr/bin/env bash
# Fuzz every parser a user's files reach (fuzz/harness.rs lists them) with cargo fuzz
# (libFuzzer, nightly Rust), each for a bounded time:
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
#
# Starts from fuzz/seeds/<target>/ (valid inputs) and fuzz/corpus/<target>/ (what earlier runs
# kept), minimizes the corpus afterwards, and copies every crash, timeout or out-of-memory
# input to fuzz/regressions/<target>/, where `cargo test --test integration fuzz_corpus::` (part of
# scripts/test.sh) replays it. Exits non-zero when anything was found. Prints executions per
# target. Inputs are capped at 64 KiB, memory at 2 GiB, one input's time at 10 s.
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"

secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^webtune-fuzz$')
fi

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version '^0.13'

# The seeds that are files (GGUF), then the ones the harness makes, written out for libFuzzer.
cargo test -q --lib write_fuzz_seeds -- --ignored >/dev/null
cargo test -q --test integration fuzz_corpus::write_seeds -- --ignored >/dev/null

cargo +nightly fuzz build
found=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/artifacts/$t"
  # Findings of earlier runs are in fuzz/regressions already.
  rm -f "fuzz/artifacts/$t"/crash-* "fuzz/artifacts/$t"/timeout-* "fuzz/artifacts/$t"/oom-* "fuzz/artifacts/$t"/leak-*
  log="fuzz/artifacts/$t/last-run.log"
  echo "=== $t: $secs s"
  set +e
  cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  summary+=("$t: ${execs:-?} executions, exit $rc")
  for f in "fuzz/artifacts/$t"/crash-* "fuzz/artifacts/$t"/timeout-* "fuzz/artifacts/$t"/oom-* "fuzz/artifacts/$t"/leak-*; do
    [ -e "$f" ] || continue
    mkdir -p "fuzz/regressions/$t"
    cp "$f" "fuzz/regressions/$t/"
    echo "found: $f (kept in fuzz/regressions/$t/)"
    found=1
  done
  if [ $rc -ne 0 ] && [ $found -eq 0 ]; then
    tail -30 "$log"
    found=1
  fi
  # Keep the corpus small: only inputs that add coverage.
  cargo +nightly fuzz cmin "$t" "fuzz/corpus/$t" -- -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    >"fuzz/artifacts/$t/cmin.log" 2>&1 || echo "($t: corpus minimization failed; see fuzz/artifacts/$t/cmin.log)"
done
echo
printf '%s\n' "${summary[@]}"
exit $found
