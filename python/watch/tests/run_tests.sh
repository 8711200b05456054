#!/usr/bin/env bash
# Bazel sh_test driver for the Python watch's tests (python/watch/BUILD): runs test_watch.py
# under Debian's /usr/bin/python3 with python3-torch (tools/setup), ranks over gloo on loopback.
# Prints "N passed, N failed" last, for CI.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-ringmaster}"
# A real copy (not runfiles symlinks): the watch finds its own directory through realpath.
src="$TEST_TMPDIR/watch"
rm -rf "$src" && mkdir -p "$src"
cp -rL "$runfiles/python/watch/." "$src/"
cd "$src/tests"
set +e
/usr/bin/python3 -m unittest -v test_watch 2>&1 | tee "$TEST_TMPDIR/unittest.log"
rc=${PIPESTATUS[0]}
set -e
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$TEST_TMPDIR/unittest.log" | tail -1)
failed=$(grep -cE '^(FAIL|ERROR): ' "$TEST_TMPDIR/unittest.log" || true)
echo "$(( ${ran:-0} - failed )) passed, $failed failed"
exit "$rc"
