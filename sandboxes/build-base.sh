#!/usr/bin/env bash
# Build swerl's offline Python base image: Debian bookworm from the host's apt sources
# (mmdebstrap) piped into `docker import`. Usage: build-base.sh IMAGE_TAG
# The image has python3, pip, pytest (Debian packages), python/pip/pip3 names on PATH,
# no EXTERNALLY-MANAGED marker (so `pip install pytest` is an offline no-op), bash, procps,
# coreutils `timeout`, tmux and python3-venv. swerl tags it under the python:3.X-slim names.
# `pip`/`pip3` go through pip-offline-fastpath.sh (an instant "already satisfied" for installed
# packages, the real pip for anything else).
# The recipe hash (sha256 of this file and the fast path) is part of IMAGE_TAG: edit -> new image.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tag="${1:?usage: build-base.sh IMAGE_TAG}"
suite="${SWERL_BASE_SUITE:-bookworm}"
packages="python3,python3-pip,python3-pytest,python3-venv,procps,tmux,ca-certificates"

mmdebstrap --quiet --variant=apt --include="$packages" \
  --customize-hook='for n in python pip pip3; do
      t=$(chroot "$1" sh -c "command -v $n" || true)
      [ -n "$t" ] && continue
      case $n in python) src=/usr/bin/python3;; *) src=/usr/bin/pip3;; esac
      [ -e "$1$src" ] && ln -sf "$src" "$1/usr/local/bin/$n"
    done' \
  --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
  --customize-hook="copy-in $here/pip-offline-fastpath.sh /usr/local/lib" \
  --customize-hook='chmod 755 "$1/usr/local/lib/pip-offline-fastpath.sh"
    for n in pip pip3; do ln -sf /usr/local/lib/pip-offline-fastpath.sh "$1/usr/local/bin/$n"; done' \
  --customize-hook='mkdir -p "$1/app" "$1/logs"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
  "$suite" - \
  | docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
      --change 'ENV PIP_ROOT_USER_ACTION=ignore' \
      --change 'ENV PIP_DISABLE_PIP_VERSION_CHECK=1' \
      --change 'WORKDIR /' \
      --change 'CMD ["bash"]' \
      --message "swerl offline base ($suite)" \
      - "$tag"
