#!/usr/bin/env bash
# bench/gpu_job on emulated GPUs: a local cluster (coordinator, one agent offering the emulated
# GPUs it discovers) built with --config=emu (testing/cuda_emu), a one-rank GPT job on GPU 0
# (small model: GPU_JOB_MODEL=small), the rank SIGKILLed after its first checkpoint, resumed,
# SUCCEEDED. The GPU machine runs the same script on a real GPU (bench/gpu_bench), so a break in
# it, the agent's GPU assignment or the trainer's GPU wiring shows here first.
#
#   emulated_gpu_job_test.sh COORDINATOR AGENT RINGCTL TRAINER
set -euo pipefail
bin="$TEST_TMPDIR/bin"
mkdir -p "$bin/coordinator" "$bin/agent" "$bin/ctl" "$bin/trainer"
ln -sf "$PWD/$1" "$bin/coordinator/coordinator"
ln -sf "$PWD/$2" "$bin/agent/agent"
ln -sf "$PWD/$3" "$bin/ctl/ringctl"
ln -sf "$PWD/$4" "$bin/trainer/trainer"
log="$TEST_TMPDIR/gpu_job.log"
# Short: the agent's Unix socket path must fit in 107 bytes, which $TEST_TMPDIR's may not.
cluster=$(mktemp -d /tmp/rm-gpu-job.XXXXXX)
trap 'rm -rf "$cluster"' EXIT
# Bounded below the test's own timeout, so that a hang still prints the log.
if ! GPU_JOB_MODEL=small timeout 600 bench/gpu_job "$bin" "$cluster" gpu >"$log" 2>&1; then
  cat "$log"
  echo "FAILED: bench/gpu_job"
  exit 1
fi
cat "$log"
expect() {
  grep -qE "$1" "$log" || { echo "FAILED: no line matching /$1/"; exit 1; }
}
expect 'agent-0: devices gpu'
expect 'training on Emulated GPU'
expect 'resumed from the checkpoint at step'
expect '^metrics: ringmaster_loss\{'
expect 'SUCCEEDED'
