#!/usr/bin/env bash
# Runs check_dashboards.js from the runfiles (//tests:grafana_schema_test). Fails, never skips,
# when Node.js or the npm packages are missing: tools/setup installs them.
set -euo pipefail
if ! command -v node >/dev/null; then
  echo "FAIL: node is not installed; run tools/setup" >&2
  exit 1
fi
exec node tests/grafana_schema/check_dashboards.js
