#!/usr/bin/env bash
# Runs a deploy/validation test (a Node.js script, given with its arguments) from the runfiles.
# Fails loudly, never skips, when Node.js is missing: tools/setup installs it.
set -euo pipefail
if ! command -v node >/dev/null; then
  echo "FAIL: node is not installed; run tools/setup" >&2
  exit 1
fi
exec node "$@"
