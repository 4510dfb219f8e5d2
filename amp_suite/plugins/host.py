"""The loaded plugins, wrapped in one typed method per hook: what the rest of amp-suite calls a hook through.

The rest of amp-suite never spells ``pm.hook.x(...)``; the methods here do,
so pluggy's wrappers (``@hookimpl(wrapper=True)``) and hook-call monitoring
(``pm.add_hookcall_monitoring``) see every call.  Loading is
:mod:`amp_suite.plugins.loading`: entry points one by one, so a broken
third-party plugin is reported (``amp-suite plugins``) instead of taking the
host down, and listed in :attr:`PluginHost.failures` with a message that names
the fix.

A hook whose call the host only checks is not written here but derived from
its spec (:func:`~amp_suite.plugins.hook_table.first_answer`: the spec's
signature, its answer checked); the methods written out add what the host
does around the call: a precision or mode the plugin never declared is
refused, logits are checked, ``measure``'s figures are merged and attributed.
Every answer is checked against its declared return type
(:mod:`amp_suite.plugins.contracts`) when it is called.  A reporter that
raises or answers wrongly is reported, and the other reporters still write.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.errors import PluginError, UnsupportedError, one_line
from amp_suite.markers import ENTRY_POINT_GROUP, PROJECT_NAME
from amp_suite.plugins import hookspecs
from amp_suite.plugins.answers import applied_problem, declaration_problem, figure_problem
from amp_suite.plugins.containment import ENDING, contained
from amp_suite.plugins.contracts import check_logits, check_return, return_types
from amp_suite.plugins.hook_table import first_answer
from amp_suite.plugins.loading import (
    DISABLE_ENV,
    EXTRA_PLUGINS_ENV,
    NO_AUTOLOAD_ENV,
    LoadedPlugins,
    PluginDescription,
    PluginLoadFailure,
    find_in_current_directory,
    import_contained,
)
from amp_suite.plugins.report_guard import ReportGuard
from amp_suite.records import CellResult, DeviceInfo, PrecisionApplied, RunSpec

__all__ = [
    "DISABLE_ENV", "EXTRA_PLUGINS_ENV", "NO_AUTOLOAD_ENV", "PluginDescription", "PluginHost", "PluginLoadFailure",
    "ReportOutcome", "ReporterFailure", "contained", "declaration_problem", "figure_problem",
    "find_in_current_directory", "import_contained",
]


@functools.cache
def built_in_packages() -> frozenset[str]:
    """The top-level packages of amp-suite's own plugins: those its distribution's entry points name."""
    try:
        entry_points = importlib.metadata.distribution(PROJECT_NAME).entry_points
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return frozenset()
    return frozenset(ep.value.split(":")[0].split(".")[0] for ep in entry_points if ep.group == ENTRY_POINT_GROUP)


@dataclass(frozen=True)
class ReporterFailure:
    """A ``write_report`` implementation that raised, and why."""

    plugin: str
    error: str


@dataclass(frozen=True)
class ReportOutcome:
    """What :meth:`PluginHost.write_report` wrote, and which reporters failed."""

    written: list[Path]
    failures: list[ReporterFailure]


class PluginHost(LoadedPlugins):
    """The loaded plugins with a typed method per hook: the specs' own signatures, derived from hookspecs.py
    (:func:`~amp_suite.plugins.hook_table.first_answer`), where the host adds nothing to the call."""

    # --- one cell: the answer checked against the spec, nothing more --------

    select_device = first_answer(hookspecs.select_device)
    build_model = first_answer(hookspecs.build_model)
    stage_batches = first_answer(hookspecs.stage_batches)
    train_epoch = first_answer(hookspecs.train_epoch)
    get_variables = first_answer(hookspecs.get_variables)
    trace_step = first_answer(hookspecs.trace_step)

    # --- one cell: what the host does around the call ----------------------

    def set_precision(self, run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
        """The plugin's answer; a precision its ``FrameworkInfo.precisions`` declares for no device kind is refused,
        and so is a mode its ``FrameworkInfo.modes`` declares for none on this kind of device (``unsupported``).

        The plugin itself explains a precision it declares for another kind of
        device (``tf32`` on a CPU); one it never declares (``fp64`` of a plugin
        that has no float64 path) never reaches it, so it cannot run in float32
        under the wrong name.  The answer must be the cell's precision, computed in the dtype it means
        (:func:`~amp_suite.plugins.answers.applied_problem`).
        """
        info = self.frameworks().get(run.framework)
        if info is not None and not any(run.precision in names for names in info.precisions.values()):
            declared = list(dict.fromkeys(name for names in info.precisions.values() for name in names))
            raise UnsupportedError(f"{info.display_name} does not run precision {run.precision!r}; its plugin "
                                   f"declares {', '.join(declared) or 'none'} (FrameworkInfo.precisions)")
        if info is not None and run.mode and run.mode not in info.modes.get(device.kind, ()):
            here = info.modes.get(device.kind, ())
            elsewhere = [kind for kind, names in info.modes.items() if run.mode in names]
            raise UnsupportedError(
                f"{info.display_name} has no mode {run.mode!r} on a {device.kind}"
                + (f" (only on a {', '.join(elsewhere)})" if elsewhere else "")
                + f"; its plugin declares {', '.join(here) or 'none'} there (FrameworkInfo.modes)")
        plugin, applied = self._first_answer("set_precision", run=run, device=device)
        problem = applied_problem(run.precision, applied)
        if problem:
            raise PluginError(f"plugin {plugin!r}: {problem}")
        return applied

    def reset_memory_peak(self, run: RunSpec, model: Any, device: DeviceInfo) -> None:
        with contained(self.implementer("reset_memory_peak"), "reset_memory_peak"):
            self.pm.hook.reset_memory_peak(run=run, model=model, device=device)

    def predict(self, run: RunSpec, model: Any, images: np.ndarray, training: bool = False) -> np.ndarray:
        """The plugin's logits, checked: a float32 (``fp64``: float64) numpy array of shape ``(len(images), classes)``.

        For int32 token ids ``(n, context)`` the logits are ``(n, context, vocab)``.
        """
        plugin, logits = self._first_answer("predict", run=run, model=model, images=images, training=training)
        tokens = np.issubdtype(np.asarray(images).dtype, np.integer)
        check_logits(plugin, logits, len(images), run.precision, tuple(images.shape[1:]) if tokens else ())
        return logits

    def measure(self, run: RunSpec, model: Any, device: DeviceInfo,
                reserved: tuple[str, ...] | set[str] = (), dropped: list[str] | None = None) -> dict[str, Any]:
        """Merge every plugin's figures.

        Each implementation is called through pluggy on its own (see
        :meth:`_each`), so a figure is attributed to its plugin: a key given
        twice, or a key in ``reserved`` (figures the host computes itself), is
        a :class:`PluginError` naming the plugin; so is a plugin that ends the
        program (``SystemExit``, ``KeyboardInterrupt``).

        A plugin whose ``measure`` raises or answers what is no dict, and a
        value that cannot be stored (see :func:`figure_problem`: an integer
        beyond 64 bits, a memory figure that is not a number), are named with
        the plugin (and key): with ``dropped``, that plugin's figures (or that
        value) are left out and the line added there, so one failing sensor
        costs the cell none of its other figures; without, it is a
        :class:`PluginError` (the original exception its cause).
        """
        merged: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for plugin_name, call in self._each("measure"):
            try:
                with contained(plugin_name, "measure"):
                    answers = call(run=run, model=model, device=device)
                for answer in answers:
                    check_return(plugin_name, "measure", answer)
            except PluginError as exc:
                if dropped is None or str(exc).endswith(ENDING):
                    raise
                dropped.append(f"{exc}; its figures are left out")
                continue
            except Exception as exc:
                line = f"plugin {plugin_name!r}: measure failed: {one_line(exc)}"
                if dropped is None or isinstance(exc, MemoryError):  # out of memory: the cell's status says so
                    raise PluginError(line) from exc
                dropped.append(f"{line}; its figures are left out")  # a sensor that fails costs no other figure
                continue
            for answer in answers:
                if not answer:
                    continue
                for key, value in answer.items():
                    if key in reserved:
                        raise PluginError(
                            f"measure key {key!r} of plugin {plugin_name!r} is a figure the host computes itself"
                        )
                    if key in merged:
                        raise PluginError(f"measure key {key!r} given by both {owners[key]!r} and {plugin_name!r}")
                    problem = figure_problem(key, value)
                    if problem:
                        line = f"plugin {plugin_name!r}: measure key {key!r} {problem}; the value is left out"
                        if dropped is None:
                            raise PluginError(line)
                        dropped.append(line)
                        continue
                    merged[key] = value
                    owners[key] = plugin_name
        return merged

    def runtime_versions(self, run: RunSpec) -> dict[str, str]:
        """The CUDA runtime and cuDNN versions the run's framework loaded; ``{}`` when its plugin gives none."""
        plugin_name = self.implementer("runtime_versions")
        with contained(plugin_name, "runtime_versions"):
            answer = self.pm.hook.runtime_versions(run=run)
        if answer is None:
            return {}
        return dict(check_return(plugin_name, "runtime_versions", answer))

    # --- reporting ---------------------------------------------------------

    def write_report(
        self, results: list[CellResult], out_dir: Path, environment: dict[str, Any], stored: tuple[str, ...] = (),
        built_in: tuple[str, ...] = (), on_written: Callable[[list[Path]], None] | None = None,
    ) -> ReportOutcome:
        """Call every reporter; one that raises is listed and the others still write.

        ``report_sections`` is asked first; a plugin whose sections fail is
        listed the same way and the report goes on without them.  Each plugin
        gets its own copy of ``results`` and ``environment``, so one that
        changes them changes no other report nor the verdict; the files named
        in ``stored``, those an earlier reporter wrote and, for a reporter that
        is not built in, the files named by ``built_in`` (patterns) are put
        back when a reporter changes them (:mod:`amp_suite.plugins.report_guard`).
        ``on_written(paths)`` is called after each reporter with the files it wrote and kept.
        """
        written: list[Path] = []
        failures: list[ReporterFailure] = []
        sections: list[tuple[str, str]] = []
        guard = ReportGuard(out_dir, stored, built_in)

        def failed(plugin_name: str, exc: Exception, hook: str = "") -> None:
            text = str(exc).split(": ", 1)[1] if isinstance(exc, PluginError) else one_line(exc)
            failures.append(ReporterFailure(plugin_name, f"{hook} failed: {text}" if hook and
                                            not isinstance(exc, PluginError) else text))

        for plugin_name, call in self._each("report_sections"):
            try:
                with contained(plugin_name, "report_sections"):
                    answers = call(results=copy.deepcopy(results), out_dir=out_dir,
                                   environment=copy.deepcopy(environment))
                for answer in answers:
                    sections.extend(check_return(plugin_name, "report_sections", answer) or [])
            except Exception as exc:  # one broken plugin never costs the others
                failed(plugin_name, exc, "report_sections")
            finally:
                failures.extend(ReporterFailure(plugin_name, problem) for problem in guard.check(plugin_name, [])[1])
        for plugin_name, call in self._each("write_report"):
            listed: list[Path] = []
            ours = self._is_built_in(plugin_name)
            guard.before(ours)
            try:
                with contained(plugin_name, "write_report"):
                    answers = call(results=copy.deepcopy(results), out_dir=out_dir,
                                   environment=copy.deepcopy(environment), sections=list(sections))
                for paths in answers:
                    check_return(plugin_name, "write_report", paths)
                    listed.extend(paths or [])
            except Exception as exc:  # one broken reporter never costs the others
                failed(plugin_name, exc)
            finally:
                kept, problems = guard.check(plugin_name, listed, ours)
                written.extend(path for path in kept if path not in written)
                failures.extend(ReporterFailure(plugin_name, problem) for problem in problems)
                if on_written is not None:
                    on_written(list(kept))
        return ReportOutcome(written, failures)

    def _is_built_in(self, plugin_name: str) -> bool:
        """Whether ``plugin_name`` is one of amp-suite's own plugins: its module is in a package that amp-suite's
        own distribution's entry points name (however the plugin was loaded)."""
        plugin = self.pm.get_plugin(plugin_name)
        module = str(getattr(plugin, "__name__", "") or type(plugin).__module__)
        return module.split(".")[0] in built_in_packages()

    # --- calling through pluggy --------------------------------------------

    def _each(self, hook_name: str) -> list[tuple[str, Any]]:
        """One pluggy caller per implementing plugin, in call order, for the hooks whose answers are merged.

        Each caller is ``pm.subset_hook_caller`` without the other
        implementations, so wrappers (of any plugin) and hook-call monitors
        still see every call, while a plugin that raises is named and never
        costs the others their answers.
        """
        implementers = self._implementers(hook_name)
        callers: list[tuple[str, Any]] = []
        for name in implementers:
            others = [self.pm.get_plugin(n) for n in implementers if n != name]
            callers.append((name, self.pm.subset_hook_caller(hook_name, remove_plugins=others)))
        return callers

    def _every(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Every answer of a hook that is not firstresult and not None, each checked against the spec, in call
        order; a plugin that raises or ends the program is a :class:`PluginError` naming it."""
        found: list[Any] = []
        for plugin_name, call in self._each(hook_name):
            try:
                with contained(plugin_name, hook_name):
                    answers = call(**kwargs)
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {plugin_name!r}: {hook_name} failed: {one_line(exc)}") from exc
            found.extend(check_return(plugin_name, hook_name, answer) for answer in answers if answer is not None)
        return found

    def _first(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a firstresult hook through pluggy, checking the answer's type."""
        return self._first_answer(hook_name, **kwargs)[1]

    def _first_answer(self, hook_name: str, **kwargs: Any) -> tuple[str, Any]:
        """``(plugin name, answer)`` of a firstresult hook, called as ``pm.hook.NAME(**kwargs)``.

        A worker keeps one framework plugin, so the answer is that plugin's;
        where several implement the hook (in-process tests), the answer is
        attributed to them all by name.
        """
        plugin_name = self.implementer(hook_name)
        with contained(plugin_name, hook_name):
            answer = getattr(self.pm.hook, hook_name)(**kwargs)
        if answer is None:
            framework = kwargs["run"].framework
            implementers = self._implementers(hook_name)
            if not implementers:
                raise PluginError(f"no plugin implements {hook_name} for framework {framework!r}")
            named = " and ".join(repr(name) for name in implementers)
            raise PluginError(
                f"no plugin answered {hook_name} for framework {framework!r} ({named} implement"
                f"{'s' if len(implementers) == 1 else ''} it and returned None: a forgotten return? return "
                f"{return_types()[hook_name][1].removesuffix(' | None')}, or raise UnsupportedError where the "
                "framework cannot)")
        return plugin_name, check_return(plugin_name, hook_name, answer)
