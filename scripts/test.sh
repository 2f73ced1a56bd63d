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

stage "3/5 browser tests: cargo test for wasm32, then wasm-bindgen-test-runner in headless Chromium (WebGPU), two at once"
# What `wasm-pack test --headless --chrome` does, in two lanes: cargo builds every test binary
# for wasm32 once, then wasm-bindgen-test-runner (setup.sh pins it to Cargo.lock's wasm-bindgen)
# runs each in headless Chromium, with the flags in webdriver.json (--enable-unsafe-webgpu ...).
# A Chromium on SwiftShader keeps one core busy (compiling and running the shaders), so the
# library's tests run in one Chromium while the integration tests run in another: the stage
# takes the longer lane instead of the sum of both.
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-600}"
cargo test --target wasm32-unknown-unknown --no-run --message-format=json-render-diagnostics \
  > target/wasm-tests.jsonl
# "lib PATH" for the library's tests, "NAME PATH" for each tests/ binary (and the CLI's).
mapfile -t wasm_tests < <(node -e '
  for (const l of require("fs").readFileSync("target/wasm-tests.jsonl", "utf8").split("\n")) {
    const m = l.startsWith("{") ? JSON.parse(l) : {};
    if (m.reason === "compiler-artifact" && m.executable && m.profile.test)
      console.log((m.target.kind.includes("rlib") ? "lib" : m.target.name) + " " + m.executable);
  }')
lib_bins=() other_bins=()
for t in "${wasm_tests[@]}"; do
  case "$t" in
    "lib "*) lib_bins+=("${t#* }") ;;
    "integration "*) other_bins=("${t#* }" "${other_bins[@]}") ;; # the longest first
    *) other_bins+=("${t#* }") ;;
  esac
done
[ ${#lib_bins[@]} -eq 1 ] && [ ${#other_bins[@]} -ge 2 ] || { echo "wasm test binaries not found: ${wasm_tests[*]}" >&2; exit 1; }
# Run test binaries one after the other, each line of their output prefixed with the lane's name.
lane() {
  local name=$1
  shift
  (
    for bin in "$@"; do
      echo "--- $(basename "$bin")"
      wasm-bindgen-test-runner "$bin" || exit 1
    done
  ) 2>&1 | sed -u "s/^/[$name] /"
  return "${PIPESTATUS[0]}"
}
lane lib "${lib_bins[@]}" &
lib_lane=$!
lane tests "${other_bins[@]}" &
tests_lane=$!
failed=0
wait $lib_lane || failed=1
wait $tests_lane || failed=1
[ $failed -eq 0 ] || { echo "browser tests failed (see the [lib] and [tests] lines above)" >&2; exit 1; }

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
