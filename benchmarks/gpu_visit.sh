#!/usr/bin/env bash
# A GPU visit in one command: install amp-suite offline beside the frameworks the machine already has,
# run one phase of the acceptance under a time budget, and pack what it wrote.
#
#   benchmarks/gpu_visit.sh [--wheels DIR] [--out DIR] [--budget SECONDS] [--frameworks LIST] [--resume]
#                           [--checks KEYS] [--device gpu|cpu|auto] [-- EXTRA COMMAND ...]
#
# Run it twice on a machine lent for a quarter of an hour: the first call runs the most informative checks
# that fit in --budget (default 420 s), the second (--resume) the rest; docs/gpu.md quotes the times an
# H100 took. Nothing is downloaded: --wheels names a folder of wheels the machine lacks (for example
# dm-haiku and jmp for JAX, keras, namex and optree for Keras 3 on JAX or PyTorch; fetch them where a
# registry is reachable with `pip download --no-deps`), installed with --no-index --no-deps. amp-suite
# itself installs with `pip install --no-index --no-deps --no-build-isolation -e .`.
#
# Everything lands under --out (default ./gpu-visit): acceptance.md, its state acceptance.json, the
# runs' folders and logs, and gpu-visit.tar.gz holding all of it. The script exits with the acceptance's
# code; a phase stopped by a signal still leaves its report (written before each command).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
wheels="" out="$PWD/gpu-visit" budget=420 frameworks="" resume="" checks="" device=gpu extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --frameworks) frameworks="$2"; shift 2 ;;
    --checks) checks="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --resume) resume="--resume"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_visit.sh: unknown option '$1'; allowed: --wheels DIR, --out DIR, --budget SECONDS, --frameworks LIST, --checks KEYS, --device D, --resume, -- COMMAND" >&2; exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9.]*) echo "gpu_visit.sh: --budget must be a number of seconds, got '$budget'" >&2; exit 2 ;; esac

# PYTHON: the interpreter that holds the frameworks; PIP: how to run pip for it (default: its own pip)
python="${PYTHON:-python3}"
read -r -a pip <<< "${PIP:-$python -m pip}"
mkdir -p "$out"
started=$(date +%s)
say() { echo "gpu_visit: $* ($(( $(date +%s) - started )) s)"; }

if [ -n "$wheels" ]; then
  if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
    echo "gpu_visit.sh: --wheels $wheels holds no .whl file" >&2; exit 2
  fi
  "${pip[@]}" install -q --no-index --no-deps --no-compile "$wheels"/*.whl || { echo "gpu_visit.sh: the carried wheels did not install" >&2; exit 2; }
  say "installed $(ls "$wheels"/*.whl | wc -l) carried wheels"
fi
"${pip[@]}" install -q --no-index --no-deps --no-build-isolation -e "$here" \
  || { echo "gpu_visit.sh: amp-suite did not install offline (pip install --no-index --no-deps --no-build-isolation -e .)" >&2; exit 2; }
say "installed amp-suite offline"

nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv > "$out/nvidia-smi.csv" 2>&1 || true
"$python" -m amp_suite list > "$out/list.txt" 2>&1 || true

args=(doctor --acceptance --device "$device" --report "$out/acceptance.md" --budget "$budget")
[ -n "$frameworks" ] && args+=(--frameworks "$frameworks")
[ -n "$checks" ] && args+=(--checks "$checks")
[ -n "$resume" ] && args+=(--resume)
say "amp-suite ${args[*]}"
"$python" -m amp_suite "${args[@]}" 2>&1 | tee "$out/acceptance.log"
code=${PIPESTATUS[0]}
say "acceptance phase exited $code"

if [ ${#extra[@]} -gt 0 ]; then
  say "extra: ${extra[*]}"
  "${extra[@]}" 2>&1 | tee "$out/extra.log"
fi

# Pack the reports, the state and the logs (the runs' folders hold sweeps' results and reports).
(cd "$out" && tar -czf gpu-visit.tar.gz --exclude=gpu-visit.tar.gz . 2>/dev/null) || true
say "packed $out/gpu-visit.tar.gz"
exit "$code"
