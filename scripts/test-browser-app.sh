#!/usr/bin/env bash
# The npm package in a browser: builds it (scripts/build-npm.sh → target/npm/webtune-0.1.0.tgz)
# and the CLI (for the tiny model), then runs tests/browser/run.mjs, which builds the example
# app (examples/vite-app) against the tarball and drives it and the client's API in headless
# Chromium (WebGPU on SwiftShader). Screenshot: target/screenshots/example-app.png.
#
#   bash scripts/test-browser-app.sh [--no-wasm]   (--no-wasm: use npm/wasm/ as it is)
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

[ -x /usr/bin/chromium ] || bash scripts/setup.sh
bash scripts/build-npm.sh "$@"
cargo build --bin webtune
if [ ! -f tests/browser/node_modules/.package-lock.json ] || [ tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
node tests/browser/run.mjs
