#!/usr/bin/env bash
# The Python client's tests (pytest) against a real relay (`node scripts/relay.mjs`, started by the tests).
#
#   clients/python/run-tests.sh [pytest args...]
#
# Runs from the repository root with Debian's python3 (/usr/bin/python3, override with PYTHON=...).
# Installs what is missing, and only that: Debian's python3-msgpack, python3-httpx, python3-websockets,
# python3-pytest and python3-zstandard (the prime-rl bridge's sealed chunks) (apt-get; needs root, as on
# the project's machines; scripts/system-deps.mjs), and the npm dependencies (wrangler, Miniflare) through
# scripts/ensure-deps.mjs. Nothing else is downloaded. Exits with pytest's code.
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

# Debian's python3-* packages the tests import, installed only when missing (one apt-get, shared
# with the browser tests' Chromium: scripts/system-deps.mjs, which `npm test` runs once before its suites)
PYTHON="$PYTHON" node scripts/system-deps.mjs python || exit 1

# wrangler and the relay's own dependencies (a no-op when node_modules is up to date)
node scripts/ensure-deps.mjs >&2 || { echo "run-tests: npm dependencies could not be installed" >&2; exit 1; }

export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_HIDE_BANNER=true  # no network look-ups (scripts/quiet-env.mjs)
"$PYTHON" -m pytest clients/python/tests -q "$@"
exit $?
