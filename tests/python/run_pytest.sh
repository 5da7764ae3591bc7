#!/usr/bin/env bash
# Runs the Python package's pytest suite (tests/python) against this build: a venv under the
# build dir (BUILD/pyenv, made once: numpy, pyzmq, protobuf, pytest and grpcio-tools from PyPI),
# `pip install ./bindings/python` into it, then pytest with libspecd found through the build
# tree's specd.pc. Usage: run_pytest.sh BUILD_DIR SOURCE_DIR [pytest args...]
set -euo pipefail
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
shift 2
venv=$bin/pyenv
# grpcio-tools 1.62.3 is the generator regenerate.sh names (the generated-code check needs it);
# it pins protobuf 4.x, the oldest runtime the package supports.
reqs="numpy pyzmq pytest grpcio-tools==1.62.3 setuptools>=70 wheel"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.reqs" 2>/dev/null)" != "$reqs" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $reqs
  echo "$reqs" > "$venv/.reqs"
fi
# the package as a user installs it (no build isolation: setuptools is already in the venv)
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --force-reinstall \
  --no-deps "$src/bindings/python"
export PKG_CONFIG_PATH="$bin${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export SPECD_BUILD_DIR=$bin SPECD_SOURCE_DIR=$src
cd "$src/tests/python"  # not bindings/python: import the installed package
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" .
