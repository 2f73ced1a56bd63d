#!/usr/bin/env bash
# Every test, natively (wgpu on Vulkan: lavapipe without a GPU) and in headless
# Chromium (WebGPU: SwiftShader). CI runs exactly this (.ci/run).
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"
# The Vulkan loader complains without it (TOOLCHAIN.md pitfall 11).
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

start=$SECONDS
stage_name=""
stage_start=$SECONDS
stage_end() {
  if [ -n "$stage_name" ]; then echo "=== $stage_name: done in $((SECONDS - stage_start)) s"; fi
}
# Print a header for the next stage, and the time the previous one took.
stage() {
  stage_end
  stage_name="$1"
  stage_start=$SECONDS
  echo
  echo "=== $1"
}

stage "1/5 setup (scripts/setup.sh)"
bash scripts/setup.sh

stage "2/5 native tests: cargo test (lib, tests/, bin; wgpu on Vulkan)"
cargo test
# The browser run checks its fixture losses (NATIVE_LOSS lines of tests/grad_fixtures.rs) and its training
# losses and token ids (NATIVE_TRAIN_LOSS lines of tests/train_browser.rs) against these native ones,
# all in one "name=value,..." list read at compile time.
WEBTUNE_NATIVE_LOSSES=$(
  {
    cargo test -q --test integration -- --nocapture grad_fixtures:: 2>/dev/null | sed -n 's/^NATIVE_LOSS //p' || exit 1
    cargo test -q --test integration -- --nocapture train_browser:: 2>/dev/null | sed -n 's/^NATIVE_TRAIN_LOSS //p'
  } | paste -sd, -
)
export WEBTUNE_NATIVE_LOSSES
echo "native fixture losses: $WEBTUNE_NATIVE_LOSSES"

stage "3/5 browser tests: wasm-pack test --headless --chrome (WebGPU in Chromium)"
# webdriver.json beside Cargo.toml holds Chromium's flags (--enable-unsafe-webgpu ...).
CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}" WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-600}" \
  wasm-pack test --headless --chrome

stage "4/5 the npm package and its example app in Chromium (scripts/test-browser-app.sh)"
# build-npm.sh: wasm-pack (release) → npm/wasm, tsc → npm/dist, npm pack; then the Vite example
# app installs the tarball and trains the tiny model in a worker (Playwright).
bash scripts/test-browser-app.sh

stage "5/5 the web page in Chromium (scripts/test-page.sh)"
# The page serve.sh builds (reusing stage 4's wasm), driven end to end; screenshots in
# target/screenshots/.
bash scripts/test-page.sh

stage_end
echo
echo "=== all tests passed in $((SECONDS - start)) s"
