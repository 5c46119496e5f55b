#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io if absent, start dockerd if not running.
# SWERL_RUNSC=1 (`make docker RUNSC=1`): also install gVisor (Debian's runsc) and register it with
# dockerd as the OCI runtime "runsc" (sandbox.runtime: runsc; docs/sandbox.md, "A kernel boundary");
# exit 3 when that fails. SWERL_RUNSC=try: the same, but a failure is only reported (CI).
set -euo pipefail
RUNSC=${SWERL_RUNSC:-0}
DAEMON_JSON=${SWERL_DAEMON_JSON:-/etc/docker/daemon.json}
export DEBIAN_FRONTEND=noninteractive
# mmdebstrap builds the offline base image (sandboxes/build-base.sh) from the host's apt sources;
# docker-registry (CNCF distribution) serves the fleet's registry test, iproute2 (`ip`) wires the
# second engine's network namespace to it, and headless chromium renders the report and the viewer
# in their tests.
if ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v docker-registry >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1 \
    || ! command -v chromium >/dev/null 2>&1 || ! { docker info >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1; }; then
  echo "swerl: installing docker.io, mmdebstrap, docker-registry, iproute2 and chromium (apt)" >&2
  apt-get update -qq
  apt-get install -y -qq docker.io mmdebstrap docker-registry iproute2 chromium >/dev/null
fi
runsc_failed() {
  echo "swerl: $1" >&2
  if [ "$RUNSC" = try ]; then RUNSC=0; echo "swerl: going on without runsc (SWERL_RUNSC=try)" >&2; else exit 3; fi
}
if [ "$RUNSC" = try ] || [ "$RUNSC" = 1 ]; then
  if ! command -v runsc >/dev/null 2>&1; then
    echo "swerl: installing runsc (gVisor, apt)" >&2
    apt-get install -y -qq runsc >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq runsc >/dev/null; } \
      || runsc_failed "apt-get could not install runsc"
  fi
  [ "$RUNSC" = 0 ] || RUNSC=1
fi

# Register runsc in dockerd's config (kept: every other key and runtime). --network=none: swerl's
# trial containers have no network unless a task asks, and Debian bookworm's runsc (2022-12-19)
# refuses its own sandbox network on kernels that show /proc/sys/net/core/rmem_default in every
# network namespace (it takes that file for the root namespace's). Platform: ptrace, its default.
register_runsc() {
  mkdir -p "$(dirname "$DAEMON_JSON")"
  python3 - "$DAEMON_JSON" "$(command -v runsc)" <<'EOF'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
entry = {"path": runsc, "runtimeArgs": ["--network=none"]}
if config.get("runtimes", {}).get("runsc") != entry:
    config.setdefault("runtimes", {})["runsc"] = entry
    with open(path + ".swerl-tmp", "w") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    os.replace(path + ".swerl-tmp", path)
EOF
}
has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
[ "$RUNSC" = 1 ] && register_runsc

if ! docker info >/dev/null 2>&1; then
  echo "swerl: starting dockerd" >&2
  nohup dockerd >/var/log/swerl-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    echo "swerl: dockerd did not answer within 60 s; see /var/log/swerl-dockerd.log" >&2
    exit 3
  fi
fi
if [ "$RUNSC" = 1 ] && ! has_runsc; then
  # A running dockerd reloads its runtimes on SIGHUP; its containers are not touched.
  echo "swerl: registering runsc with the running dockerd (SIGHUP)" >&2
  pid=$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd || true)
  [ -n "$pid" ] && kill -HUP $pid
  for _ in $(seq 1 20); do has_runsc && break; sleep 0.5; done
  has_runsc || runsc_failed "dockerd does not list runsc after a reload of $DAEMON_JSON; is it started with another --config-file?"
fi
