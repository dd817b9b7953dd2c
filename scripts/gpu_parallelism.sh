#!/usr/bin/env bash
# Phase 4 (FSDP, FSDP+EP, TP, FSDP+TP+EP against one process) on NCCL, on the CUDA devices present, with the same
# configurations and parity rule as the tested CPU/gloo path. Usage: scripts/gpu_parallelism.sh [--out DIR] MODEL...
# Records go to DIR (default reports_gpu/) so the committed CPU records are not overwritten. Without a CUDA device
# it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
out=reports_gpu
if [ "${1:-}" = "--out" ]; then out=$2; shift 2; fi
[ "$#" -gt 0 ] || set -- qwen3_moe
read -r world line < <(python -c "
import torch
from moe_bench.parallelism import gpu_plan
world, line = gpu_plan(torch.cuda.device_count())
print(world, line)")
echo "$line"
[ "$world" -gt 0 ] || exit 0
rc=0
for model in "$@"; do
    MOE_BENCH_NPROC=$world moe-bench run "$model" --phases 4 --out "$out" --no-progress || rc=$?
done
exit "$rc"
