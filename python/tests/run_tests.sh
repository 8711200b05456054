#!/usr/bin/env bash
# Bazel sh_test driver for the ringmaster package's tests (python/BUILD): copies the package into
# $TEST_TMPDIR, generates its stubs there with python/generate_stubs.sh (from the runfiles'
# proto/), and runs the unittest suites under Debian's /usr/bin/python3 (python3-grpcio,
# python3-protobuf, python3-yaml: tools/setup). Prints "N passed, N failed, N skipped" last, for
# CI (python/run_unittest.sh).
set -euo pipefail

runfiles="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:-ringmaster}"
pkg="$TEST_TMPDIR/pkg"
rm -rf "$pkg" && mkdir -p "$pkg"
cp -rL "$runfiles/python/ringmaster" "$pkg/ringmaster"
rm -rf "$pkg/ringmaster/_proto"
"$runfiles/python/generate_stubs.sh" "$pkg/ringmaster/_proto"

export RINGMASTER_TEST_BIN="$runfiles"
export RINGMASTER_TEST_SRC="$runfiles"
export PYTHONPATH="$pkg"
cd "$runfiles/python/tests"
exec "$runfiles/python/run_unittest.sh" test_job_file test_client
