# Sourced by deploy/toolchains.sh and deploy/test_tools.sh: `install_missing WHAT "PATH PACKAGE"...`
# installs the Debian packages of the paths that do not exist, when run as root with apt;
# otherwise says which are missing (as WHAT) on stderr.
install_missing() {
  local what=$1 need="" entry path pkg
  shift
  for entry in "$@"; do
    read -r path pkg <<<"$entry"
    [ -e "$path" ] || need="$need $pkg"
  done
  [ -n "$need" ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $need >/dev/null
  else
    echo "missing $what:$need; install them with apt-get" >&2
  fi
}
