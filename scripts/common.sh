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

# Each stage's line carries the seconds since the script started, so a log shows what each stage cost.
say() { printf '\033[1m==> [%4ds] %s\033[0m\n' "$SECONDS" "$*" >&2; }

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

# The test command's runner: cargo-nextest runs each test in a process of its own, four at once,
# and the crash matrix alone (.config/nextest.toml). Machines of this kind come with it; others
# build it once.
ensure_nextest() {
  if cargo nextest --version >/dev/null 2>&1; then
    return
  fi
  say "installing cargo-nextest (a few minutes, once per machine)"
  cargo install --quiet --locked --root "$IDEM_TOOLS" cargo-nextest
}

# cargo fuzz (scripts/fuzz-parsers) asks rustc for unstable flags (sanitizers, coverage);
# RUSTC_BOOTSTRAP=1 lets the machine's one stable toolchain take them.
ensure_cargo_fuzz() {
  if cargo fuzz --version >/dev/null 2>&1; then
    return
  fi
  say "installing cargo-fuzz (a few minutes, once per machine)"
  cargo install --quiet --locked --root "$IDEM_TOOLS" cargo-fuzz
}

# Only release builds run wasm-opt. npm's binaryen works; Debian bookworm's (108) produces a
# module that never hydrates, so ours comes first on PATH.
ensure_wasm_opt() {
  if [ -x "$IDEM_TOOLS/npm/node_modules/.bin/wasm-opt" ] \
    && [ "$(cat "$IDEM_TOOLS/npm/.binaryen-version" 2>/dev/null)" = "$BINARYEN_VERSION" ]; then
    return
  fi
  ensure_node
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

# A real Prometheus scrapes `idem serve` in the metrics tests (Debian's package; its service is
# not started).
ensure_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    return
  fi
  apt_install prometheus
}

# Node.js and npm run the browser tests (and npm installs wasm-opt); Debian's packages are a
# fallback for machines without them.
ensure_node() {
  if command -v node >/dev/null && command -v npm >/dev/null; then
    return
  fi
  apt_install nodejs npm
}

ensure_end2end_packages() {
  ensure_node
  local stamp="$IDEM_ROOT/end2end/node_modules/.installed-from-lock"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$IDEM_ROOT/end2end/package-lock.json"; then
    return
  fi
  say "installing end2end node packages"
  (cd "$IDEM_ROOT/end2end" && npm ci --silent --no-audit --no-fund >/dev/null)
  cp "$IDEM_ROOT/end2end/package-lock.json" "$stamp"
}

# Lints our crates inside the builds that follow, instead of in builds of their own: `cargo
# clippy` is a `cargo check` of every dependency, a second compilation that took 9.5 of a
# fresh clone's 31.5 minutes. clippy-driver as the workspace's compiler wrapper lints each of
# our crates as it compiles it, with what `cargo clippy -- -D warnings` passes it
# (CLIPPY_ARGS), and dependencies are compiled once, for the tests.
lint_while_building() {
  RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
  export RUSTC_WORKSPACE_WRAPPER
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}

# The release binaries every benchmark runs (idem and the open-loop load client), in one
# invocation: built apart, `-p idem` and `--example load` resolve different features (the
# example brings the dev-dependencies'), so the idem crate was compiled once for each, and
# again when the next script built `-p idem` (about 4 minutes each time on two cores).
build_release_binaries() {
  say "building idem and the open-loop load client (release)"
  cargo build --release --quiet -p idem --bins --example load
}

# cargo for the wasm build: the rustup toolchain, or Debian's with std built from source
# (whose rustc the rustup toolchain's clippy-driver cannot drive: that build is not linted).
wasm_cargo() {
  if [ "$(wasm_toolchain)" = debian ]; then
    env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
      PATH="/usr/bin:$PATH" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
      CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-19 \
      /usr/bin/cargo "$@" -Zbuild-std=std,panic_abort
  else
    cargo "$@"
  fi
}

# Chooses the PostgreSQL server the tests create their databases on, and exports it as
# IDEM_TEST_POSTGRES_URL: DATABASE_URL when it names PostgreSQL; else a throwaway cluster
# owned by this run (installing Debian's postgresql when missing), whose fsync is off (the
# tests crash processes, never the machine) and which takes 300 connections: nextest's six
# threads ran in 149-174 s on it (four runs) against 170 s on this machine's own server (fsync
# on, 100 connections, which eight threads once used up). IDEM_TEST_POSTGRES=local takes
# the local server on 5432 instead, when it answers.
ensure_test_postgres() {
  if [[ "${DATABASE_URL:-}" == postgres://* || "${DATABASE_URL:-}" == postgresql://* ]]; then
    export IDEM_TEST_POSTGRES_URL="$DATABASE_URL"
    say "tests use the PostgreSQL server from DATABASE_URL"
    return
  fi
  local local_url="postgres://postgres@127.0.0.1:5432/postgres"
  if [ "${IDEM_TEST_POSTGRES:-}" = local ] && command -v psql >/dev/null \
    && psql "$local_url" -Atqc 'select 1' >/dev/null 2>&1; then
    export IDEM_TEST_POSTGRES_URL="$local_url"
    say "tests use the PostgreSQL server on 127.0.0.1:5432"
    return
  fi
  start_throwaway_postgres
}

# PostgreSQL's server programs (initdb, pg_ctl, pg_basebackup): the throwaway cluster, and the
# tests that crash, restart and fail over clusters of their own (support/cluster.rs).
ensure_postgres_server_programs() {
  local bindir
  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    apt_install postgresql
  fi
}

start_throwaway_postgres() {
  local bindir
  ensure_postgres_server_programs
  bindir="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  local port="${IDEM_TEST_POSTGRES_PORT:-55432}"
  IDEM_PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/idem-pg.XXXXXX")"
  local run_as=()
  if [ "$(id -u)" -eq 0 ]; then
    # initdb refuses to run as root; the postgresql package created this user.
    chown postgres "$IDEM_PG_DIR"
    run_as=(runuser -u postgres --)
  fi
  say "starting a throwaway PostgreSQL on 127.0.0.1:$port ($IDEM_PG_DIR)"
  "${run_as[@]}" "$bindir/initdb" -D "$IDEM_PG_DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
  # Tests need no durability; the benchmark passes its own settings (fsync on).
  "${run_as[@]}" "$bindir/pg_ctl" -D "$IDEM_PG_DIR/data" -l "$IDEM_PG_DIR/log" -w \
    -o "-p $port -k $IDEM_PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=300 ${IDEM_PG_OPTIONS:--c fsync=off}" \
    start >/dev/null
  IDEM_PG_STOP=("${run_as[@]}" "$bindir/pg_ctl" -D "$IDEM_PG_DIR/data" -m immediate stop)
  on_exit stop_throwaway_postgres
  export IDEM_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

stop_throwaway_postgres() {
  "${IDEM_PG_STOP[@]}" >/dev/null 2>&1 || true
  rm -rf "$IDEM_PG_DIR"
}

# The OpenAPI 3.1 validator the document's test runs: openapi-spec-validator, from PyPI.
ensure_openapi_validator() {
  python3 -c 'import openapi_spec_validator' 2>/dev/null && return
  say "installing openapi-spec-validator (checks the served OpenAPI document) from PyPI"
  python3 -m pip install --quiet openapi-spec-validator
}

# The API fuzzer: schemathesis, from PyPI (run as `python3 -m schemathesis.cli` by the fuzzing
# test and scripts/fuzz-api, so that it works wherever pip put its scripts).
ensure_schemathesis() {
  python3 -c 'import schemathesis' 2>/dev/null && return
  say "installing schemathesis (generates requests from the OpenAPI document) from PyPI"
  python3 -m pip install --quiet schemathesis
}

# A real SMTP server for the receipts test: aiosmtpd, from PyPI (the test starts it).
ensure_smtp_test_server() {
  python3 -c 'import aiosmtpd' 2>/dev/null && return
  say "installing aiosmtpd (an SMTP server for the receipts test) from PyPI"
  python3 -m pip install --quiet aiosmtpd
}

# Commands to run when the script exits, the last registered first (what was started last
# may use what was started before it), with one trap for all of them.
IDEM_ON_EXIT=()
on_exit() {
  IDEM_ON_EXIT=("$1" "${IDEM_ON_EXIT[@]}")
  trap 'for command in "${IDEM_ON_EXIT[@]}"; do "$command"; done' EXIT
}

# Puts the tests' scratch files (TMPDIR: the throwaway PostgreSQL and NATS, SQLite databases,
# the clusters the failover tests make) in memory when /dev/shm has room. On disk, an eighth
# of the nextest stage's CPU was ext4 looking for free inodes for the files every test
# database creates and deletes (`perf record -a`, 2026-12-07: find_get_block_common,
# recently_deleted, under the postgres processes), and the stage took 195 s against 154 s in
# memory. The tests crash processes, never the machine, so they need no disk.
scratch_in_memory() {
  local available_kib
  available_kib="$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1 || true)"
  if [ ! -w /dev/shm ] || [ "${available_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
    return
  fi
  IDEM_SCRATCH="$(mktemp -d /dev/shm/idem-test.XXXXXX)"
  # The postgres user runs the clusters inside it.
  chmod 711 "$IDEM_SCRATCH"
  on_exit remove_scratch
  export TMPDIR="$IDEM_SCRATCH"
}

remove_scratch() {
  rm -rf "$IDEM_SCRATCH"
}

# NATS with JetStream for the events tests: IDEM_TEST_NATS_URL if set, else the server on
# 127.0.0.1:4222, else a throwaway nats-server (Debian's package) on 54222.
ensure_test_nats() {
  if [ -n "${IDEM_TEST_NATS_URL:-}" ]; then
    say "tests use NATS at $IDEM_TEST_NATS_URL"
    return
  fi
  if [ "${IDEM_TEST_NATS:-}" != throwaway ] && (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    export IDEM_TEST_NATS_URL="nats://127.0.0.1:4222"
    say "tests use the NATS server on 127.0.0.1:4222"
    return
  fi
  command -v nats-server >/dev/null || PATH="$PATH:/usr/sbin"
  command -v nats-server >/dev/null || apt_install nats-server
  local port="${IDEM_TEST_NATS_PORT:-54222}"
  IDEM_NATS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/idem-nats.XXXXXX")"
  say "starting a throwaway NATS server with JetStream on 127.0.0.1:$port ($IDEM_NATS_DIR)"
  nats-server -js -a 127.0.0.1 -p "$port" -sd "$IDEM_NATS_DIR" >"$IDEM_NATS_DIR/log" 2>&1 &
  IDEM_NATS_PID=$!
  on_exit stop_throwaway_nats
  for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  export IDEM_TEST_NATS_URL="nats://127.0.0.1:$port"
}

stop_throwaway_nats() {
  kill "$IDEM_NATS_PID" >/dev/null 2>&1 || true
  wait "$IDEM_NATS_PID" 2>/dev/null || true
  rm -rf "$IDEM_NATS_DIR"
}
