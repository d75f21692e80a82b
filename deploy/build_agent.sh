#!/usr/bin/env bash
# Builds the sandbox agent and installs it at $1. Every sandbox starts one agent, so its start is
# paid per sandbox: the agent is linked statically and not position-independent, so that the
# kernel maps one file and no dynamic loader runs: no library is loaded, nothing is relocated,
# and no page of the binary is copied on write for a relocation. A static binary also runs in any
# image the docker and kubernetes backends use. Where the C library has no static archive
# (glibc's libc.a: Debian's libc6-dev has it, Fedora's glibc-static), a dynamically linked agent
# is built instead, with a warning.
# Extra cargo flags (e.g. --locked) come from $CARGO_FLAGS.
set -euo pipefail
dest=${1:?usage: build_agent.sh DESTINATION}
case $dest in /*) ;; *) dest=$PWD/$dest ;; esac
cd "$(dirname "$0")/../sandbox_core"
cargo=${CARGO:-cargo}
host=$(rustc -vV | sed -n 's/^host: //p')
# With --target, RUSTFLAGS reach the agent and its dependencies but not build scripts or
# procedural macros (which must stay dynamic).
# shellcheck disable=SC2086
if RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
  "$cargo" build --release -p sandbox-agent --target "$host" ${CARGO_FLAGS:-}; then
  install -D -m 0755 "target/$host/release/sandbox-agent" "$dest"
else
  echo "build_agent.sh: no static agent could be built (is the C library's static archive installed?); building a dynamically linked one" >&2
  # shellcheck disable=SC2086
  "$cargo" build --release -p sandbox-agent ${CARGO_FLAGS:-}
  install -D -m 0755 target/release/sandbox-agent "$dest"
fi
