"""``amp-suite doctor``: does this machine measure what the suite says it measures?

A user runs it once on a new machine.  It checks that each installed framework
sees the expected device (a CUDA GPU on a machine with an NVIDIA GPU), that
fp32 is float32 and tf32 is TF32 on matmuls and convolutions, that the AMP
precisions compute in their reduced dtype with float32 parameters and logits,
that the fp16 loss scale skips and grows, that a step's time covers finished
device work, that the peak-memory APIs answer and that JAX does not
preallocate.  Checks that need a GPU are skipped, with the reason, where there
is none.

Layout: :mod:`.checks` judges plain numbers (pure, tested with GPU numbers on
any machine); each framework plugin's probe (the module its
``FrameworkInfo.doctor_probe`` names, written with :mod:`.probe_kit`)
measures them in its own process; :mod:`.runner` ties both together and
prints the table; :mod:`.acceptance` is ``amp-suite doctor --acceptance`` (its plan, judges, run
and report each a module of its own: ``acceptance_*.py``).  No framework is imported by this package.
"""

from __future__ import annotations

from amp_suite.doctor.checks import CheckResult
from amp_suite.doctor.runner import DoctorPlan, render_table, run_checks, summary_line

__all__ = ["CheckResult", "DoctorPlan", "render_table", "run_checks", "summary_line"]
