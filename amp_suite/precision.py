"""The precision names amp-suite measures.

Names are explicit (TorchBench's lesson): a bare "amp" that means fp16 on a
GPU and bf16 on a CPU cannot be compared or extended.
"""

from __future__ import annotations

PRECISIONS: dict[str, str] = {
    "fp32": "float32 everywhere; TF32 tensor-core math explicitly off",
    "tf32": "float32 storage, TF32 matmul/conv math (NVIDIA Ampere and newer only)",
    "amp_fp16": "float16 compute, float32 parameters, dynamic loss scaling",
    "amp_bf16": "bfloat16 compute, float32 parameters, no loss scaling",
}

# The precision every speed-up and accuracy difference is measured against.
BASELINE = "fp32"
