#!/usr/bin/env bash
# One short GPU visit for PyTorch's speed and execution modes (issue 43), most important first.
# Each step has its own time limit, so one slow step cannot take the others' time; every output
# lands in the folder given as $1 (default: gpu-visit-torch).  Steps 1-4 take about 6-7 minutes
# on an H100 (limits: 12 min); step 5 only matters if time is left: stop the script there if not.
#
#   bash benchmarks/gpu_visit_torch.sh [OUT_DIR] [PYTHON]
#
# PYTHON defaults to .venv/bin/python; amp-suite is run as "$PYTHON -m amp_suite".
set -u
out=${1:-gpu-visit-torch}
python=${2:-.venv/bin/python}
mkdir -p "$out"
step() {  # step NAME SECONDS COMMAND...: run COMMAND under a limit, its output in $out/NAME.txt
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*" | tee "$out/$name.txt"
    local began=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >>"$out/$name.txt" 2>&1
    echo "== $name: exit $? after $((SECONDS - began)) s" | tee -a "$out/$name.txt"
    tail -n 25 "$out/$name.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1

# 1. Where the eager step's time goes (host time, kernels per step, GPU idle): ~20 s.
step profile-eager-bf16 90 "$python" benchmarks/profile_torch_step.py --device cuda --workload cifar10_resnet18 \
    --precision amp_bf16 --mode eager --out "$out" --trace
# 2. Modes as a sweep axis, tf32 and amp_bf16: eager, the whole step compiled, CUDA graphs: ~3-4 min
#    (each compiled cell compiles for 30-60 s in its warm-up; a stopped sweep still writes its report).
step sweep-modes 330 "$python" -m amp_suite run --frameworks torch --workloads cifar10_resnet18 \
    --modes eager,compiled,cudagraphs --precisions tf32,amp_bf16 --device gpu --repeats 1 --steps 300 \
    --dataset synthetic --out "$out/sweep-modes" -q
# 3. The suite's step against an idiomatic PyTorch loop, ResNet-18, eager: ~1 min.
step speed-eager 150 "$python" benchmarks/torch_gpu_speed.py --device cuda --workloads cifar10_resnet18 \
    --precisions tf32,amp_bf16,fp32,amp_fp16 --modes eager --steps 80 --warmup 20
# 4. Batch size as a sweep axis, eager: ~1.5 min (100 steps an epoch: synthetic data holds steps x batch
#    images, 2.5 GB at batch 2048; the timing extension trains on past the epoch).
step sweep-batches 150 "$python" -m amp_suite run --frameworks torch --workloads cifar10_resnet18 \
    --modes eager --batch-sizes 128,512,2048 --precisions tf32,amp_bf16 --device gpu --repeats 1 --steps 100 \
    --dataset synthetic --out "$out/sweep-batches" -q
# 5. If time is left: tf32's eager profile, why the old option compile = true (the forward alone) made tf32
#    slower, and the CUDA-graph step's profile (compilation 30-60 s of each of the last two).
step profile-eager-tf32 60 "$python" benchmarks/profile_torch_step.py --device cuda --workload cifar10_resnet18 \
    --precision tf32 --mode eager --out "$out"
step profile-forward-compile-tf32 120 "$python" benchmarks/profile_torch_step.py --device cuda \
    --workload cifar10_resnet18 --precision tf32 --mode eager --forward-compile --out "$out"
step profile-cudagraphs-bf16 150 "$python" benchmarks/profile_torch_step.py --device cuda \
    --workload cifar10_resnet18 --precision amp_bf16 --mode cudagraphs --out "$out"
for report in "$out"/sweep-*/report.md; do  # the reports beside the logs, for a quick read
    [ -f "$report" ] && cp "$report" "$out/$(basename "$(dirname "$report")")-report.md"
done
