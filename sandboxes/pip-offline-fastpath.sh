#!/bin/bash
# `pip`/`pip3` of swerl's offline base image: a fast path in front of the real pip.
#
# Verifiers start with `pip3 install pytest || true` (pymethods2test's test.sh). Offline and
# with pytest installed, pip only answers "Requirement already satisfied", after ~0.3 s of
# start-up in every trial. This script gives the same answer for `install NAME...` when every
# NAME is an installed distribution (plain names, no version specifiers, no options other
# than quiet/cache flags), in a few milliseconds; any other command line runs the real pip
# (`python3 -m pip`) unchanged.
real_pip() { exec python3 -m pip "$@"; }
[ "$1" = install ] || real_pip "$@"
quiet=0
names=()
for arg in "${@:2}"; do
  case "$arg" in
    -q|-qq|-qqq|--quiet) quiet=1 ;;
    --disable-pip-version-check|--no-cache-dir|--root-user-action=ignore|--no-input|--break-system-packages) ;;
    -*) real_pip "$@" ;;
    *) [[ "$arg" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || real_pip "$@"; names+=("$arg") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || real_pip "$@"
shopt -s nullglob nocaseglob
lines=()
for name in "${names[@]}"; do
  norm="${name//[-.]/_}"
  found=""
  for site in /usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages /usr/lib/python3*/site-packages; do
    for meta in "$site/$norm"-*.dist-info "$site/$norm"-*.egg-info "$site/$name"-*.dist-info "$site/$name"-*.egg-info; do
      base="${meta##*/}"; version="${base#*-}"; version="${version%.*-info}"
      found="Requirement already satisfied: $name in $site ($version)"; break 2
    done
  done
  [ -n "$found" ] || real_pip "$@"
  lines+=("$found")
done
[ "$quiet" = 1 ] || printf '%s\n' "${lines[@]}"
exit 0
