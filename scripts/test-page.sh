#!/usr/bin/env bash
# The web page end to end in headless Chromium (WebGPU on SwiftShader): builds what
# scripts/serve.sh builds, serves the page with the TINY random model (webtune tiny-model) in
# the hub layout at /hub/tiny/resolve/main/, and runs tests/page/run.mjs (import, examples,
# 20 training steps, chat, adapter export, reload, adapter import; no stray network requests).
# Screenshots go to target/screenshots/.
#
#   bash scripts/test-page.sh            (PAGE_PORT=8181 by default)
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

bash scripts/serve.sh --build-only
# The CLI makes the tiny model; the dev profile cargo test builds is enough.
cargo build --bin webtune
# The page's TypeScript, type-checked (Vite only strips the types).
(cd www && npx tsc --noEmit -p .)

tiny=target/page/tiny
if [ ! -s "$tiny/model.safetensors" ] || [ target/debug/webtune -nt "$tiny/model.safetensors" ]; then
  rm -rf "$tiny"
  target/debug/webtune tiny-model --out "$tiny"
fi

port=${PAGE_PORT:-8181}
log=target/page/serve.log
node www/serve.mjs --dist www/dist --hub "tiny=$(pwd)/$tiny" --port "$port" --log > "$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  grep -q "^webtune: http" "$log" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.2
done

node tests/page/run.mjs --url "http://127.0.0.1:$port/" --out target/screenshots --repo tiny
