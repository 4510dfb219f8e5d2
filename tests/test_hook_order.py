"""The order in which one cell's worker calls the hooks is the order docs/hooks.md and hookspecs.py state.

Each cell runs in this process with the fake framework (``tests/helpers/fakefw.py``)
and pluggy's call monitoring on, which sees every ``pm.hook`` call the host makes,
including those of hooks no plugin implements.  The documented order is a block
of hook names with ``?``, ``*``, ``+`` and parentheses (docs/hooks.md, "The calls
of one cell"); it is compiled to a regular expression over the recorded calls.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest

from amp_suite.cell.worker import execute
from amp_suite.config.catalog import load_config
from amp_suite.plugins import hookspecs
from amp_suite.plugins.host import PluginHost
from amp_suite.records import RunSpec, Workload
from suite_cli import REPO

HOOKS_DOC = REPO / "docs" / "hooks.md"
RUN = RunSpec(framework="fake", workload="tiny", precision="fp32", steps=3, epochs=2, warmup=1, batch_size=8)


def documented_order() -> str:
    """The order block of docs/hooks.md, comments left out."""
    section = HOOKS_DOC.read_text(encoding="utf-8").split("## The calls of one cell", 1)[1].split("\n## ", 1)[0]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    return "\n".join(line.split("#", 1)[0].rstrip() for line in block.splitlines() if line.split("#", 1)[0].strip())


def hookspecs_order() -> str:
    """The order block of hookspecs.py's docstring."""
    docstring = hookspecs.__doc__ or ""
    block = docstring.split("in this order", 1)[1].split("::\n\n", 1)[1].split("\n\n", 1)[0]
    return "\n".join(line.strip() for line in block.splitlines())


def order_pattern(order: str) -> re.Pattern[str]:
    """The block as a regular expression over hook names, each followed by one space."""
    parts = []
    for token in re.findall(r"\w+|[()?*+]|\S", order):
        if re.fullmatch(r"\w+", token):
            parts.append(f"(?:{token} )")
        elif token == "(":
            parts.append("(?:")
        elif token in ")?*+":
            parts.append(token)
        else:
            raise AssertionError(f"unexpected {token!r} in the documented order")
    return re.compile("".join(parts))


def recorded_calls(run: RunSpec, workload: Workload) -> list[str]:
    """The hooks one cell called, in order, repeated calls in a row counted once."""
    host = PluginHost(autoload=False, extra_modules=("fakefw",), framework="fake")
    calls: list[str] = []
    host.pm.add_hookcall_monitoring(lambda name, implementations, kwargs: calls.append(name),
                                    lambda outcome, name, implementations, kwargs: None)
    result = execute(run, workload, host)
    assert result.status == "ok", result.error
    return [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]


def _plain(workload: Workload) -> tuple[RunSpec, Workload]:
    return RUN, workload


def _with_a_target_accuracy(workload: Workload) -> tuple[RunSpec, Workload]:
    return RUN, dataclasses.replace(workload, target_accuracy=0.999, eval_every=1)


def _with_a_timing_extension(workload: Workload) -> tuple[RunSpec, Workload]:
    return dataclasses.replace(RUN, extend_timing=True, min_timed_steps=12, min_timed_seconds=0.0,
                               window_steps=4), workload


def _predict_between_training_phases(calls: list[str]) -> bool:
    return "predict" in calls[calls.index("train_epoch"):calls.index("measure")]


def _train_epoch_after_measure(calls: list[str]) -> bool:
    return "train_epoch" in calls[calls.index("measure"):]


CELLS: dict[str, tuple[Callable[[Workload], tuple[RunSpec, Workload]], bool, bool]] = {
    # cell: (how it is made, predict called between training phases, train_epoch called after measure)
    "plain": (_plain, False, False),
    "target accuracy": (_with_a_target_accuracy, True, False),
    "timing extension": (_with_a_timing_extension, False, True),
}


def test_the_docs_and_the_hookspecs_state_the_same_order() -> None:
    assert hookspecs_order().split() == documented_order().split()


def test_the_order_block_compiles_to_a_pattern_that_can_fail() -> None:
    pattern = order_pattern(documented_order())
    calls = ("framework_info select_device framework_info set_precision build_model stage_batches train_epoch "
             "reset_memory_peak stage_batches train_epoch measure predict runtime_versions ").split()
    assert pattern.fullmatch(" ".join(calls) + " ")
    swapped = calls[:]
    swapped[-3], swapped[-2] = swapped[-2], swapped[-3]  # validation before measure
    assert not pattern.fullmatch(" ".join(swapped) + " ")
    assert not pattern.fullmatch(" ".join(c for c in calls if c != "build_model") + " ")


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_a_cell_calls_the_hooks_in_the_documented_order(cell: str, tiny_config, clean_fake_env) -> None:
    make, predicts_while_training, trains_after_measure = CELLS[cell]
    run, workload = make(load_config(tiny_config).workloads["tiny"])
    calls = recorded_calls(run, workload)
    assert order_pattern(documented_order()).fullmatch(" ".join(calls) + " "), (
        f"the {cell} cell called {' '.join(calls)}; docs/hooks.md states:\n{documented_order()}")
    # each cell takes the branch it is here for, so the documented order must hold for it
    assert _predict_between_training_phases(calls) == predicts_while_training, calls
    assert _train_epoch_after_measure(calls) == trains_after_measure, calls
    assert calls.count("reset_memory_peak") == 1 and calls[-1] == "runtime_versions"
