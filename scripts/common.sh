# Sourced by the other scripts: one place that owns the environment of every build, so that
# no two builds differ in a variable (a difference rebuilds every wasm crate).
# shellcheck shell=bash

set -euo pipefail

IDEM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$IDEM_ROOT"

# Tools the project installs for itself live outside the work tree, so that every clone
# (and CI's fresh clone) on a machine reuses them.
IDEM_TOOLS="${IDEM_TOOLS:-$HOME/.cache/idem/tools}"
mkdir -p "$IDEM_TOOLS"
export PATH="$IDEM_TOOLS/bin:$IDEM_TOOLS/npm/node_modules/.bin:$HOME/.cargo/bin:$PATH"

BINARYEN_VERSION="132.0.0"
WASM_TARGET="wasm32-unknown-unknown"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Runs a command as root: directly when we are root, through sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  say "installing Debian packages: $*"
  if [ ! -f "$IDEM_TOOLS/.apt-updated" ]; then
    as_root apt-get update -qq
    touch "$IDEM_TOOLS/.apt-updated"
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The wasm-bindgen CLI must equal the wasm-bindgen crate in Cargo.lock exactly.
locked_wasm_bindgen_version() {
  awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$IDEM_ROOT/Cargo.lock"
}

# "rustup" or "debian": which toolchain builds the wasm (see docs/toolchain notes in README).
wasm_toolchain() {
  cat "$IDEM_TOOLS/wasm-toolchain" 2>/dev/null || echo rustup
}

ensure_wasm_target() {
  if [ "$(wasm_toolchain)" = debian ] && command -v wasm-ld-19 >/dev/null; then
    return
  fi
  if command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx "$WASM_TARGET"; then
    echo rustup >"$IDEM_TOOLS/wasm-toolchain"
    return
  fi
  say "adding the $WASM_TARGET target"
  if command -v rustup >/dev/null && rustup target add "$WASM_TARGET"; then
    echo rustup >"$IDEM_TOOLS/wasm-toolchain"
    return
  fi
  say "rustup could not add $WASM_TARGET; falling back to Debian's rustc-web and building std"
  apt_install rustc-web cargo-web rust-web-src lld-19
  echo debian >"$IDEM_TOOLS/wasm-toolchain"
}

ensure_wasm_bindgen() {
  local want
  want="$(locked_wasm_bindgen_version)"
  if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" = "$want" ]; then
    return
  fi
  say "installing wasm-bindgen-cli $want (a few minutes, once per machine)"
  cargo install --quiet --root "$IDEM_TOOLS" wasm-bindgen-cli --version "=$want" --force
}

# Only release builds run wasm-opt. npm's binaryen works; Debian bookworm's (108) produces a
# module that never hydrates, so ours comes first on PATH.
ensure_wasm_opt() {
  if [ -x "$IDEM_TOOLS/npm/node_modules/.bin/wasm-opt" ] \
    && [ "$(cat "$IDEM_TOOLS/npm/.binaryen-version" 2>/dev/null)" = "$BINARYEN_VERSION" ]; then
    return
  fi
  say "installing wasm-opt (npm binaryen@$BINARYEN_VERSION)"
  mkdir -p "$IDEM_TOOLS/npm"
  npm install --silent --no-audit --no-fund --prefix "$IDEM_TOOLS/npm" "binaryen@$BINARYEN_VERSION" >/dev/null
  echo "$BINARYEN_VERSION" >"$IDEM_TOOLS/npm/.binaryen-version"
}

ensure_chromium() {
  if [ -x /usr/bin/chromium ]; then
    return
  fi
  apt_install chromium
}

ensure_end2end_packages() {
  local stamp="$IDEM_ROOT/end2end/node_modules/.installed-from-lock"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$IDEM_ROOT/end2end/package-lock.json"; then
    return
  fi
  say "installing end2end node packages"
  (cd "$IDEM_ROOT/end2end" && npm ci --silent --no-audit --no-fund >/dev/null)
  cp "$IDEM_ROOT/end2end/package-lock.json" "$stamp"
}

# cargo for the wasm build: the rustup toolchain, or Debian's with std built from source.
wasm_cargo() {
  if [ "$(wasm_toolchain)" = debian ]; then
    PATH="/usr/bin:$PATH" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
      CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-19 \
      /usr/bin/cargo "$@" -Zbuild-std=std,panic_abort
  else
    cargo "$@"
  fi
}
