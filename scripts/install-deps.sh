#!/usr/bin/env bash
# Installs the Debian packages floodgate needs, only those that are missing.
# groff-base: example-check checks the man pages with groff (Debian installs
# it by default, a minimal image does not). python3-venv, -pip, -setuptools,
# -wheel: test_python_packaging.py installs bindings/python into a venv
# offline (pip --no-build-isolation --no-index builds with these).
# python3-pytest-xdist: make integration runs the suite on several workers.
set -euo pipefail

packages=(gcc make clang libclang-rt-14-dev pkg-config redis-server redis-tools python3 python3-pytest
          python3-pytest-xdist python3-redis python3-venv python3-pip python3-setuptools python3-wheel libcmocka-dev libhiredis-dev libconfig-dev libxxhash-dev libevent-dev nginx nginx-dev wrk curl gnuplot-nox
          util-linux iproute2 groff-base)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Debian starts a redis-server service on install; floodgate runs its own.
$sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
# The same for nginx: the tests start their own on free ports.
$sudo systemctl disable --now nginx >/dev/null 2>&1 || true
