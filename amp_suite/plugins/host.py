"""Builds the pluggy manager and wraps it in one typed method per hook.

The rest of amp-suite never spells ``pm.hook.x(...)``; the methods here do,
so pluggy's wrappers (``@hookimpl(wrapper=True)``) and hook-call monitoring
(``pm.add_hookcall_monitoring``) see every call.  Entry points are loaded
one by one, so a broken third-party plugin is reported (``amp-suite plugins``)
instead of taking the host down: a plugin that fails to import, fails
validation or implements a hook that does not exist (a misspelt name) is
unregistered and listed in :attr:`PluginHost.failures` with a message that
names the fix (pluggy's whole validation message, the closest hook or argument
name).  So is a framework plugin whose ``framework_info`` raises, returns
something other than a ``FrameworkInfo``, or declares an option or a probe the
host cannot use (:func:`declaration_problem`).  Every other hook's answer is
checked against its declared return type (:mod:`amp_suite.plugins.contracts`) when it
is called.  A reporter that raises or answers wrongly is reported, and the
other reporters still write.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pluggy

from amp_suite.errors import PluginError, SweepInterrupted, UnsupportedError, UsageError, one_line
from amp_suite.markers import ENTRY_POINT_GROUP, PROJECT_NAME, __version__
from amp_suite.numerics.records import StepTrace
from amp_suite.plugins import hookspecs, host_memory
from amp_suite.plugins.contracts import check_logits, check_return
from amp_suite.records import (
    Batch,
    CellResult,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    FrameworkOption,
    PrecisionApplied,
    RunSpec,
    Workload,
    to_plain,
)
from amp_suite.schema import Field, check_value
from amp_suite.stored_values import number_problem


@contextmanager
def contained(plugin: str, hook: str) -> Iterator[None]:
    """A hook call in which ending the program becomes the plugin's failure.

    ``SystemExit``, a ``KeyboardInterrupt`` the plugin raised itself (the
    user's Ctrl-C arrives as :class:`SweepInterrupted` and passes through) and
    any other ``BaseException`` that is not an ``Exception`` become a
    :class:`PluginError` naming ``plugin`` and ``hook``.
    """
    try:
        yield
    except (Exception, SweepInterrupted):
        raise
    except BaseException as exc:
        raise PluginError(f"plugin {plugin!r}: {hook} raised {_ending(exc)}; a plugin may not end the program"
                          ) from None


def _ending(exc: BaseException) -> str:
    """``SystemExit(3)``, ``KeyboardInterrupt``: how a program-ending exception is named in a message."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"[:200]
    return one_line(exc)


def figure_problem(key: str, value: Any) -> str | None:
    """Why a figure ``measure`` gave cannot be kept (``is an integer of 81 bits...``), or None.

    A figure must survive the result file as it is read back (no integer
    beyond :data:`~amp_suite.stored_values.MAX_STORED_INT`, no nesting deeper
    than :data:`~amp_suite.stored_values.MAX_STORED_DEPTH`), and a memory
    figure (a key ending in ``_bytes``) must be a number or None.
    """
    plain = to_plain(value)
    if key.endswith("_bytes") and not (plain is None or (isinstance(plain, (int, float))
                                                          and not isinstance(plain, bool))):
        return f"is {type(value).__name__} {str(value)[:60]!r}; a memory figure must be a number of bytes (or None)"
    problem = number_problem(plain, key)
    if problem:
        if isinstance(plain, int) and not isinstance(plain, bool):
            return f"is an integer of {plain.bit_length()} bits; a figure must fit in 64 bits"
        return f"cannot be stored: {problem}"
    return None


def import_contained(load: Callable[[], object], name: str, source: str) -> object:
    """``load()`` (a plugin's import); what only a program's end should raise becomes a :class:`PluginError`.

    ``SystemExit``, a ``KeyboardInterrupt`` the plugin raised itself (the
    user's Ctrl-C arrives as :class:`SweepInterrupted` and passes through) and
    any other ``BaseException`` that is not an ``Exception`` make the plugin a
    load failure (one line, listed with its name) instead of ending the command
    silently.
    """
    try:
        return load()
    except (Exception, SweepInterrupted):
        raise
    except BaseException as exc:
        raise PluginError(f"raised {one_line(exc)} while being imported (fix or uninstall it, or skip it "
                          f"with {DISABLE_ENV}={name})") from None


def _import_failure(exc: Exception) -> str:
    """The one-line text of a failed plugin import."""
    return str(exc) if isinstance(exc, PluginError) else one_line(exc)


# Comma-separated plugin names not to load (like pytest's ``-p no:NAME``).
DISABLE_ENV = "AMP_SUITE_DISABLE_PLUGINS"
# Set to 1 to load no entry point at all (only plugins named explicitly).
NO_AUTOLOAD_ENV = "AMP_SUITE_DISABLE_PLUGIN_AUTOLOAD"
# Comma-separated extra plugin modules, loaded like ``--plugin MODULE``.
EXTRA_PLUGINS_ENV = "AMP_SUITE_PLUGINS"


@dataclass(frozen=True)
class PluginLoadFailure:
    """A plugin that could not be loaded, and why."""

    name: str
    source: str
    error: str


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


@dataclass(frozen=True)
class PluginDescription:
    """A loaded plugin as ``amp-suite plugins`` shows it."""

    name: str
    source: str
    version: str
    hooks: tuple[str, ...]


def find_in_current_directory(module_name: str) -> None:
    """Let ``-p MODULE`` find a module in the current directory, as ``python -m MODULE`` does.

    The ``amp-suite`` script's import path starts with its own folder, not the
    current directory.  When no entry of the path holds the module's top-level
    package, the current directory is added, last: an installed module of the
    same name still wins.  A worker finds the module where the host did
    (:func:`amp_suite.launchers.single.worker_import_path`).
    """
    import importlib.machinery

    top = module_name.split(".", 1)[0]
    here = os.getcwd()
    if not top.isidentifier() or top in sys.modules or importlib.machinery.PathFinder.find_spec(top) is not None:
        return
    if importlib.machinery.PathFinder.find_spec(top, [here]) is not None and here not in sys.path:
        sys.path.append(here)


class PluginHost:
    """The plugin manager with a typed method per hook."""

    def __init__(
        self,
        *,
        extra_modules: tuple[str, ...] | list[str] = (),
        autoload: bool | None = None,
        framework: str | None = None,
    ) -> None:
        """Load the plugins; with ``framework``, keep only that framework's plugin.

        A worker passes its run's framework: every other framework plugin is
        unregistered (plugins that describe no framework stay), so a framework
        plugin's hooks are called for its own runs only.
        """
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.failures: list[PluginLoadFailure] = []
        # "plugin 'x': amp_suite.layers.walk moved: import walk from amp_suite.plugin_api ..." per old path used
        self.moved_imports: list[str] = []
        self._sources: dict[str, tuple[str, str]] = {}
        # plugin name -> (distribution, version) for plugins loaded from an entry point
        self._distributions: dict[str, tuple[str, str]] = {}
        blocked = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
        if autoload is None:
            autoload = os.environ.get(NO_AUTOLOAD_ENV, "") not in ("1", "true", "yes")
        if "host_measure" not in blocked:
            self._register(host_memory, "host_measure", "amp-suite (built-in)", __version__)
        if autoload:
            self._load_entry_points(blocked)
        env_modules = [m.strip() for m in os.environ.get(EXTRA_PLUGINS_ENV, "").split(",") if m.strip()]
        for module_name in [*extra_modules, *env_modules]:
            if module_name in blocked or self.pm.has_plugin(module_name):
                continue
            find_in_current_directory(module_name)
            self._load_module(module_name, module_name, source=f"module {module_name}", version="")
        self._drop_plugins_with_unknown_hooks()
        self._drop_broken_framework_info()
        if framework is not None:
            self._keep_only_framework(framework)

    # --- loading -----------------------------------------------------------

    def _load_entry_points(self, blocked: set[str]) -> None:
        for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in blocked or self.pm.has_plugin(ep.name):
                continue
            dist = getattr(ep, "dist", None)
            version = dist.version if dist is not None else ""
            source = f"{dist.name if dist is not None else '?'} ({ep.value})"
            try:
                plugin = self._imported(ep.load, ep.name, source)
            except Exception as exc:  # a broken plugin is reported, not fatal
                self.failures.append(PluginLoadFailure(ep.name, source, _import_failure(exc)))
                continue
            self._register(plugin, ep.name, source, version)
            if dist is not None and ep.name in self._sources:
                self._distributions[ep.name] = (dist.name, version)

    def _imported(self, load: Callable[[], object], name: str, source: str) -> object:
        """:func:`import_contained`, keeping in :attr:`moved_imports` every import path of an earlier version the
        plugin used (``amp_suite.plugin_kit.timed_window moved: import timed_window from amp_suite.plugin_api``);
        any other warning goes on as it was raised."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return import_contained(load, name, source)
            finally:
                for warning in caught:
                    text = str(warning.message)
                    if issubclass(warning.category, DeprecationWarning) and " moved: import " in text:
                        self.moved_imports.append(f"plugin {name!r}: {text}")
                    else:
                        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    def _load_module(self, name: str, module_name: str, *, source: str, version: str) -> None:
        try:
            plugin = self._imported(lambda: importlib.import_module(module_name), name, source)
        except Exception as exc:
            self.failures.append(PluginLoadFailure(name, source, _import_failure(exc)))
            return
        if self.pm.is_registered(plugin):  # ``-p`` of a module an entry point already loaded
            return
        self._register(plugin, name, source, version)

    def _register(self, plugin: object, name: str, source: str, version: str) -> None:
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            self.failures.append(PluginLoadFailure(name, source, _validation_message(exc)))
            return
        except Exception as exc:
            self.failures.append(PluginLoadFailure(name, source, one_line(exc)))
            return
        self._sources[name] = (source, version)

    def _drop_broken_framework_info(self) -> None:
        """Unregister (and list as failed) every plugin whose ``framework_info`` raises or answers wrongly."""
        for impl in list(self.pm.hook.framework_info.get_hookimpls()):
            try:
                with contained(impl.plugin_name, "framework_info"):
                    answer = impl.function()
                problem = declaration_problem(check_return(impl.plugin_name, "framework_info", answer))
                if problem is None:
                    continue
                error = f"framework_info: {problem}"
            except PluginError as exc:
                error = str(exc).split(": ", 1)[1]
            except Exception as exc:
                error = f"framework_info failed: {one_line(exc)}"
            source, _ = self._sources.pop(impl.plugin_name, ("registered in process", ""))
            self._distributions.pop(impl.plugin_name, None)
            self.pm.unregister(name=impl.plugin_name)
            self.failures.append(PluginLoadFailure(impl.plugin_name, source, error))

    def _keep_only_framework(self, framework: str) -> None:
        for impl in self.pm.hook.framework_info.get_hookimpls():
            info = impl.function()
            if getattr(info, "name", None) != framework:
                self.pm.unregister(name=impl.plugin_name)
                self._sources.pop(impl.plugin_name, None)
                self._distributions.pop(impl.plugin_name, None)

    def _drop_plugins_with_unknown_hooks(self) -> None:
        """Unregister (and list as failed) every plugin implementing a hook no spec declares."""
        known = [name for name in vars(self.pm.hook) if not name.startswith("_")
                 and getattr(self.pm.hook, name).has_spec()]
        unknown: dict[str, list[str]] = {}
        for name in list(vars(self.pm.hook)):
            caller = getattr(self.pm.hook, name)
            if name.startswith("_") or caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if not impl.optionalhook:
                    unknown.setdefault(impl.plugin_name, []).append(name)
        for plugin_name, hook_names in unknown.items():
            problems = []
            for hook_name in sorted(hook_names):
                close = difflib.get_close_matches(hook_name, known, n=1)
                problems.append(f"{hook_name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            source, _ = self._sources.pop(plugin_name, ("registered in process", ""))
            self._distributions.pop(plugin_name, None)
            self.pm.unregister(name=plugin_name)
            self.failures.append(PluginLoadFailure(plugin_name, source,
                                                   "implements unknown hook " + ", ".join(problems)))

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin object (tests, inline runs)."""
        self.pm.register(plugin, name=name)
        self.pm.check_pending()

    def unregister(self, plugin: object) -> None:
        self.pm.unregister(plugin)

    def describe(self) -> list[PluginDescription]:
        """Every loaded plugin with its version and the hooks it implements."""
        out = []
        for name, plugin in self.pm.list_name_plugin():
            hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or []))
            source, version = self._sources.get(name, ("registered in process", ""))
            out.append(PluginDescription(name, source, version, hooks))
        return sorted(out, key=lambda d: d.name)

    # --- describing --------------------------------------------------------

    def distributions(self) -> dict[str, str]:
        """Installed versions of every framework's distributions and of every plugin's own distribution.

        The report header lists these beside amp-suite's fixed package list, so a
        third-party framework's version is recorded like torch's.
        """
        from amp_suite.machine.environment import package_version

        found: dict[str, str] = {}
        for info in self.frameworks().values():
            for dist in info.distributions:
                version = package_version(dist)
                if version:
                    found[dist] = version
        for dist, version in self._distributions.values():
            if dist != "amp-suite" and version:
                found[dist] = version
        return dict(sorted(found.items()))

    def frameworks(self) -> dict[str, FrameworkInfo]:
        """Framework name -> description, from every ``framework_info`` answer."""
        found: dict[str, FrameworkInfo] = {}
        with contained(" or ".join(self._implementers("framework_info")) or "?", "framework_info"):
            infos = self.pm.hook.framework_info()
        for info in infos:
            if info.name in found:
                raise PluginError(f"two plugins describe framework {info.name!r}")
            found[info.name] = info
        return dict(sorted(found.items()))

    # --- one run -----------------------------------------------------------

    def select_device(self, run: RunSpec) -> DeviceInfo:
        return self._first("select_device", run=run)

    def set_precision(self, run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
        """The plugin's answer; a precision its ``FrameworkInfo.precisions`` declares for no device kind is refused,
        and so is a mode its ``FrameworkInfo.modes`` declares for none on this kind of device (``unsupported``).

        The plugin itself explains a precision it declares for another kind of
        device (``tf32`` on a CPU); one it never declares (``fp64`` of a plugin
        that has no float64 path) never reaches it, so it cannot run in float32
        under the wrong name.
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
        return self._first("set_precision", run=run, device=device)

    def build_model(
        self,
        run: RunSpec,
        workload: Workload,
        initial_weights: dict[str, np.ndarray],
        initial_state: dict[str, np.ndarray],
        applied: PrecisionApplied,
        device: DeviceInfo,
    ) -> Any:
        return self._first("build_model", run=run, workload=workload, initial_weights=initial_weights,
                           initial_state=initial_state, applied=applied, device=device)

    def stage_batches(self, run: RunSpec, model: Any, batches: list[Batch]) -> Any:
        return self._first("stage_batches", run=run, model=model, batches=batches)

    def train_epoch(self, run: RunSpec, model: Any, staged: Any, epoch: int) -> EpochResult:
        return self._first("train_epoch", run=run, model=model, staged=staged, epoch=epoch)

    def reset_memory_peak(self, run: RunSpec, model: Any, device: DeviceInfo) -> None:
        with contained(" or ".join(self._implementers("reset_memory_peak")) or "?", "reset_memory_peak"):
            self.pm.hook.reset_memory_peak(run=run, model=model, device=device)

    def predict(self, run: RunSpec, model: Any, images: np.ndarray, training: bool = False) -> np.ndarray:
        """The plugin's logits, checked: a float32 (``fp64``: float64) numpy array of shape ``(len(images), classes)``.

        For int32 token ids ``(n, context)`` the logits are ``(n, context, vocab)``.
        """
        plugin, logits = self._first_answer("predict", run=run, model=model, images=images, training=training)
        tokens = np.issubdtype(np.asarray(images).dtype, np.integer)
        check_logits(plugin, logits, len(images), run.precision, tuple(images.shape[1:]) if tokens else ())
        return logits

    def get_variables(self, run: RunSpec, model: Any) -> dict[str, np.ndarray]:
        return self._first("get_variables", run=run, model=model)

    def trace_step(self, run: RunSpec, model: Any, staged: Any) -> StepTrace:
        """The plugin's trace of one training step (``amp-suite numerics``); a :class:`PluginError` where no
        plugin traces ``run``'s framework."""
        return self._first("trace_step", run=run, model=model, staged=staged)

    def measure(self, run: RunSpec, model: Any, device: DeviceInfo,
                reserved: tuple[str, ...] | set[str] = (), dropped: list[str] | None = None) -> dict[str, Any]:
        """Merge every plugin's figures.

        Each implementation is called through pluggy on its own (see
        :meth:`_each`), so a figure is attributed to its plugin: a key given
        twice, or a key in ``reserved`` (figures the host computes itself), is
        a :class:`PluginError` naming the plugin; so is a plugin whose
        ``measure`` raises (the original exception is its cause), or ends the
        program (``SystemExit``, ``KeyboardInterrupt``).

        A value that cannot be stored (see :func:`figure_problem`: an integer
        beyond 64 bits, a memory figure that is not a number) names its plugin
        and key: with ``dropped``, the value is left out and that line added
        there; without, it is a :class:`PluginError`.
        """
        merged: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for plugin_name, call in self._each("measure"):
            try:
                with contained(plugin_name, "measure"):
                    answers = call(run=run, model=model, device=device)
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {plugin_name!r}: measure failed: {one_line(exc)}") from exc
            for answer in answers:
                if not answer:
                    continue
                check_return(plugin_name, "measure", answer)
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
        plugin_name = " or ".join(self._implementers("runtime_versions")) or "?"
        with contained(plugin_name, "runtime_versions"):
            answer = self.pm.hook.runtime_versions(run=run)
        if answer is None:
            return {}
        return dict(check_return(plugin_name, "runtime_versions", answer))

    # --- reporting ---------------------------------------------------------

    def write_report(
        self, results: list[CellResult], out_dir: Path, environment: dict[str, Any]
    ) -> ReportOutcome:
        """Call every reporter; one that raises is listed and the others still write.

        ``report_sections`` is asked first; a plugin whose sections fail is
        listed the same way and the report goes on without them.
        """
        written: list[Path] = []
        failures: list[ReporterFailure] = []
        sections: list[tuple[str, str]] = []
        for plugin_name, call in self._each("report_sections"):
            try:
                with contained(plugin_name, "report_sections"):
                    answers = call(results=results, out_dir=out_dir, environment=environment)
                for answer in answers:
                    sections.extend((str(title), str(body)) for title, body in (answer or []))
            except PluginError as exc:
                failures.append(ReporterFailure(plugin_name, str(exc).split(": ", 1)[1]))
            except Exception as exc:
                failures.append(ReporterFailure(plugin_name, one_line(exc)))
        for plugin_name, call in self._each("write_report"):
            try:
                with contained(plugin_name, "write_report"):
                    answers = call(results=results, out_dir=out_dir, environment=environment,
                                   sections=list(sections))
                for paths in answers:
                    check_return(plugin_name, "write_report", paths)
                    written.extend(paths or [])
            except PluginError as exc:
                failures.append(ReporterFailure(plugin_name, str(exc).split(": ", 1)[1]))
            except Exception as exc:  # one broken reporter never costs the others
                failures.append(ReporterFailure(plugin_name, one_line(exc)))
        return ReportOutcome(written, failures)

    # --- calling through pluggy --------------------------------------------

    def _implementers(self, hook_name: str) -> list[str]:
        """Plugins implementing ``hook_name`` (not as a wrapper), in pluggy's call order."""
        return [impl.plugin_name for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls())
                if not (impl.hookwrapper or impl.wrapper)]

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

    def _first(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a firstresult hook through pluggy, checking the answer's type."""
        return self._first_answer(hook_name, **kwargs)[1]

    def _first_answer(self, hook_name: str, **kwargs: Any) -> tuple[str, Any]:
        """``(plugin name, answer)`` of a firstresult hook, called as ``pm.hook.NAME(**kwargs)``.

        A worker keeps one framework plugin, so the answer is that plugin's;
        where several implement the hook (in-process tests), the answer is
        attributed to them all by name.
        """
        plugin_name = " or ".join(self._implementers(hook_name)) or "?"
        with contained(plugin_name, hook_name):
            answer = getattr(self.pm.hook, hook_name)(**kwargs)
        if answer is None:
            raise PluginError(f"no plugin implements {hook_name} for framework {kwargs['run'].framework!r}")
        return plugin_name, check_return(plugin_name, hook_name, answer)


def declaration_problem(info: FrameworkInfo) -> str | None:
    """What in ``info`` the host cannot use (an option that is no ``FrameworkOption``, a default its own
    schema refuses, a probe that is no module name), or None."""
    for key, option in info.options.items():
        if not isinstance(option, FrameworkOption) or not isinstance(option.schema, Field):
            return (f"options[{key!r}] is {type(option).__name__}; it must be "
                    "FrameworkOption(Field(...), default, help)")
        try:
            check_value(f"option {key}", option.default, option.schema)
        except UsageError as exc:
            return f"the default of {exc} (its own schema refuses it)"
    for name in ("doctor_probe", "calibration_probe"):
        module = getattr(info, name)
        if not isinstance(module, str) or (module and not all(part.isidentifier() for part in module.split("."))):
            return f"{name} {module!r} is not a module name (e.g. 'my_plugin.doctor')"
    return None


def _validation_message(exc: pluggy.PluginValidationError) -> str:
    """pluggy's whole validation message on one line, with the spec's arguments and the closest name."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    hook_name = text.split("for hook ", 1)[1].split("'")[1] if "for hook '" in text else ""
    caller = getattr(exc.plugin, hook_name, None) if hook_name else None
    spec = getattr(hookspecs, hook_name, None)
    if spec is not None and caller is not None:
        import inspect

        expected = list(inspect.signature(spec).parameters)
        given = [name for name in inspect.signature(caller).parameters]
        hints = []
        for name in given:
            if name not in expected:
                close = difflib.get_close_matches(name, expected, n=1)
                hints.append(f"rename {name!r} to {close[0]!r}" if close else f"remove {name!r}")
        text += f"; {hook_name} takes ({', '.join(expected)}) or fewer" + "".join(f"; {h}" for h in hints)
    return f"{type(exc).__name__}: {text}"
