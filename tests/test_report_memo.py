"""A report's summary is computed once per content: the same results give it again, changed results never do."""

from __future__ import annotations

import copy
import threading

import pandas as pd

from amp_suite.records import CellResult
from amp_suite.report.memo import KEPT, by_content
from amp_suite.report.summary import summary_frame


def _cell(precision: str, throughput: float) -> CellResult:
    return CellResult(key=f"torch/w/{precision}/r0", framework="torch", workload="w", precision=precision,
                      repeat=0, status="ok", error="", metrics={"throughput": throughput, "final_loss": 1.0},
                      config={"dataset": "mnist", "batch_size": 8}, environment={},
                      device={"kind": "cpu", "name": "Test CPU"})


def _counted() -> tuple[list[int], object]:
    calls: list[int] = []

    @by_content
    def frame(results: list[CellResult], environment: dict | None = None) -> pd.DataFrame:
        calls.append(1)
        return pd.DataFrame({"throughput": [r.metrics["throughput"] for r in results]})

    return calls, frame


def test_the_same_content_is_computed_once_even_in_another_list() -> None:
    calls, frame = _counted()
    results = [_cell("fp32", 100.0), _cell("amp_bf16", 200.0)]
    first = frame(results, {"a": 1})
    again = frame(copy.deepcopy(results), {"a": 1})
    assert len(calls) == 1
    pd.testing.assert_frame_equal(first, again)


def test_a_result_changed_in_place_is_computed_again() -> None:
    calls, frame = _counted()
    results = [_cell("fp32", 100.0), _cell("amp_bf16", 200.0)]
    assert list(frame(results)["throughput"]) == [100.0, 200.0]
    results[1].metrics["throughput"] = 300.0  # the same objects, new content
    assert list(frame(results)["throughput"]) == [100.0, 300.0]
    frame(results, {"price_per_hour": 2.0})  # another environment is another content
    assert len(calls) == 3


def test_a_caller_changing_its_frame_changes_no_later_one() -> None:
    calls, frame = _counted()
    results = [_cell("fp32", 100.0)]
    mine = frame(results)
    mine["throughput"] = -1.0
    assert list(frame(results)["throughput"]) == [100.0] and len(calls) == 1


def test_unpicklable_arguments_are_computed_every_time_and_old_contents_are_let_go() -> None:
    calls, frame = _counted()
    results = [_cell("fp32", 100.0)]
    frame(results, {"lock": threading.Lock()})
    frame(results, {"lock": threading.Lock()})
    assert len(calls) == 2
    for throughput in range(KEPT + 1):
        frame([_cell("fp32", float(throughput))])
    frame([_cell("fp32", 0.0)])  # pushed out by the KEPT newer contents
    assert len(calls) == 2 + KEPT + 2


def test_the_summary_is_remembered_and_equals_a_fresh_one() -> None:
    results = [_cell("fp32", 100.0), _cell("amp_bf16", 250.0)]
    summary_frame.forget()  # type: ignore[attr-defined]
    remembered = summary_frame(copy.deepcopy(results))
    fresh = summary_frame.__wrapped__(results)  # type: ignore[attr-defined]
    pd.testing.assert_frame_equal(remembered, fresh)
    assert remembered.loc[remembered["precision"] == "amp_bf16", "speedup"].item() == 2.5
