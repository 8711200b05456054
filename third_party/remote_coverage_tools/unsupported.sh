#!/bin/sh
echo "bazel coverage is not supported in the offline Ringmaster build" >&2
exit 1
