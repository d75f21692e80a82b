#!/usr/bin/env bash
# CRIU, which checkpoints a sandbox's running processes for memory snapshots (the server probes it
# at start: sandboxes/server/criu.py). It must be 4.1 or later: older releases fail `criu check` on
# kernels that map `[vvar_vclock]` ("vdso: Unexpected rt vDSO area bounds").
#
# Does nothing when a `criu` on the PATH is 4.1 or later and passes `criu check`. Otherwise, as root
# with apt: the host's own package when its apt offers 4.1 or later; else the pinned upstream release
# (the orig tarball of Debian's criu 4.1.1-1, from the host's Debian mirror, checked against SHA256),
# built in a temporary directory against Debian's build dependencies; only its `criu` binary is
# installed, to /usr/local/sbin/criu. Not root: says what is missing (memory snapshots are refused).
set -euo pipefail
MIN=4.1
VERSION=4.1.1
SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
POOL=pool/main/c/criu/criu_$VERSION.orig.tar.xz
TARGET=/usr/local/sbin/criu
APT=(apt-get -o DPkg::Lock::Timeout=600) # waits for another apt run rather than failing
BUILD_DEPS=(gcc make pkg-config xz-utils libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
  libnl-3-dev libnl-route-3-dev libnet1-dev libnftables-dev libcap-dev libaio-dev libbsd-dev uuid-dev
  libgnutls28-dev)

version_ge() { # VERSION >= MIN (dotted numbers)
  [ -n "$1" ] && [ "$(printf '%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

criu_version() { # of the `criu` on the PATH ("Version: 4.1.1"), empty without one
  command -v criu >/dev/null && criu --version 2>/dev/null | sed -n 's/^Version: *//p' || true
}

criu_ok() {
  version_ge "$(criu_version)" "$MIN" && criu check >/dev/null 2>&1
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
  quietly make -C "$src" -j"$(nproc)" criu || return 1
  install -D -m 0755 "$src/criu/criu" "$TARGET"
}

install_criu() { # the host's package when its apt offers MIN or later, else the pinned build
  local candidate
  export DEBIAN_FRONTEND=noninteractive
  quietly "${APT[@]}" update -qq || return 1
  candidate=$(apt-cache policy criu | sed -n 's/^ *Candidate: *//p' | sed 's/^[0-9]*://; s/[-+~].*//')
  if version_ge "$candidate" "$MIN"; then
    quietly "${APT[@]}" install -y -qq --no-install-recommends criu
  else
    quietly "${APT[@]}" install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" && build
  fi
}

criu_ok && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  found=$(criu_version)
  if version_ge "$found" "$MIN"; then
    echo "CRIU $found fails \`criu check\` as this user: $(criu check 2>&1 | head -n1)" >&2
  else
    echo "missing CRIU $MIN or later passing \`criu check\` (found: ${found:-none});" \
      "run deploy/criu.sh as root with apt (memory snapshots are refused without it)" >&2
  fi
  exit 0
fi
if [ -x "$TARGET" ] && [ "$("$TARGET" --version 2>/dev/null | sed -n 's/^Version: *//p')" = "$VERSION" ]; then
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
