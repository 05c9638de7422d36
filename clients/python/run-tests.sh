#!/usr/bin/env bash
# The Python client's tests (pytest) against a real relay (`wrangler dev`, started by the tests).
#
#   clients/python/run-tests.sh [pytest args...]
#
# Runs from the repository root with Debian's python3 (/usr/bin/python3, override with PYTHON=...).
# Installs what is missing, and only that: Debian's python3-msgpack, python3-httpx, python3-websockets,
# python3-pytest and python3-zstandard (the prime-rl bridge's sealed chunks) (apt-get; needs root, as on
# the project's machines), and the npm dependencies (wrangler) through scripts/ensure-deps.mjs. Nothing
# else is downloaded. Exits with pytest's code.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 1

PYTHON="${PYTHON:-/usr/bin/python3}"
if [ ! -x "$PYTHON" ]; then
  PYTHON="$(command -v python3 || true)"
fi
if [ -z "$PYTHON" ]; then
  echo "run-tests: no python3 found" >&2
  exit 1
fi

# module -> Debian package
missing=()
for pair in msgpack:python3-msgpack httpx:python3-httpx websockets:python3-websockets pytest:python3-pytest zstandard:python3-zstandard; do
  module="${pair%%:*}"
  package="${pair#*:}"
  if ! "$PYTHON" -c "import $module" >/dev/null 2>&1; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$PYTHON" != /usr/bin/python3 ]; then
    echo "run-tests: $PYTHON lacks ${missing[*]} (Debian's packages serve /usr/bin/python3 only)" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "run-tests: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else
      echo "run-tests: missing ${missing[*]}; install them as root: apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "run-tests: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >/dev/null || { echo "run-tests: apt-get update failed" >&2; exit 1; }
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || {
    echo "run-tests: apt-get install ${missing[*]} failed" >&2
    exit 1
  }
fi

# wrangler and the relay's own dependencies (a no-op when node_modules is up to date)
node scripts/ensure-deps.mjs >&2 || { echo "run-tests: npm dependencies could not be installed" >&2; exit 1; }

export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_HIDE_BANNER=true  # no network look-ups (scripts/quiet-env.mjs)
"$PYTHON" -m pytest clients/python/tests -q "$@"
exit $?
