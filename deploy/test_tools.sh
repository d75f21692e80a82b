#!/usr/bin/env bash
# Host programs the tests use beyond the sandboxes' toolchains (deploy/toolchains.sh): Debian's
# docker-registry, a container registry the kubernetes tests run on loopback as a cluster's
# registry (the package's own service is not used). Installs what is missing when run as root
# with apt; otherwise says what is (the tests that need it are skipped).
set -euo pipefail
# (path that must exist, Debian package that provides it)
TOOLS=(
  "/usr/bin/docker-registry docker-registry"
)
# shellcheck source=deploy/apt_missing.sh
. "$(dirname "$0")/apt_missing.sh"
install_missing "test tools (their tests are skipped)" "${TOOLS[@]}" \
  || echo "installing the test tools failed: their tests are skipped" >&2
