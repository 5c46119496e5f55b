#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io if absent, start dockerd if not running.
set -euo pipefail
# mmdebstrap builds the offline base image (sandboxes/build-base.sh) from the host's apt sources;
# docker-registry (CNCF distribution) serves the fleet's registry test.
if ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v docker-registry >/dev/null 2>&1 || ! { docker info >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1; }; then
  echo "swerl: installing docker.io, mmdebstrap and docker-registry (apt)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io mmdebstrap docker-registry >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "swerl: starting dockerd" >&2
  nohup dockerd >/var/log/swerl-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && exit 0
    sleep 1
  done
  echo "swerl: dockerd did not answer within 60 s; see /var/log/swerl-dockerd.log" >&2
  exit 3
fi
