#!/usr/bin/env bash
# Host programs the tests use beyond the sandboxes' toolchains (deploy/toolchains.sh): Debian's
# docker-registry, a container registry the kubernetes tests run on loopback as a cluster's
# registry. Installs what is missing when run as root with apt; otherwise says what is (the tests
# that need it are skipped).
set -euo pipefail
# (path that must exist, Debian package that provides it)
TOOLS=(
  "/usr/bin/docker-registry docker-registry"
)
need=""
for entry in "${TOOLS[@]}"; do
  read -r path pkg <<<"$entry"
  [ -e "$path" ] || need="$need $pkg"
done
[ -n "$need" ] || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends $need >/dev/null
  # The package's own service is not what the tests run: they start theirs on loopback.
  if command -v systemctl >/dev/null && systemctl is-active -q docker-registry 2>/dev/null; then
    systemctl disable --now -q docker-registry || true
  fi
else
  echo "missing test tools:$need; install them with apt-get (their tests are skipped)" >&2
fi
