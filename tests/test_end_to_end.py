"""A real sweep through the CLI: every installed framework, fp32 and amp_bf16, on the packaged MNIST split."""

import csv
import importlib.util
import json

import pytest

from suite_cli import run_cli, xla_flags_at

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

INSTALLED = [name for name, module in (("torch", "torch"), ("keras", "tensorflow"), ("jax", "haiku"))
             if importlib.util.find_spec(module) is not None]


def test_every_framework_learns_real_mnist_in_fp32_and_bf16_and_the_report_compares_them(tmp_path):
    # One sweep for what were two tests (a tiny synthetic sweep checking the stores and the report, and this
    # real-MNIST one checking accuracy): they ran the same frameworks and precisions through the CLI, so the
    # six cells' framework start-ups are paid once.  Every assertion of both stays.  One epoch of 2,048 digits
    # seen twice in batches of 64 (64 updates, as many as 4,096 in batches of 128 gave, at half the images): on an
    # AMD EPYC with only AVX2, where PyTorch's bfloat16 steps are ~10x slower, the sweep took 103 s, not 182 s,
    # and every cell validated at 0.946-0.948, not 0.936-0.940.
    from amp_suite.datasets.mnist import BUNDLED_DIR

    out_dir = tmp_path / "out"
    done = run_cli("run", "--frameworks", ",".join(INSTALLED), "--workloads", "mnist_cnn",
                   "--precisions", "fp32,amp_bf16", "--dataset", "mnist", "--data-dir", str(BUNDLED_DIR),
                   "--train-split", "test[:2048]", "--val-split", "test[8000:9000]", "--steps", "32",
                   "--batch-size", "64", "--epochs", "2", "--warmup", "2", "--repeats", "1", "--out", str(out_dir),
                   "--no-download",
                   # XLA's default LLVM level (the session's 0 made these cells' training 40 s slower: tests/conftest.py)
                   env={"XLA_FLAGS": xla_flags_at(3)})
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert sorted((r["framework"], r["precision"]) for r in rows) == sorted(
        (f, p) for f in INSTALLED for p in ("fp32", "amp_bf16"))
    assert all(r["status"] == "ok" for r in rows)
    pids = {r["environment"]["pid"] for r in rows}
    assert len(pids) == len(rows)  # one fresh process per cell
    assert all(r["environment"]["cpu_model"] and r["environment"]["framework_version"] for r in rows)
    # each cell recorded the XLA flags it ran under, beside its figures
    assert all("--xla_backend_optimization_level=3" in r["environment"]["numerics_environment"]["XLA_FLAGS"]
               for r in rows), [r["environment"]["numerics_environment"] for r in rows]
    first_losses = {r["metrics"]["first_step_loss"] for r in rows if r["precision"] == "fp32"}
    assert max(first_losses) - min(first_losses) < 1e-4 * max(first_losses)  # same weights, same batch

    accuracy = {(r["framework"], r["precision"]): r["metrics"]["val_accuracy"] for r in rows}
    assert all(a > 0.9 for a in accuracy.values()), accuracy
    for framework in INSTALLED:
        assert abs(accuracy[(framework, "amp_bf16")] - accuracy[(framework, "fp32")]) < 0.03, accuracy

    report = (out_dir / "report.md").read_text()
    assert "Validation accuracy (difference from fp32)" in report and " pt)" in report
    for framework in INSTALLED:
        line = next(l for l in report.splitlines() if l.startswith(f"| mnist_cnn  | {framework}"))
        assert "x)" in line  # the amp_bf16 column carries a speed-up over fp32
    with open(out_dir / "results.csv") as fh:
        table = list(csv.DictReader(fh))
    assert {row["status"] for row in table} == {"ok"} and all(float(row["throughput"]) > 0 for row in table)
    env = json.loads((out_dir / "environment.json").read_text())
    assert env["cpu_model"] and "packages" in env
