#!/usr/bin/env bash
# The npm package `webtune`: the wasm engine (wasm-pack, release, --target web → npm/wasm/),
# the TypeScript client and worker (tsc: npm/src → npm/dist/), and the tarball
# target/npm/webtune-<version>.tgz (npm pack). Safe to run again: each step redoes only its
# own outputs (cargo builds incrementally).
#
#   bash scripts/build-npm.sh               everything; prints the tarball's path
#   bash scripts/build-npm.sh --wasm-only   only npm/wasm/ (scripts/serve.sh uses this)
#   bash scripts/build-npm.sh --no-wasm     keep npm/wasm/ as it is (built elsewhere)
#   bash scripts/build-npm.sh --dev         the engine in cargo's dev profile (opt-level 1, line
#                                           tables): what `cargo test --target wasm32-unknown-unknown`
#                                           has already compiled, so it takes seconds (the test suite)
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

wasm_only=0
wasm=1
profile=--release
for a in "$@"; do
  case "$a" in
    --wasm-only) wasm_only=1 ;;
    --no-wasm) wasm=0 ;;
    --dev) profile=--dev ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-npm: unknown argument $a (try --help)" >&2; exit 2 ;;
  esac
done
say() { echo "build-npm: $*"; }

# ---- 1. the wasm engine ---------------------------------------------------------------------
# Built into target/npm/wasm and copied into npm/wasm/ only when it exports the Engine, so a
# failed build leaves the last good one in place. No package.json or .gitignore from wasm-pack:
# npm/package.json is the package, and a .gitignore of "*" would keep npm pack from packing
# wasm/. wasm-opt is off in Cargo.toml.
if [ "$wasm" -eq 1 ]; then
  say "wasm-pack build $profile --target web → npm/wasm/"
  rm -rf target/npm/wasm
  wasm-pack build "$profile" --target web --out-dir target/npm/wasm --out-name webtune --no-pack --no-gitignore
  grep -q 'export class Engine' target/npm/wasm/webtune.d.ts || {
    echo "build-npm: the wasm exports no Engine (is the wasm module declared in src/lib.rs?); npm/wasm/ is left as it was" >&2
    exit 1
  }
  mkdir -p npm/wasm
  rm -f npm/wasm/*
  cp target/npm/wasm/webtune.js target/npm/wasm/webtune.d.ts target/npm/wasm/webtune_bg.wasm \
    target/npm/wasm/webtune_bg.wasm.d.ts npm/wasm/
fi
for f in webtune.js webtune.d.ts webtune_bg.wasm; do
  [ -s "npm/wasm/$f" ] || { echo "build-npm: npm/wasm/$f is missing" >&2; exit 1; }
done
grep -q 'export class Engine' npm/wasm/webtune.d.ts || { echo "build-npm: npm/wasm/webtune.js exports no Engine" >&2; exit 1; }
[ "$wasm_only" -eq 1 ] && { say "built npm/wasm/"; exit 0; }

# ---- 2. the TypeScript ----------------------------------------------------------------------
cd npm
if [ -f package-lock.json ]; then
  [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ] \
    || npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
rm -rf dist
say "tsc → npm/dist/"
npx tsc -p .

# ---- 3. the tarball -------------------------------------------------------------------------
version=$(node -p "require('./package.json').version")
cargo_version=$(sed -n 's/^version = "\(.*\)"/\1/p' ../Cargo.toml | head -n 1)
[ "$version" = "$cargo_version" ] || { echo "build-npm: npm/package.json has version $version, Cargo.toml $cargo_version" >&2; exit 1; }
mkdir -p ../target/npm
rm -f "../target/npm/webtune-$version.tgz"
npm pack --pack-destination ../target/npm --loglevel=error >/dev/null
tarball="target/npm/webtune-$version.tgz"
[ -s "../$tarball" ] || { echo "build-npm: npm pack left no $tarball" >&2; exit 1; }
say "$(tar -tzf "../$tarball" | wc -l) files, $(du -h "../$tarball" | cut -f1)"
echo "$tarball"
