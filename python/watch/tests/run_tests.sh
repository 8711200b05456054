#!/usr/bin/env bash
# Bazel sh_test driver for the Python watch's tests (python/watch/BUILD): runs test_watch.py
# under Debian's /usr/bin/python3 with python3-torch (tools/setup), ranks over gloo on loopback;
# under RINGMASTER_TEST_PYTHON instead when set (tools/test's torch2 pass: torch 2.x).
# Prints "N passed, N failed, N skipped" last, for CI
# (python/run_unittest.sh).
set -euo pipefail

runfiles="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-ringmaster}"
# A real copy (not runfiles symlinks): the watch finds its own directory through realpath.
src="$TEST_TMPDIR/watch"
rm -rf "$src" && mkdir -p "$src"
cp -rL "$runfiles/python/watch/." "$src/"
cd "$src/tests"
exec "$runfiles/python/run_unittest.sh" test_watch
