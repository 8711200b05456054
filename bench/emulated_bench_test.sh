#!/usr/bin/env bash
# The GPU benchmarks run through, on the CPU: gpt_cuda_bench and nccl_collective_bench built
# emulated (--config=emu, testing/cuda_emu) on tiny shapes, so that a GPU session does not
# spend its time finding that one of them breaks. Checks that each prints its one-line summary
# with every field docs/benchmarks.md reads, and that the collectives' data check passes; the
# figures themselves mean nothing here.
#
#   emulated_bench_test.sh GPT_CUDA_BENCH NCCL_COLLECTIVE_BENCH
set -euo pipefail
gpt=$1 nccl=$2
tiny=(--layers=2 --d_model=64 --heads=4 --seq_len=32 --vocab=200 --batch=2 --warmup=1 --steps=2)

expect() {  # expect TEXT PATTERN WHAT
  if ! grep -qE "$2" <<<"$1"; then
    echo "FAILED: $3: no match for /$2/ in:"
    echo "$1"
    exit 1
  fi
}

for args in "--dtype=bf16" "--dtype=f32 --fuse=false" "--dtype=bf16 --attention=fused --heads=2" \
  "--dtype=bf16 --tokens=zipf"; do
  # shellcheck disable=SC2086
  if ! out=$("$gpt" "${tiny[@]}" $args 2>&1); then
    echo "$out"
    echo "FAILED: gpt_cuda_bench $args exited with an error"
    exit 1
  fi
  line=$(grep '^gpt_cuda_bench: ' <<<"$out" || true)
  expect "$line" 'padded 256' "gpt_cuda_bench $args: the padded vocabulary"
  expect "$line" '\| [0-9]+ tokens/s \| MFU [0-9.]+%' "gpt_cuda_bench $args: tokens/s and MFU"
  expect "$line" 'peak memory [0-9.]+ GiB allocated' "gpt_cuda_bench $args: peak memory"
  expect "$line" 'metrics reporting on vs off: [-+]?[0-9.]+ ms/step' "gpt_cuda_bench $args: overhead"
  expect "$out" '^gemm plans: cuBLASLt [0-9]+' "gpt_cuda_bench $args: the GEMM plans"
  want_attention=materialized
  [[ $args == *--attention=fused* ]] && want_attention=fused
  expect "$line" "attention $want_attention \\|" "gpt_cuda_bench $args: the attention kernels"
  echo "ok gpt_cuda_bench $args"
done
expect "$(grep '^gpt_cuda_bench: ' <<<"$out")" 'tokens zipf' "gpt_cuda_bench: the zipf token stream"

if ! out=$("$nccl" --max_bytes=16384 --warmup=1 --iters=2 2>&1); then
  echo "$out"
  echo "FAILED: nccl_collective_bench exited with an error"
  exit 1
fi
for op in all_reduce all_gather reduce_scatter broadcast; do
  expect "$out" "^$op +16384 " "nccl_collective_bench: $op at 16 KiB"
done
expect "$out" '4 rank\(s\)' "nccl_collective_bench: one rank per emulated GPU"
expect "$out" 'data check passed: 0 wrong elements' "nccl_collective_bench: data check"
echo "ok nccl_collective_bench"
