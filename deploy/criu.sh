#!/usr/bin/env bash
# CRIU, which checkpoints a sandbox's running processes for memory snapshots (the server probes it
# at start: sandboxes/server/criu.py). It is the pinned upstream release 4.1.1 (4.1 or later: older
# releases fail `criu check` on kernels that map `[vvar_vclock]`, "vdso: Unexpected rt vDSO area
# bounds") with the patches of deploy/criu-patches/ applied in order:
#   0001 SO_PASSCRED/SO_PASSSEC dumped only for the families that have them (kernels from 6.16
#        refuse them on TCP sockets; upstream in 4.2);
#   0002 socket buffer sizes restored with SO_SNDBUF/SO_RCVBUF when the FORCE variants are refused
#        (a root without CAP_NET_ADMIN over the sandbox's network namespace);
#   0003 a task's rlimits read from /proc/PID/limits when prlimit64() is refused (a root without
#        CAP_SYS_RESOURCE over the sandbox's user namespace);
#   0004 a file mapped from a mount outside the dumped mount namespace (a program forked from the
#        Python template, which started outside the sandbox) dumped as the same file (device and
#        inode) at its path in the namespace.
# The binary carries the patch set's mark in its own `criu --version` ("GitID: sandboxes-<sha256
# of the patches, 12 digits>"), so a CRIU built without them, or with another set, is rebuilt.
#
# Beside it, /usr/local/lib/sandboxes/criu-mntns.so (deploy/criu-mntns.c): preloaded into CRIU, it
# enters a sandbox's mount namespace once CRIU is loaded from the host's root
# (sandboxes/backends/memory.py). Built with gcc when missing or older than its source (the
# source's SHA256 is kept beside it).
#
# Does nothing when the `criu` on the PATH is that build and passes `criu check`. Otherwise, as root
# with apt: the orig tarball of Debian's criu 4.1.1-1 (from the host's Debian mirror, checked
# against SHA256) is patched and built in a temporary directory against Debian's build
# dependencies; only its `criu` binary is installed, to /usr/local/sbin/criu. Not root: says what
# is missing (memory snapshots are refused).
set -euo pipefail
VERSION=4.1.1
SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
POOL=pool/main/c/criu/criu_$VERSION.orig.tar.xz
TARGET=/usr/local/sbin/criu
APT=(apt-get -o DPkg::Lock::Timeout=600) # waits for another apt run rather than failing
PATCHES=$(cd "$(dirname "${BASH_SOURCE[0]}")/criu-patches" && pwd)
PRELOAD_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/criu-mntns.c
PRELOAD=/usr/local/lib/sandboxes/criu-mntns.so
MARK=sandboxes-$(cat "$PATCHES"/*.patch | sha256sum | cut -c1-12)
BUILD_DEPS=(gcc make pkg-config patch xz-utils libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
  libnl-3-dev libnl-route-3-dev libnet1-dev libnftables-dev libcap-dev libaio-dev libbsd-dev uuid-dev
  libgnutls28-dev)

version_of() { # "Version: 4.1.1" -> 4.1.1; "GitID: ..." with `version_of CRIU GitID`
  "$1" --version 2>/dev/null | sed -n "s/^${2:-Version}: *//p" || true
}

criu_version() { # of the `criu` on the PATH, empty without one
  command -v criu >/dev/null && version_of criu || true
}

criu_ok() { # the PATH's criu is the patched build and passes its check
  [ "$(criu_version)" = "$VERSION" ] && [ "$(version_of criu GitID)" = "$MARK" ] \
    && criu check >/dev/null 2>&1
}

debian_mirror() { # the Debian mirror the host's apt uses for its own release
  local codename uri
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  uri=$(apt-get indextargets --format '$(REPO_URI)' "Release: $codename" "Identifier: Packages" 2>/dev/null \
    | head -n1)
  echo "${uri:-http://deb.debian.org/debian/}"
}

quietly() { # runs a command, its output shown only when it fails (the last lines of it)
  "$@" >"$TMP/log" 2>&1 || { tail -n 30 "$TMP/log" >&2; return 1; }
}

build() { # the pinned release's `criu` binary, installed to $TARGET
  local src="$TMP/criu-$VERSION"
  mkdir "$TMP/dl" || return 1
  chown _apt "$TMP/dl" 2>/dev/null || true # apt's download user writes there when it exists
  quietly /usr/lib/apt/apt-helper download-file "$(debian_mirror)$POOL" "$TMP/dl/criu.tar.xz" \
    "SHA256:$SHA256" || return 1
  tar -xJf "$TMP/dl/criu.tar.xz" -C "$TMP" || return 1
  for p in "$PATCHES"/*.patch; do
    quietly patch -d "$src" -p1 -N -i "$p" || return 1
  done
  # GITID is what `criu --version` says after its version: the patch set's mark
  quietly make -C "$src" -j"$(nproc)" criu GITID="$MARK" || return 1
  install -D -m 0755 "$src/criu/criu" "$TARGET"
}

install_criu() { # the pinned release, patched (a distribution's package lacks the patches)
  export DEBIAN_FRONTEND=noninteractive
  quietly "${APT[@]}" update -qq || return 1
  quietly "${APT[@]}" install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" && build
}

preload_ok() { # the preload is built from this source
  [ -f "$PRELOAD" ] && [ "$(cat "$PRELOAD.sha256" 2>/dev/null)" = "$(sha256sum <"$PRELOAD_SRC" | cut -c1-64)" ]
}

install_preload() { # gcc (from apt when missing), then the preload built in a temporary directory
  local dir
  if ! command -v gcc >/dev/null; then
    "${APT[@]}" update -qq >/dev/null && "${APT[@]}" install -y -qq --no-install-recommends gcc libc6-dev \
      >/dev/null || return 1
  fi
  dir=$(mktemp -d)
  gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$dir/criu-mntns.so" "$PRELOAD_SRC" \
    && install -D -m 0644 "$dir/criu-mntns.so" "$PRELOAD" \
    && sha256sum <"$PRELOAD_SRC" | cut -c1-64 >"$PRELOAD.sha256"
  local rc=$?
  rm -rf "$dir"
  return $rc
}

if ! preload_ok; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    install_preload || echo "building $PRELOAD failed: memory snapshots are refused" >&2
  else
    echo "missing $PRELOAD (from deploy/criu-mntns.c); run deploy/criu.sh as root with apt" \
      "(memory snapshots are refused without it)" >&2
  fi
fi
criu_ok && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  found=$(criu_version)
  if [ "$found" = "$VERSION" ] && [ "$(version_of criu GitID)" = "$MARK" ]; then
    echo "CRIU $found fails \`criu check\` as this user: $(criu check 2>&1 | head -n1)" >&2
  else
    echo "missing CRIU $VERSION with deploy/criu-patches/ ($MARK) passing \`criu check\`" \
      "(found: ${found:-none} $(version_of criu GitID));" \
      "run deploy/criu.sh as root with apt (memory snapshots are refused without it)" >&2
  fi
  exit 0
fi
if [ -x "$TARGET" ] && [ "$(version_of "$TARGET")" = "$VERSION" ] && [ "$(version_of "$TARGET" GitID)" = "$MARK" ]; then
  # built before: a rebuild would not change what its check says about this host
  if "$TARGET" check >/dev/null 2>&1; then
    echo "CRIU $VERSION at $TARGET passes \`criu check\`, but the PATH's criu is another one or none" >&2
  else
    echo "CRIU $VERSION at $TARGET fails \`criu check\` here: $("$TARGET" check 2>&1 | tail -n1)" >&2
  fi
  exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
chmod 755 "$TMP" # apt's download user reaches its download directory
install_criu || { echo "installing CRIU failed: memory snapshots are refused" >&2; exit 0; }
hash -r
criu_ok || echo "CRIU installed, but \`criu check\` fails here: $(criu check 2>&1 | tail -n1)" >&2
