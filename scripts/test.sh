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

# in_lane NAME CMD...: run CMD in the background, each line of its output prefixed [NAME];
# wait_lanes waits for every lane started so far and fails if any failed. On this machine a
# Chromium on SwiftShader, or a test binary whose tail is one long test, leaves a core idle, so
# two lanes finish in about the time of the longer one.
# A lane's output is also kept unprefixed in target/lanes/NAME.log. When its lanes have ended,
# wait_lanes prints their runners' closing lines again, unprefixed, as the runners wrote them
# (cargo's and wasm-bindgen-test-runner's "test result: ok. N passed; ..."; the app's and the
# page's "N passed, N failed", behind the lane's name), and appends them to
# target/closing-lines.txt, which the summary at the end adds up: a reader of the log (CI
# included) finds every runner's closing line where runners print it, at the start of a line.
lanes=()
lane_names=()
closing=target/closing-lines.txt
mkdir -p target/lanes
: > "$closing"
in_lane() {
  local name=$1
  shift
  (
    "$@" 2>&1 | tee "target/lanes/$name.log" | sed -u "s/^/[$name] /"
    exit "${PIPESTATUS[0]}"
  ) &
  lanes+=($!)
  lane_names+=("$name")
}
wait_lanes() {
  local failed=0 pid name
  for pid in "${lanes[@]}"; do wait "$pid" || failed=1; done
  echo "--- the closing lines of lanes ${lane_names[*]}:"
  for name in "${lane_names[@]}"; do
    grep -E '^test result: |^[0-9]+ passed, [0-9]+ failed' "target/lanes/$name.log" |
      sed -E "s/^([0-9]+ passed, [0-9]+ failed).*/$name: \1/" | tee -a "$closing" || true
  done
  lanes=()
  lane_names=()
  [ $failed -eq 0 ] || echo "a lane failed (see its prefixed lines above)" >&2
  return $failed
}
# run_bins RUNNER BIN...: run test binaries one after the other with RUNNER (empty: the binary itself).
run_bins() {
  local runner=$1 bin
  shift
  for bin in "$@"; do
    echo "--- $(basename "$bin")"
    $runner "$bin" || return 1
  done
}
# run_in_two_lanes RUNNER "BIN..." CARGO-ARGS...: build the test binaries (`cargo test --no-run
# CARGO-ARGS`), then run the test binaries named BIN (the integration tests, the longest) in one
# lane and the rest, the library's unit tests first, in another: what `cargo test` or
# `wasm-pack test` would run one after the other.
run_in_two_lanes() {
  local runner=$1 first=" $2 " lane=${2// /+} json=target/test-binaries.jsonl t name
  shift 2
  cargo test --no-run --message-format=json-render-diagnostics "$@" > "$json"
  local one=() two=()
  while read -r name t; do
    if [[ "$first" == *" $name "* ]]; then
      one+=("$t")
    elif [ "$name" = lib ]; then
      two=("$t" "${two[@]}")
    else
      two+=("$t")
    fi
  done < <(node -e '
    for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n")) {
      const m = l.startsWith("{") ? JSON.parse(l) : {};
      if (m.reason === "compiler-artifact" && m.executable && m.profile.test)
        console.log((m.target.kind.includes("rlib") ? "lib" : m.target.name) + " " + m.executable);
    }' "$json")
  if [ ${#one[@]} -ne $(echo $first | wc -w) ] || [ ${#two[@]} -lt 2 ]; then
    echo "test binaries not found in $json: ${one[*]} | ${two[*]}" >&2
    return 1
  fi
  in_lane "$lane" run_bins "$runner" "${one[@]}"
  in_lane others run_bins "$runner" "${two[@]}"
  wait_lanes
}

stage "1/4 setup (scripts/setup.sh)"
bash scripts/setup.sh

stage "2/4 native tests: cargo test (lib, tests/, bin; wgpu on Vulkan), two binaries at once"
# The integration tests' tail is one test that starts `webtune` processes one after another,
# so the library's tests, soak and the import's heap test run beside them.
# The browser run checks its fixture losses (tests/grad_fixtures.rs) and its training losses and
# token ids (tests/train_browser.rs) against the native ones: those tests append them to
# WEBTUNE_NATIVE_LOSSES_OUT here, and the browser build reads them at compile time from
# WEBTUNE_NATIVE_LOSSES ("name=value,...").
export WEBTUNE_NATIVE_LOSSES_OUT="$PWD/target/native-losses.txt"
rm -f "$WEBTUNE_NATIVE_LOSSES_OUT"
# No `cargo test --doc`: the crate's doc comments hold no runnable example (every block is
# ```text), so it would run nothing.
run_in_two_lanes "" integration
# 7 fixture losses (3 fixtures, 4 of them with q4 weights) and 4 training values (3 steps and an example's token ids).
native_losses=$(sort -u "$WEBTUNE_NATIVE_LOSSES_OUT")
if [ "$(echo "$native_losses" | wc -l)" -lt 11 ]; then
  echo "fewer native losses than the browser run checks in $WEBTUNE_NATIVE_LOSSES_OUT" >&2
  exit 1
fi
WEBTUNE_NATIVE_LOSSES=$(echo "$native_losses" | paste -sd, -)
export WEBTUNE_NATIVE_LOSSES
unset WEBTUNE_NATIVE_LOSSES_OUT
echo "native fixture losses: $WEBTUNE_NATIVE_LOSSES"

stage "3/4 browser tests: cargo test for wasm32, then wasm-bindgen-test-runner in headless Chromium (WebGPU), two binaries at once"
# What `wasm-pack test --headless --chrome` does, in two lanes: cargo builds every test binary
# for wasm32 once, then wasm-bindgen-test-runner (setup.sh pins it to Cargo.lock's wasm-bindgen)
# runs each in headless Chromium, with the flags in webdriver.json (--enable-unsafe-webgpu ...).
# A Chromium on SwiftShader keeps one core busy (compiling and running the shaders), so the
# integration tests and soak run in one Chromium while the library's tests and the import's
# heap test run in another (lanes of ~160 and ~170 s): the stage takes the longer lane instead
# of the sum of both.
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-600}"
run_in_two_lanes wasm-bindgen-test-runner "integration soak" --target wasm32-unknown-unknown

stage "4/4 the npm package, then its example app and the web page in Chromium, at once"
# build-npm.sh: wasm-pack → npm/wasm, tsc → npm/dist, npm pack; --dev: the engine in the dev
# profile (opt-level 1) that stage 3's `cargo test` has already compiled (seconds, where the
# release build took 80 s of this stage's ~230; the same code, with debug assertions on). Then two lanes (each
# Chromium keeps a core busy): the Vite example app installs the tarball and trains the tiny
# model in a worker (scripts/test-browser-app.sh, Playwright; --no-wasm: the wasm just built),
# and the page serve.sh builds from the same wasm is driven end to end (scripts/test-page.sh;
# screenshots in target/screenshots/).
bash scripts/build-npm.sh --dev
cargo build --bin webtune
in_lane app bash scripts/test-browser-app.sh --no-wasm
in_lane page bash scripts/test-page.sh
wait_lanes

# summary: one closing line for the whole run, "tests: N passed, N failed, N skipped", summed
# over the closing lines of every runner above (target/closing-lines.txt, see wait_lanes). It
# fails the run if fewer runs closed than the stages start (6: two lanes in each of three
# stages).
summary() {
  node -e '
    let passed = 0, failed = 0, skipped = 0, runs = 0;
    for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n")) {
      let m = l.match(/^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored/);
      if (!m) m = l.match(/^\w+: (\d+) passed, (\d+) failed/);
      if (!m) continue;
      runs++;
      passed += +m[1];
      failed += +m[2];
      skipped += +(m[3] || 0);
    }
    if (runs < 6) { console.error(`only ${runs} test runs closed in ${process.argv[1]}`); process.exit(1); }
    console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);' "$closing"
}

stage_end
echo
echo "=== all tests passed in $((SECONDS - start)) s"
summary
