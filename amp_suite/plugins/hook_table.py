"""Every hook as :mod:`amp_suite.plugins.hookspecs` declares it, read from that module: the one declaration.

The specs are the only place a hook is declared.  What else knows the hooks
derives from them: the host's typed methods (:func:`first_answer` and
:func:`every_answer` turn a spec into a method of the same signature), and
the typed protocol of a framework plugin
(:mod:`amp_suite.plugins.framework_plugin`), whose block between its
``generated`` lines is written from this table by
``python -m amp_suite.plugins.hook_table`` (a test fails when it is stale).
So a new hook is its spec, its section in ``docs/hooks.md`` and, if a cell
calls it, its place in the order block and its call in the worker.

A hook's *stage* follows from its arguments: one that takes ``run`` belongs
to a cell (called in the worker), one that takes ``results`` to reporting
(called in the host), and one that takes neither describes a plugin.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from amp_suite.plugins import hookspecs

CELL, REPORTING, DESCRIBING = "cell", "reporting", "describing"


@dataclass(frozen=True)
class HookSpec:
    """One hook: its name, arguments and answer as written in hookspecs.py, and how pluggy calls it."""

    name: str
    arguments: tuple[tuple[str, str], ...]  # (name, annotation as written)
    returns: str  # the return annotation as written
    firstresult: bool  # the first answer that is not None is the answer
    optional: bool  # a framework plugin may leave it out (hookspecs.optional)
    stage: str  # CELL, REPORTING or DESCRIBING
    line: int  # where hookspecs.py declares it: the table's order


@cache
def hook_table() -> dict[str, HookSpec]:
    """Hook name -> its :class:`HookSpec`, in the order hookspecs.py declares them."""
    specs = []
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        options = getattr(func, "amp_suite_spec", None)
        if options is None:
            continue
        signature = inspect.signature(func)
        arguments = tuple((argument, str(parameter.annotation)) for argument, parameter in signature.parameters.items())
        names = [argument for argument, _ in arguments]
        stage = CELL if "run" in names else REPORTING if "results" in names else DESCRIBING
        specs.append(HookSpec(name, arguments, str(signature.return_annotation), bool(options.get("firstresult")),
                              bool(getattr(func, hookspecs.OPTIONAL_ATTRIBUTE, False)), stage,
                              inspect.getsourcelines(func)[1]))
    return {spec.name: spec for spec in sorted(specs, key=lambda spec: spec.line)}


class HookCalls(Protocol):
    """What a derived method calls on its host (:class:`~amp_suite.plugins.host.PluginHost` has both)."""

    def _first(self, hook_name: str, **kwargs: Any) -> Any: ...

    def _every(self, hook_name: str, **kwargs: Any) -> list[Any]: ...


Arguments = ParamSpec("Arguments")
Answer = TypeVar("Answer")


def first_answer(spec: Callable[Arguments, Answer | None]) -> Callable[Concatenate[HookCalls, Arguments], Answer]:
    """The host's method for the firstresult hook ``spec``: the same arguments, the answer checked, never None.

    Positional arguments are bound to the spec's names (pluggy calls hooks by
    name only).  The answer is checked against the spec's return annotation
    (:mod:`amp_suite.plugins.contracts`); no answer is a
    :class:`~amp_suite.errors.PluginError` naming the hook and the framework.
    """
    name, signature = spec.__name__, inspect.signature(spec)

    def call(self: HookCalls, *args: Arguments.args, **kwargs: Arguments.kwargs) -> Answer:
        return self._first(name, **signature.bind(*args, **kwargs).arguments)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"The answer of the ``{name}`` hook (:func:`amp_suite.plugins.hookspecs.{name}`), checked."
    return call


def every_answer(spec: Callable[Arguments, Answer | None]) -> Callable[Concatenate[HookCalls, Arguments], list[Answer]]:
    """The host's method for the hook ``spec`` that every plugin may answer: each answer that is not None, checked,
    in pluggy's call order."""
    name, signature = spec.__name__, inspect.signature(spec)

    def call(self: HookCalls, *args: Arguments.args, **kwargs: Arguments.kwargs) -> list[Answer]:
        return self._every(name, **signature.bind(*args, **kwargs).arguments)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Every plugin's answer to the ``{name}`` hook (:func:`amp_suite.plugins.hookspecs.{name}`)."
    return call


# --- the framework plugin's protocol, written from the table ---------------

PROTOCOL_MODULE = Path(__file__).with_name("framework_plugin.py")
BEGIN = "    # --- generated from hookspecs.py by python -m amp_suite.plugins.hook_table ---"
END = "    # --- end of the generated block ---"
# The handles the protocol types where the specs say Any: the model (build_model's answer, every `model`
# argument) and the staged batches (stage_batches' answer, the `staged` argument).
HANDLES = {"model": "ModelT", "staged": "StagedT"}
HANDLE_ANSWERS = {"build_model": "ModelT", "stage_batches": "StagedT"}
LINE_CHARS = 120  # the code's line length (pyproject.toml)


def protocol_method(spec: HookSpec, handle: str = "ModelT") -> str:
    """``spec`` as a method of a protocol: the handles typed, a firstresult answer without its ``| None``."""
    arguments = ", ".join(["self", *(f"{name}: {handle if name == 'model' else HANDLES.get(name, annotation)}"
                                     for name, annotation in spec.arguments)])
    returns = HANDLE_ANSWERS.get(spec.name, spec.returns)
    if spec.firstresult:
        returns = re.sub(r" \| None$", "", returns)
    line = f"    def {spec.name}({arguments}) -> {returns}: ..."
    if len(line) <= LINE_CHARS:
        return line
    indent = "\n" + " " * len(f"    def {spec.name}(")
    rows = [""]
    for part in arguments.split(", "):  # break after the last argument that fits
        row = f"{rows[-1]}, {part}" if rows[-1] else part
        if len(indent) + len(row) + 1 > LINE_CHARS and rows[-1]:
            rows[-1] += ","
            rows.append(part)
        else:
            rows[-1] = row
    return f"    def {spec.name}(" + indent.join(rows) + f") -> {returns}: ..."


def protocol_block() -> str:
    """The methods of :class:`~amp_suite.plugins.framework_plugin.FrameworkPlugin`: ``framework_info`` and every
    cell hook a framework plugin must implement, in the specs' order."""
    specs = [spec for spec in hook_table().values()
             if spec.stage == DESCRIBING or (spec.stage == CELL and not spec.optional)]
    return "\n\n".join(protocol_method(spec) for spec in specs)


def protocol_source(text: str) -> str:
    """``text`` (framework_plugin.py) with its generated block written anew."""
    head, rest = text.split(BEGIN + "\n", 1)
    tail = rest.split(END + "\n", 1)[1]
    return f"{head}{BEGIN}\n\n{protocol_block()}\n\n{END}\n{tail}"


def main(argv: list[str]) -> int:
    """Rewrite framework_plugin.py's generated block (``--check``: only say whether it is current)."""
    text = PROTOCOL_MODULE.read_text(encoding="utf-8")
    fresh = protocol_source(text)
    if "--check" in argv:
        print("current" if fresh == text else "stale: run python -m amp_suite.plugins.hook_table")
        return 0 if fresh == text else 1
    PROTOCOL_MODULE.write_text(fresh, encoding="utf-8")
    return 0


def hook_names(stage: str | None = None) -> list[str]:
    """The hooks' names in declaration order, of one stage or of all."""
    return [name for name, spec in hook_table().items() if stage is None or spec.stage == stage]


def describe(spec: HookSpec) -> str:
    """``select_device(run: RunSpec) -> DeviceInfo | None``: the spec's signature as written."""
    return f"{spec.name}({', '.join(f'{n}: {a}' for n, a in spec.arguments)}) -> {spec.returns}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
