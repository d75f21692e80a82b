#!/usr/bin/env bash
# Builds the docker backend's images without any registry:
#   1. sandboxes-toolchains:bookworm   a Debian rootfs made from packages (mmdebstrap, else
#                                 debootstrap), put into the engine with `docker import`: the
#                                 toolchains of the judge's languages; sandboxes-base:bookworm, a
#                                 smaller one (python3, gcc, g++), the same way;
#   2. sandboxes-sandbox:latest   that rootfs + the agent at /usr/local/bin/sandbox-agent
#                                 (deploy/docker/Dockerfile.sandbox, `docker build`, offline);
#   3. with `--dev`: sandboxes-dev:bookworm, a Debian rootfs for agents that build and install
#                                 (git, build-essential, python3 with pip and venv), as the base;
#   4. with `--manager`: the manager image (`sandboxes serve`), named as the Helm chart's default
#                                 (`manager.image.repository` of its values, tag its appVersion):
#                                 sandboxes-base:bookworm + the project's wheel and its dependencies
#                                 (deploy/docker/Dockerfile.manager).
# Each image carries the label `sandboxes.inputs` = a hash of what it was made from (package list
# and suite for the base; agent binary, Dockerfile and base image id for the top); an image whose
# label matches is kept, so a second run does nothing.
#
# Environment (all optional):
#   AGENT_BIN            agent binary to bake in (default: sandboxes/_bin/sandbox-agent, else the
#                        cargo release build)
#   SANDBOXES_TOOLCHAINS_IMAGE / SANDBOXES_IMAGE / SANDBOXES_BASE_IMAGE   image names (defaults above)
#   SANDBOXES_SUITE      Debian suite (default: bookworm)
#   SANDBOXES_PACKAGES / SANDBOXES_BASE_PACKAGES   packages of the two rootfs (defaults below)
#   SANDBOXES_DEBIAN_MIRROR  mirror URL; by default the Debian mirror(s) of this machine's apt config
#   SANDBOXES_DEV_IMAGE / SANDBOXES_DEV_PACKAGES   the dev image's name and packages
#   PYTHON               the Python that builds the wheel (maturin) and installs it for the
#                        manager image (default: .venv/bin/python, else python3); a 3.11
#   FORCE=1              rebuild the images even when their labels match
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

SUITE=${SANDBOXES_SUITE:-bookworm}
BASE_IMAGE=${SANDBOXES_BASE_IMAGE:-sandboxes-base:$SUITE}
TOOLCHAINS_IMAGE=${SANDBOXES_TOOLCHAINS_IMAGE:-sandboxes-toolchains:$SUITE}
SANDBOX_IMAGE=${SANDBOXES_IMAGE:-sandboxes-sandbox:latest}
VARIANT=minbase
# What the reward engine and user programs need: the toolchains of the judge's languages (the
# packages deploy/toolchains.sh puts on a local backend's host), libc headers, a shell,
# coreutils and find (the file calls).
PACKAGES=${SANDBOXES_PACKAGES:-"$(bash deploy/toolchains.sh --packages) libc6-dev bash coreutils findutils"}
# A smaller rootfs (Python, a C/C++ toolchain, a shell): the manager image's base, and an image
# for templates that name one.
BASE_PACKAGES=${SANDBOXES_BASE_PACKAGES:-"python3 gcc g++ libc6-dev bash coreutils"}
DEV_IMAGE=${SANDBOXES_DEV_IMAGE:-sandboxes-dev:$SUITE}
DEV_PACKAGES=${SANDBOXES_DEV_PACKAGES:-"python3 python3-pip python3-venv git build-essential ca-certificates bash coreutils"}
DEV=0
MANAGER=0
for arg in "$@"; do
  case $arg in
    --dev) DEV=1 ;;
    --manager) MANAGER=1 ;;
    *) echo "usage: $0 [--dev] [--manager]" >&2; exit 2 ;;
  esac
done
CHART=deploy/helm/sandboxes
# The chart says what the manager image is called: one place for its name and tag.
MANAGER_REPO=$(sed -n '/^manager:/,/^[^ ]/ s/^    repository: *//p' "$CHART/values.yaml" | head -1)
MANAGER_TAG=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")
MANAGER_IMAGE=${SANDBOXES_MANAGER_IMAGE:-$MANAGER_REPO:$MANAGER_TAG}
LABEL=sandboxes.inputs
BUILD_VERSION=1  # bump when this script changes what it produces

log() { echo "build_images: $*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "no Docker engine answers (is the daemon running?)"

label_of() {  # image -> value of its inputs label, empty when absent
  docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true
}

sha() { sha256sum | cut -c1-32; }

up_to_date() {  # image, inputs hash: true (and says so) when the image was made of those inputs
  if [ -z "${FORCE:-}" ] && [ "$(label_of "$1")" = "$2" ]; then
    log "$1 is up to date"
    return 0
  fi
  return 1
}

image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

drop_replaced() {  # old image id: remove it once nothing names it any more (best effort)
  if [ -n "$1" ] && [ -z "$(docker image inspect -f '{{join .RepoTags ","}}' "$1" 2>/dev/null)" ]; then
    docker image rm "$1" >/dev/null 2>&1 || true
  fi
}

# --- the Debian mirror(s) of this machine -------------------------------------------------------

# Prints one sources.list line per Debian source of $SUITE (+ -updates, -security) found in this
# machine's apt configuration (deb822 .sources and one-line .list files), with its signed-by key.
apt_sources() {
  if [ -n "${SANDBOXES_DEBIAN_MIRROR:-}" ]; then
    echo "deb $SANDBOXES_DEBIAN_MIRROR $SUITE main"
    echo "deb $SANDBOXES_DEBIAN_MIRROR $SUITE-updates main"
    return
  fi
  python3 - "$SUITE" <<'PY'
import glob, re, sys
suite = sys.argv[1]
wanted = {suite, f"{suite}-updates", f"{suite}-security"}
out = []
def emit(uri, suites, comps, signed_by):
    for s in suites:
        if s in wanted:
            opt = f"[signed-by={signed_by}] " if signed_by and signed_by.startswith("/") else ""
            line = f"deb {opt}{uri} {s} {' '.join(comps) or 'main'}"
            if line not in out:
                out.append(line)
for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(f).read()):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            emit(uri, fields.get("suites", "").split(), fields.get("components", "").split(),
                 fields.get("signed-by", ""))
for f in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(f).read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)", line)
        if not m:
            continue
        opts = m.group(1) or ""
        sb = re.search(r"signed-by=(\S+?)[\s\]]", opts)
        emit(m.group(2), [m.group(3)], m.group(4).split(), sb.group(1) if sb else "")
print("\n".join(out))
PY
}

# --- 1. base image (and the dev image) ------------------------------------------------------

# build_base IMAGE PACKAGES: a Debian rootfs of PACKAGES imported as IMAGE.
build_base() {
  local BASE_IMAGE=$1 PACKAGES=$2
  local pkgs sorted want tmp
  sorted=$(echo "$PACKAGES" | tr ' ,' '\n\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
  want=$(printf 'v%s %s %s %s' "$BUILD_VERSION" "$SUITE" "$VARIANT" "$sorted" | sha)
  up_to_date "$BASE_IMAGE" "$want" && return
  mapfile -t sources < <(apt_sources)
  [ "${#sources[@]}" -gt 0 ] || die "no Debian $SUITE source in /etc/apt; set SANDBOXES_DEBIAN_MIRROR"
  pkgs=$(echo "$sorted" | tr ' ' ',' | sed 's/,$//')
  tmp=$(mktemp -d /var/tmp/sandboxes-rootfs.XXXXXX)
  trap 'rm -rf "$tmp"' RETURN
  export DEBIAN_FRONTEND=noninteractive
  if ! command -v mmdebstrap >/dev/null && ! command -v debootstrap >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing mmdebstrap"
      apt-get update -qq && apt-get install -y -qq mmdebstrap >/dev/null \
        || apt-get install -y -qq debootstrap >/dev/null || true
    fi
  fi
  log "building the $SUITE rootfs ($pkgs) from: ${sources[*]}"
  if command -v mmdebstrap >/dev/null; then
    # Documentation and locales are dropped (copyright files kept); apt lists are not kept. The
    # JDK's maintainer scripts link man pages into man1, which must exist even though empty.
    mmdebstrap --variant="$VARIANT" --include="$pkgs" --format=tar \
      --setup-hook='mkdir -p "$1"/usr/share/man/man1' \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      "$SUITE" "$tmp/rootfs.tar" "${sources[@]}" >&2
  elif command -v debootstrap >/dev/null; then
    local mirror
    mirror=$(echo "${sources[0]}" | sed -E 's/^deb (\[[^]]*\] )?//' | awk '{print $1}')
    debootstrap --variant="$VARIANT" --include="$pkgs" "$SUITE" "$tmp/root" "$mirror" >&2
    rm -rf "$tmp/root/var/lib/apt/lists/"* "$tmp/root/var/cache/apt/"*
    tar -C "$tmp/root" --numeric-owner -cf "$tmp/rootfs.tar" .
  else
    die "neither mmdebstrap nor debootstrap is available (apt-get install mmdebstrap)"
  fi
  log "importing $BASE_IMAGE"
  local old
  old=$(image_id "$BASE_IMAGE")
  docker import \
    --change "LABEL $LABEL=$want" \
    --change "LABEL org.opencontainers.image.description=\"Debian $SUITE $VARIANT: $sorted\"" \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    "$tmp/rootfs.tar" "$BASE_IMAGE" >/dev/null
  drop_replaced "$old"
}

# build_on_base DOCKERFILE IMAGE LABEL CONTEXT OLD_ID BASE: IMAGE from DOCKERFILE on BASE, labelled
# with its inputs; the image it replaces is dropped. The classic builder takes FROM from the local
# images and needs no buildx; set DOCKER_BUILDKIT=1 to use BuildKit where it is installed.
build_on_base() {
  if ! DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build -q \
      -f "$1" \
      --build-arg "BASE=$6" \
      --label "$LABEL=$3" \
      -t "$2" "$4" >/dev/null; then
    die "docker build of $2 failed"
  fi
  drop_replaced "$5"
}

# --- 2. sandbox image (base + agent) -------------------------------------------------------------

build_sandbox() {
  local agent=${AGENT_BIN:-}
  if [ -z "$agent" ]; then
    for c in sandboxes/_bin/sandbox-agent sandbox_core/target/release/sandbox-agent; do
      if [ -x "$c" ]; then agent=$c; break; fi
    done
  fi
  [ -n "$agent" ] && [ -x "$agent" ] || die "no agent binary (run \`make build-agent\` or set AGENT_BIN)"
  local base_id want ctx
  base_id=$(docker image inspect -f '{{.Id}}' "$TOOLCHAINS_IMAGE")
  want=$( { sha256sum <"$agent"; sha256sum <deploy/docker/Dockerfile.sandbox; echo "$base_id"; } | sha)
  up_to_date "$SANDBOX_IMAGE" "$want" && return
  # A context of just the agent: nothing of the repository is sent to the engine.
  ctx=$(mktemp -d /var/tmp/sandboxes-ctx.XXXXXX)
  trap 'rm -rf "$ctx"' RETURN
  cp "$agent" "$ctx/sandbox-agent"
  log "building $SANDBOX_IMAGE (agent $agent)"
  local old
  old=$(image_id "$SANDBOX_IMAGE")
  build_on_base deploy/docker/Dockerfile.sandbox "$SANDBOX_IMAGE" "$want" "$ctx" "$old" "$TOOLCHAINS_IMAGE"
}

# --- 4. manager image (base + wheel) -------------------------------------------------------------

build_manager() {
  local py=${PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
  fi
  "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$py is not a Python 3.11 (the base's python3): set PYTHON"
  local base_id want ctx
  base_id=$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")
  # What the wheel is made of (not the wheel itself: its build is not byte-for-byte repeatable).
  want=$( { git ls-files -s -- sandboxes sandbox_core proto pyproject.toml Cargo.lock 2>/dev/null \
            || true; git diff HEAD -- sandboxes sandbox_core proto pyproject.toml 2>/dev/null || true
            sha256sum <sandboxes/_bin/sandbox-agent; sha256sum <deploy/docker/Dockerfile.manager
            echo "$base_id v$BUILD_VERSION"; } | sha)
  up_to_date "$MANAGER_IMAGE" "$want" && return
  ctx=$(mktemp -d /var/tmp/sandboxes-ctx.XXXXXX)
  trap 'rm -rf "$ctx"' RETURN
  log "building the wheel"
  "$py" -m pip install -q "maturin>=1.7,<2"
  "$py" -m maturin build --release -q -o "$ctx/dist" >&2
  log "installing it and its dependencies for the image"
  local wheel
  wheel=$(ls "$ctx"/dist/*.whl)
  # With the kubernetes extra: the chart runs the manager on the kubernetes backend.
  "$py" -m pip install -q --no-compile --target "$ctx/lib" "$wheel[kubernetes]"
  rm -rf "$ctx/dist" "$ctx/lib/bin"
  log "building $MANAGER_IMAGE"
  local old
  old=$(image_id "$MANAGER_IMAGE")
  build_on_base deploy/docker/Dockerfile.manager "$MANAGER_IMAGE" "$want" "$ctx" "$old" "$BASE_IMAGE"
}

build_base "$TOOLCHAINS_IMAGE" "$PACKAGES"
build_base "$BASE_IMAGE" "$BASE_PACKAGES"
build_sandbox
if [ "$DEV" = 1 ]; then
  build_base "$DEV_IMAGE" "$DEV_PACKAGES"
fi
if [ "$MANAGER" = 1 ]; then
  build_manager
fi
docker image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' \
  | grep -E "^(${TOOLCHAINS_IMAGE}|${BASE_IMAGE}|${SANDBOX_IMAGE}|${DEV_IMAGE}|${MANAGER_IMAGE}) " >&2 || true
log "done"
