#!/usr/bin/env bash
# One GPU visit for what no GPU has run yet, most important first, inside one time budget. Its steps are what
# the visit of 2026-11-28 (an H200, docs/gpu.md) left to check; that visit ran the previous version of this
# script (555 s, then a second command of 142 s):
#   1. the character GPT in PyTorch, amp_bf16 and fp8, eager and compiled: the compiled fp8 step had 31
#      graph breaks and skipped the recipe's bfloat16 roundings, both mended since; does it now beat eager's?
#   2. PyTorch's modes on ResNet-18 amp_bf16, eager and cudagraphs: the cudagraphs cell's peak memory read 94 MiB
#      against eager's 484 (its peak restarted after the graphs were recorded); it now counts the recording;
#   3. the suite's eager step against an idiomatic loop, amp_bf16, two interleaved rounds (one round gave the
#      loop 9,703 images/s and the suite 15,450; tf32 agreed at 0.997 over two rounds);
#   4. PyTorch's fp8 layer against the recipe on an H200 (benchmarks/fp8_native_check.py; the budget ended first);
#   5. JAX's fp8 layer again (kept its rounding on 2026-11-28: a check that it still does).
#   The limits add up to 510 s against the default budget of 575: room for a slow start (JAX and inductor compile
#   on a fresh machine's empty caches).
#
#   benchmarks/gpu_visit_first_runs.sh [--out DIR] [--budget SECONDS] [--wheels DIR] [--pack-to DIR] [--rehearse]
#
# Each step runs under its own limit and under what is left of --budget (default 575 s); a step that no longer
# fits is skipped and says so. A sweep stopped by its limit gets SIGTERM, keeps its finished cells and writes its
# report. Everything lands under --out (default ./gpu-visit-first-runs): visit.log, one log per step, the
# sweeps' folders, and visit.tar.gz, packed again after every step so a visit cut short still brings it back
# (--pack-to also copies visit.tar.gz and visit.log to a folder after every step: a machine that sends back only
# a few files from one folder).
# --wheels installs a folder of wheels first (--no-index --no-deps: dm-haiku, jmp, keras, namex, optree), then
# amp-suite itself offline. --rehearse runs every step on the CPU with a few steps a cell: a check of the script,
# not of a GPU. PYTHON names the interpreter that holds the frameworks (default python3).
set -u

here="$(cd "$(dirname "$0")/.." && pwd)"
out="$PWD/gpu-visit-first-runs" budget=575 wheels="" rehearse="" pack_to=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --pack-to) pack_to="$2"; shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu_visit_first_runs.sh: unknown option '$1'; allowed: --out DIR, --budget SECONDS, --wheels DIR, --pack-to DIR, --rehearse" >&2
       exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "gpu_visit_first_runs.sh: --budget must be whole seconds, got '$budget'" >&2; exit 2 ;; esac

python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
mkdir -p "$out"
log="$out/visit.log"
began=$SECONDS
say() { echo "[$((SECONDS - began)) s] $*" | tee -a "$log"; }
pack() {  # tar's exit 1 (a file changed while read: a log still written) still leaves an archive worth keeping
  local part
  part=$(mktemp)
  (cd "$out" && tar -czf "$part" --exclude=visit.tar.gz . 2>/dev/null)
  [ -s "$part" ] && mv "$part" "$out/visit.tar.gz" || rm -f "$part"
  [ -n "$pack_to" ] && mkdir -p "$pack_to" && cp "$out/visit.tar.gz" "$log" "$pack_to/" 2>/dev/null
  return 0
}

# step NAME LIMIT COMMAND...: COMMAND under min(LIMIT, what is left of the budget), SIGTERM first; output in NAME.log
step() {
  local name=$1 limit=$2 left
  shift 2
  left=$((budget - (SECONDS - began)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then say "$name: skipped, ${left} s of the budget left"; return; fi
  say "$name (limit ${limit} s): $*"
  local start=$SECONDS
  timeout -s TERM --kill-after=15 "$limit" "$@" >"$out/$name.log" 2>&1
  local code=$?
  say "$name: exit $code after $((SECONDS - start)) s"
  tail -n 30 "$out/$name.log" | tee -a "$log"
  pack
}

if [ -n "$rehearse" ]; then
  device=cpu; cells=(--steps 8 --warmup 2 --no-extend-timing); gpt_steps=(--steps 8 --warmup 2 --no-extend-timing)
  shapes=gpt_mlp  # the large matmul, emulated on a CPU, takes minutes
  speed=(--device cpu --workloads mnist_cnn --precisions amp_bf16 --batch-size 16 --steps 6 --warmup 2)
else
  device=gpu; cells=(--steps 200 --epochs 1); gpt_steps=(); shapes=gpt_mlp,large
  speed=(--device cuda --workloads cifar10_resnet18 --precisions amp_bf16 --steps 80 --warmup 20)
fi

if [ -n "$wheels" ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile "$wheels"/*.whl >>"$log" 2>&1 \
    || { say "the carried wheels did not install"; exit 2; }
fi
"$python" -m pip install -q --no-index --no-deps --no-build-isolation -e "$here" >>"$log" 2>&1 \
  || { say "amp-suite did not install offline"; exit 2; }
say "installed (commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown))"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  "$python" -c 'import importlib.metadata as m
for name in ("torch", "jax", "jaxlib", "keras", "dm-haiku", "jmp", "nvidia-ml-py"):
    try: print(name, m.version(name))
    except m.PackageNotFoundError: print(name, "absent")'
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt" | tee -a "$log"

# 1. The character GPT in PyTorch, amp_bf16 and fp8, eager and compiled (4 cells: 185-190 s on the H200,
#    each compile 33-38 s).
step sweep-fp8-modes 200 "$python" -m amp_suite run --frameworks torch --workloads text_gpt_nano \
  --modes eager,compiled --precisions amp_bf16,fp8 --device "$device" --repeats 1 --timeout 120 \
  "${gpt_steps[@]}" --out "$out/sweep-fp8-modes" -q
# 2. ResNet-18 amp_bf16, eager and cudagraphs (2 cells; 22 s and 50 s on the H200).
step sweep-modes 120 "$python" -m amp_suite run --frameworks torch --workloads cifar10_resnet18 \
  --modes eager,cudagraphs --precisions amp_bf16 --device "$device" --repeats 1 --timeout 110 \
  --dataset synthetic "${cells[@]}" --out "$out/sweep-modes" -q
# 3. The suite's eager step against an idiomatic loop, amp_bf16 (four fresh processes, about 14 s each).
step speed-eager 90 "$python" "$here/benchmarks/torch_gpu_speed.py" "${speed[@]}" --modes eager --rounds 2
# 4. PyTorch's fp8 layer (23 s on an H100).
step fp8-torch 50 "$python" "$here/benchmarks/fp8_native_check.py" --framework torch --shapes "$shapes" \
  --json "$out/fp8-torch.json"
# 5. JAX's fp8 layer (32 s on the H200).
step fp8-jax 50 env XLA_PYTHON_CLIENT_PREALLOCATE=false \
  "$python" "$here/benchmarks/fp8_native_check.py" --framework jax --shapes "$shapes" --json "$out/fp8-jax.json"
for report in "$out"/sweep-*/report.md; do  # the reports beside the logs, for a quick read
  [ -f "$report" ] && cp "$report" "$out/$(basename "$(dirname "$report")")-report.md"
done
pack
say "done"
