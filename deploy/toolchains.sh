#!/usr/bin/env bash
# The host toolchains the local backend's sandboxes run (they see the host's /usr): Debian's
# interpreters and compilers of every language of the judge (`sandbox_core/crates/judge/src/
# languages.rs`). Installs what is missing when run as root with apt; otherwise says what is.
# With them, `sudo` (a root sandbox's programs run scripts written for images that have it), and
# the Python libraries SandboxFusion's own runtime image carries, which graders of the
# one-shot run endpoints import (LiveCodeBench's, for one, imports numpy).
# `toolchains.sh --packages` prints the packages (the sandbox image is built of them too).
set -euo pipefail
# (path that must exist, Debian package that provides it)
TOOLS=(
  "/usr/bin/python3 python3"
  "/usr/bin/gcc gcc"
  "/usr/bin/g++ g++"
  "/usr/bin/make make"
  "/usr/bin/javac default-jdk-headless"
  "/usr/bin/node nodejs"
  "/usr/share/nodejs/typescript/package.json node-typescript"
  "/usr/bin/go golang-go"
  "/usr/bin/rustc rustc"
  "/usr/bin/sudo sudo"
  "/usr/lib/python3/dist-packages/numpy python3-numpy"
  "/usr/lib/python3/dist-packages/scipy python3-scipy"
  "/usr/lib/python3/dist-packages/pandas python3-pandas"
  "/usr/lib/python3/dist-packages/sympy python3-sympy"
  "/usr/lib/python3/dist-packages/networkx python3-networkx"
  "/usr/lib/python3/dist-packages/sortedcontainers python3-sortedcontainers"
)
if [ "${1:-}" = --packages ]; then
  for entry in "${TOOLS[@]}"; do read -r _ pkg <<<"$entry"; printf '%s ' "$pkg"; done
  echo
  exit 0
fi
# shellcheck source=deploy/apt_missing.sh
. "$(dirname "$0")/apt_missing.sh"
install_missing "host toolchains (the local backend's languages)" "${TOOLS[@]}"
