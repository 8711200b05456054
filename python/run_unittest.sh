#!/usr/bin/env bash
# Runs unittest MODULES in the current directory under Debian's /usr/bin/python3 and prints
# "N passed, N failed, N skipped" last, for CI; exits with unittest's status. The Python
# sh_tests' drivers (python/tests/run_tests.sh, python/watch/tests/run_tests.sh) end with it.
# The log is kept in $TEST_TMPDIR/unittest.log. RINGMASTER_TEST_PYTHON, when set, is the
# interpreter instead (tools/test's torch2 pass: tools/torch2_root's launcher, whose processes
# and their children see trixie's /usr/bin/python3 with torch 2.x).
#   run_unittest.sh MODULE...
set -uo pipefail

log="${TEST_TMPDIR:?run me from a bazel test}/unittest.log"
"${RINGMASTER_TEST_PYTHON:-/usr/bin/python3}" -m unittest -v "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -1)
failed=$(grep -cE '^(FAIL|ERROR): ' "$log" || true)
skipped=$(sed -nE 's/^(OK|FAILED) \(.*skipped=([0-9]+).*/\2/p' "$log" | tail -1)
echo "$(( ${ran:-0} - failed - ${skipped:-0} )) passed, $failed failed, ${skipped:-0} skipped"
exit "$rc"
