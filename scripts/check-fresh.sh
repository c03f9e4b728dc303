#!/usr/bin/env bash
# check-fresh.sh — run the README's commands on a fresh Debian 12 (bookworm) root.
#
#   scripts/check-fresh.sh [--demo] [--user] [--keep] [--refresh]
#   scripts/check-fresh.sh --enter DIR     a shell in a root kept by --keep
#
# Builds a bare bookworm root with debootstrap (cached as a tarball: the slow part), extracts it
# afresh for every run (the packages installed by a run are never cached), puts a clean clone of
# HEAD at /work/distflow with ../shared beside it at /work/shared (as CI places them), and runs in
# it, under chroot:
#   bash scripts/install-deps.sh   a fresh machine has no `make`: this is the step that installs it
#   make build                     (separately only to time it: `make test` would do the same)
#   make test
#   make demo                      with --demo (about 7 minutes on 2 cores)
# The ctest lines and the demo's `heldout accuracy` line print as they do on a machine; a summary of
# the time each phase took follows. Exit status 0 only if every phase passed.
#
#   --demo     also run `make demo`
#   --user     as a non-root user (useradd): check that install-deps.sh prints an apt-get line that,
#              run as root, installs exactly the missing packages, then build, test (and demo) as
#              that user, so OpenMPI runs without its run-as-root flags
#   --keep     keep the root afterwards (unmounted) for debugging; enter it with --enter DIR
#   --refresh  bootstrap the cached root again (e.g. after a Debian point release)
#
# Environment:
#   DISTFLOW_FRESH_TARBALL  the cached root (default ${XDG_CACHE_HOME:-$HOME/.cache}/distflow/
#                           debootstrap-bookworm-ARCH.tar.gz)
#   DISTFLOW_FRESH_TMPDIR   where the root is extracted (default /var/tmp; needs about 3 GB)
#   DISTFLOW_FRESH_MIRROR   Debian mirror (default: the host's apt source for bookworm, else
#                           http://deb.debian.org/debian)
#   DISTFLOW_FRESH_SECURITY security mirror (default: the host's for bookworm-security, else
#                           http://deb.debian.org/debian-security)
#
# Needs root (debootstrap, mount, chroot). Everything the root mounts lives in a private mount and
# PID namespace (unshare), so no mount can outlive the run or be seen by the rest of the system,
# and processes left in the root die with it; the mounts are also unmounted by a trap on every exit.
# shellcheck disable=SC2317  # functions called only through traps, "$run" and phase
set -euo pipefail

SUITE=bookworm
SELF=$(readlink -f "$0")
note() { printf '[check-fresh] %s\n' "$*" >&2; }
die() { printf 'check-fresh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# inside the namespaces: mount, run the phases in the root, unmount
# ---------------------------------------------------------------------------------------------
MOUNTS=()
TIMES=()

do_mount() { # mount ARGS... TARGET; remembered for unmount_all
  mount "$@"
  MOUNTS+=("${*: -1}")
}

unmount_all() {
  local i m
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    m=${MOUNTS[i]}
    # lazy as a fallback: a process still using the mount (it dies with the PID namespace) keeps
    # a normal umount from succeeding
    umount "$m" 2>/dev/null || umount -l "$m" || echo "check-fresh: could not unmount $m" >&2
  done
  MOUNTS=()
}

# What a booted machine has mounted and a chroot lacks. Each is needed:
mount_root() {
  local root=$1 n
  # /proc: apt, dpkg, nproc, OpenMPI (hwloc) and ps read it; a fresh proc of this PID namespace,
  # so the root sees only its own processes, as a machine does
  do_mount -t proc proc "$root/proc"
  # /sys: hwloc (OpenMPI's topology) and oneDNN's CPU detection read it
  do_mount -t sysfs sysfs "$root/sys"
  # /dev: a machine has a devtmpfs; here a tmpfs with the host's basic devices bound in (no
  # mknod, which containers may forbid), and devpts / shm of its own
  do_mount -t tmpfs -o mode=755,nosuid dev "$root/dev"
  for n in null zero full random urandom tty; do
    : >"$root/dev/$n"
    do_mount --bind "/dev/$n" "$root/dev/$n"
  done
  ln -s /proc/self/fd "$root/dev/fd"
  ln -s /proc/self/fd/0 "$root/dev/stdin"
  ln -s /proc/self/fd/1 "$root/dev/stdout"
  ln -s /proc/self/fd/2 "$root/dev/stderr"
  mkdir "$root/dev/pts" "$root/dev/shm"
  # /dev/pts: dpkg logs through a pseudo-terminal; a new instance, not the host's terminals
  do_mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$root/dev/pts"
  ln -s pts/ptmx "$root/dev/ptmx"
  # /dev/shm: OpenMPI's shared-memory transport (vader) maps its segments there; systemd mounts a
  # tmpfs of the default size (half the memory) on a machine, so the same here (not a container's
  # 64 MB)
  do_mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
}

# a command line in the root as root, with the clean environment of a root login
in_root() {
  chroot "$CF_ROOT" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM="${TERM:-dumb}" /bin/bash -c "$1"
}

# a command line in the root as the non-root user, through a login shell (its own environment)
as_user() {
  chroot "$CF_ROOT" /usr/sbin/runuser -l "$CF_USER" -c "$1"
}

CURRENT='' CURRENT_T0=0
phase() { # NAME COMMAND...: run, time, record
  local name=$1 t0=$SECONDS rc=0
  shift
  note "== $name"
  CURRENT=$name CURRENT_T0=$t0
  "$@" || rc=$?
  CURRENT=''
  TIMES+=("$(printf '%-44s %5d s%s' "$name" $((SECONDS - t0)) "$([ $rc -eq 0 ] || echo "  FAILED (exit $rc)")")")
  return $rc
}

summary() {
  local t
  if [ -n "$CURRENT" ]; then
    TIMES+=("$(printf '%-44s %5d s  interrupted' "$CURRENT" $((SECONDS - CURRENT_T0)))")
  fi
  [ ${#TIMES[@]} -eq 0 ] && return 0
  note "phases:"
  for t in "${TIMES[@]}"; do note "  $t"; done
}

# the package names of an `apt-get ... install [-opts] PKGS...` line
line_packages() {
  local w seen=0
  for w in $1; do
    if [ "$seen" -eq 1 ]; then
      case $w in -*) ;; *) echo "$w" ;; esac
    elif [ "$w" = install ]; then
      seen=1
    fi
  done
}

installed() { in_root "dpkg-query -W -f='\${Status}' $1 2>/dev/null | grep -q 'install ok installed'"; }

# --user: install-deps.sh as the user must fail and print the exact line for root
user_deps() {
  local out rc=0 line p missing=()
  out=$(as_user 'cd /work/distflow && bash scripts/install-deps.sh' 2>&1) || rc=$?
  printf '%s\n' "$out" >&2
  [ "$rc" -eq 1 ] || { echo "check-fresh: install-deps.sh as $CF_USER exited $rc, not 1" >&2; return 1; }
  line=$(printf '%s\n' "$out" | sed -n 's/^run as root: *//p')
  [ -n "$line" ] || { echo "check-fresh: install-deps.sh printed no 'run as root:' line" >&2; return 1; }
  mapfile -t missing < <(line_packages "$line")
  [ ${#missing[@]} -gt 0 ] || { echo "check-fresh: no packages in: $line" >&2; return 1; }
  for p in "${missing[@]}"; do
    if installed "$p"; then
      echo "check-fresh: the line names $p, which is already installed" >&2
      return 1
    fi
  done
  note "running the printed line as root: $line"
  in_root "$line" >/dev/null
  for p in "${missing[@]}"; do
    installed "$p" || { echo "check-fresh: $p is still not installed" >&2; return 1; }
  done
  rc=0
  out=$(as_user 'cd /work/distflow && bash scripts/install-deps.sh' 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
    printf '%s\n' "$out" >&2
    echo "check-fresh: after the line, install-deps.sh as $CF_USER still fails (exit $rc)" >&2
    return 1
  fi
  note "the line installed exactly the ${#missing[@]} missing packages; install-deps.sh is now silent"
}

inner() {
  local status=0 run
  trap 'summary; unmount_all' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  mount_root "$CF_ROOT"
  if [ "$CF_MODE" = enter ]; then
    chroot "$CF_ROOT" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -l || true
    return 0
  fi
  note "in $CF_ROOT, $(in_root 'nproc') cores, as $([ "$CF_MODE" = user ] && echo "user $CF_USER" || echo root)"
  if [ "$CF_MODE" = user ]; then
    # the installer creates one normal user on a machine
    in_root "useradd --create-home --shell /bin/bash $CF_USER && chown -R $CF_USER: /work/distflow"
    phase "apt install (install-deps line, as root)" user_deps || return 1
    run=as_user
  else
    phase "apt install (scripts/install-deps.sh)" in_root 'cd /work/distflow && bash scripts/install-deps.sh' || return 1
    run=in_root
  fi
  phase "build (make build)" $run 'cd /work/distflow && make build' || return 1
  phase "tests (make test)" $run 'cd /work/distflow && make test' || status=1
  if [ "$CF_DEMO" = 1 ]; then
    phase "demo (make demo)" $run 'cd /work/distflow && make demo' || status=1
  fi
  return $status
}

# ---------------------------------------------------------------------------------------------
# outside: options, the cached bootstrap, a fresh root, the checkout
# ---------------------------------------------------------------------------------------------
usage() { sed -n '2,/^# shellcheck/{/^# shellcheck/d;s/^# \{0,1\}//;p}' "$SELF"; }

# the mount points of DIR and below, in this mount namespace
mounts_under() {
  awk -v d="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' /proc/self/mountinfo
}

# runs the inner part as PID 1 of a private mount + PID namespace
namespaced() {
  unshare --mount --pid --fork --propagation private --kill-child -- "$@"
}

# the URI the host's apt uses for SUITE (one-line and deb822 sources), if any
host_uri() {
  local suite=$1 f
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -r "$f" ] || continue
      awk -v s="$suite" '$1 == "deb" {
          i = 2
          if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) == s) { print $i; exit }
        }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -r "$f" ] || continue
      awk -v s="$suite" '
        function flush() {
          if ((" " types " ") ~ / deb / && (" " suites " ") ~ (" " s " ") && uris != "" && enabled != "no") {
            split(uris, u, " "); print u[1]; found = 1; exit
          }
          types = suites = uris = enabled = ""
        }
        /^[ \t]*$/ { flush(); next }
        /^#/ { next }
        { k = tolower($1); sub(/:$/, "", k); $1 = ""; sub(/^ +/, "")
          if (k == "types") types = $0; else if (k == "uris") uris = $0
          else if (k == "suites") suites = $0; else if (k == "enabled") enabled = tolower($0) }
        END { if (!found) flush() }' "$f"
    done
  } | head -n 1
}

WORK=
# on every exit: remove the root (unless --keep), never while anything is mounted in it
cleanup() {
  local rc=$? left
  trap - EXIT INT TERM
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    left=$(mounts_under "$WORK")
    if [ -n "$left" ]; then
      # cannot happen with the private namespace; never delete through a mounted /dev or /proc
      echo "check-fresh: still mounted, $WORK left in place:" >&2
      printf '  %s\n' "$left" >&2
    elif [ "$KEEP" -eq 1 ]; then
      note "root kept: $WORK/root   (a shell in it: $0 --enter $WORK/root; remove with rm -rf $WORK)"
    else
      rm -rf "$WORK"
    fi
  fi
  exit "$rc"
}

# The whole run is in functions: bash reads a script as it goes, and this one runs for many
# minutes, during which the checkout (this file included) may well be edited.
main() {
  DEMO=0 KEEP=0 REFRESH=0 MODE=root ENTER=
  while [ $# -gt 0 ]; do
    case $1 in
      --demo) DEMO=1 ;;
      --keep) KEEP=1 ;;
      --refresh) REFRESH=1 ;;
      --user) MODE=user ;;
      --enter)
        [ $# -ge 2 ] || die "--enter needs the directory of a root kept by --keep"
        ENTER=$2
        shift
        ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
  done

  if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "check-fresh: needs Debian's debootstrap package" >&2
      echo "run as root:  apt-get update && apt-get install -y --no-install-recommends debootstrap" >&2
      exit 1
    fi
    note "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || die "apt-get update failed (apt's messages above)"
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
      die "apt-get install debootstrap failed (apt's messages above)"
  fi
  [ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount and chroot): run it as root, e.g. with sudo"
  for c in unshare chroot git tar gzip; do
    command -v "$c" >/dev/null 2>&1 || die "needs '$c', which is not installed"
  done

  if [ -n "$ENTER" ]; then
    ENTER=$(readlink -f "$ENTER")
    [ -x "$ENTER/bin/bash" ] || die "$ENTER is not a root kept by --keep"
    CF_ROOT=$ENTER CF_MODE=enter namespaced bash "$SELF" --inner
    return 0
  fi

  ARCH=$(dpkg --print-architecture)
  MIRROR=${DISTFLOW_FRESH_MIRROR:-$(host_uri $SUITE)}
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  SECURITY=${DISTFLOW_FRESH_SECURITY:-$(host_uri $SUITE-security)}
  SECURITY=${SECURITY:-http://deb.debian.org/debian-security}
  TARBALL=${DISTFLOW_FRESH_TARBALL:-${XDG_CACHE_HOME:-$HOME/.cache}/distflow/debootstrap-$SUITE-$ARCH.tar.gz}
  TMPBASE=${DISTFLOW_FRESH_TMPDIR:-/var/tmp}

  REPO=$(git -C "$(dirname "$SELF")" rev-parse --show-toplevel) ||
    die "$(dirname "$SELF")/.. is not a git checkout git can read (above): check-fresh tests a clean clone of its HEAD"
  HEAD=$(git -C "$REPO" rev-parse HEAD)
  SHARED=$REPO/../shared
  if [ -n "$(git -C "$REPO" status --porcelain)" ]; then
    note "WARNING: $REPO has uncommitted changes or untracked files; they are NOT tested"
    note "         (the root gets a clean clone of HEAD $(git -C "$REPO" rev-parse --short HEAD))"
  fi

  trap cleanup EXIT
  trap 'note interrupted; exit 130' INT
  trap 'note terminated; exit 143' TERM

  # ---- the cached bootstrap ----
  if [ $REFRESH -eq 1 ] || [ ! -s "$TARBALL" ]; then
    mkdir -p "$(dirname "$TARBALL")" "$TMPBASE"
    WORK=$(mktemp -d "$TMPBASE/distflow-bootstrap.XXXXXX")
    note "bootstrapping Debian $SUITE ($ARCH) from $MIRROR into $TARBALL (a few minutes, once)"
    t0=$SECONDS
    # The variant: debootstrap's default installs the packages of Priority required and important,
    # which is what the Debian installer puts on a machine when no task is selected (besides a
    # kernel and a boot loader): procps, iproute2, less, cron, ... . minbase (required only) is a
    # container image, smaller than any real machine; buildd would bring build-essential and hide a
    # missing entry of install-deps.sh; the installer's optional "standard system utilities" task
    # (openssh-client, python3 through reportbug, ...) is not on every machine (nor on cloud images
    # built without it), so it is left out: what passes here passes on any installed Debian 12.
    include=()
    # an https mirror needs the certificates a machine installed from it has
    case $MIRROR in https:*) include=(--include=ca-certificates) ;; esac
    namespaced debootstrap --arch="$ARCH" ${include[@]+"${include[@]}"} "$SUITE" "$WORK/root" "$MIRROR" \
      >"$WORK/debootstrap.log" 2>&1 || {
      tail -n 30 "$WORK/debootstrap.log" >&2
      die "debootstrap failed (last lines above; the log $WORK/debootstrap.log is removed on exit)"
    }
    tar -C "$WORK/root" --numeric-owner --xattrs --xattrs-include='*' -czf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    [ -z "$(mounts_under "$WORK")" ] && rm -rf "$WORK"
    WORK=
    note "bootstrap: $((SECONDS - t0)) s ($(du -h "$TARBALL" | cut -f1) tarball)"
  fi

  # ---- a bare root, extracted fresh ----
  mkdir -p "$TMPBASE"
  WORK=$(mktemp -d "$TMPBASE/distflow-fresh.XXXXXX")
  ROOT=$WORK/root
  mkdir "$ROOT"
  t0=$SECONDS
  tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -xpzf "$TARBALL"
  note "extraction: $((SECONDS - t0)) s ($TARBALL -> $ROOT)"

  # Differences between a chroot and a machine, made good here (nothing a machine lacks too):
  # DNS: a machine gets its resolver from the installer / DHCP; apt in the root uses the host's.
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # The root shares the host's hostname (same UTS namespace); the installer writes /etc/hostname and
  # an /etc/hosts naming it, so that the hostname resolves (OpenMPI looks it up).
  hostname >"$ROOT/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' \
    "$(hostname)" >"$ROOT/etc/hosts"
  # apt sources: debootstrap writes only "$SUITE main"; the installer adds the security and updates
  # suites. Same mirrors as the host.
  printf 'deb %s %s main\ndeb %s %s-security main\ndeb %s %s-updates main\n' \
    "$MIRROR" "$SUITE" "$SECURITY" "$SUITE" "$MIRROR" "$SUITE" >"$ROOT/etc/apt/sources.list"

  # The checkout: a clean clone of HEAD, as CI checks out; ../shared beside it, as CI places it.
  mkdir -p "$ROOT/work"
  git clone --quiet --no-hardlinks --no-checkout "$REPO" "$ROOT/work/distflow" ||
    die "git clone of $REPO failed (git's message above; for 'dubious ownership', run check-fresh with sudo as the checkout's owner)"
  git -C "$ROOT/work/distflow" checkout --quiet --detach "$HEAD"
  if [ -d "$SHARED" ]; then
    # a copy of what it points to, if ../shared is a symbolic link (as on some CI machines)
    cp -a "$(readlink -f "$SHARED")" "$ROOT/work/shared"
  else
    note "WARNING: no $SHARED beside the checkout: the tests that read real tokenizers and datasets will fail"
  fi
  note "checkout: $(git -C "$REPO" log -1 --format='%h %s' "$HEAD" | cut -c1-100)"

  local rc=0
  CF_ROOT=$ROOT CF_MODE=$MODE CF_DEMO=$DEMO CF_USER=distflow-user namespaced bash "$SELF" --inner || rc=$?
  if [ $rc -eq 0 ]; then
    note "passed on a fresh Debian $SUITE root"
  else
    note "FAILED on a fresh Debian $SUITE root (exit $rc)"
  fi
  return $rc
}

if [ "${1:-}" = --inner ]; then inner; else main "$@"; fi; exit $?
