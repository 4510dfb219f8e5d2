#!/usr/bin/env python3
"""Stands in for ``nvidia-smi --query-gpu=... --format=csv,noheader`` (AMP_SUITE_FAKE_NVIDIA_SMI).

Prints canned rows for the fields asked, in the order asked, like a machine
with one NVIDIA A100 (driver 580.65.06).  ``FAKE_SMI_OLD=1`` acts like an old
nvidia-smi that knows only the basic fields.
"""

import os
import sys

GPU = {
    "index": "0", "name": "NVIDIA A100-SXM4-40GB", "driver_version": "580.65.06", "memory.total": "40960 MiB",
    "compute_cap": "8.0", "clocks.max.sm": "1410 MHz", "clocks.max.memory": "1215 MHz", "power.limit": "400.00 W",
}
BASIC = ("index", "name", "driver_version", "memory.total")

query = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")), "")
fields = [f for f in query.split(",") if f]
unknown = [f for f in fields if f not in GPU or (os.environ.get("FAKE_SMI_OLD") and f not in BASIC)]
if unknown:
    print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
    sys.exit(2)
print(", ".join(GPU[f] for f in fields))
