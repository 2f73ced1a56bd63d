#!/usr/bin/env bash
# The memory benchmark at the MeSP paper's settings and around them (Qwen2.5 shapes with random
# weights, LoRA on q,k,v,o,gate,up,down, batch 1), one JSON per run in target/bench/, then the
# tables (scripts/bench-tables.py) that README.md quotes. Takes about an hour on 2 CPU cores
# with lavapipe; a GPU is much faster. Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# WEBTUNE_BIN: a copy of the binary to use (so rebuilding during the hour changes nothing).
w=${WEBTUNE_BIN:-target/release/webtune}
[ -n "${WEBTUNE_BIN:-}" ] || cargo build --release --bin webtune
out=target/bench
mkdir -p "$out"
run() { # name, args...
  local name=$1; shift
  if [ -f "$out/$name.json" ] && [ -z "${FORCE:-}" ]; then echo "have $out/$name.json"; return; fi
  echo "== $name: webtune bench $*"
  "$w" bench "$@" --json "$out/$name.json.tmp" | tee "$out/$name.txt"
  mv "$out/$name.json.tmp" "$out/$name.json"
}
# The paper's configuration: sgd, q4 weights, rank 8, seq 256; every mode, two steps (the
# second is timed; the first compiles pipelines).
run paper-0.5b-256 --shape qwen2.5-0.5b --seq 256 --rank 8 --optimizer sgd --weights q4 --modes mesp,mebp,full,mezo --steps 2
# Our default: AdamW, bf16 weights.
run adamw-bf16-0.5b-256 --shape qwen2.5-0.5b --seq 256 --rank 8 --optimizer adamw --weights bf16 --modes mesp,mebp
# Sequence sweep.
for seq in 128 512 1024; do
  run paper-0.5b-$seq --shape qwen2.5-0.5b --seq $seq --rank 8 --optimizer sgd --weights q4 --modes mesp,mebp
done
# Rank sweep.
for r in 4 16 32; do
  run rank$r-0.5b-256 --shape qwen2.5-0.5b --seq 256 --rank $r --optimizer sgd --weights q4 --modes mesp,mebp
done
# Bigger shapes.
run paper-1.5b-256 --shape qwen2.5-1.5b --seq 256 --rank 8 --optimizer sgd --weights q4 --modes mesp,mebp
run paper-3b-256 --shape qwen2.5-3b --seq 256 --rank 8 --optimizer sgd --weights q4 --modes mesp,mebp
python3 scripts/bench-tables.py "$out"
