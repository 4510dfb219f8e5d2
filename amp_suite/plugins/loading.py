"""Loading the plugins into pluggy one by one, so a broken one is listed instead of taking the host down.

Entry points of the ``amp_suite`` group, modules named with ``-p`` or
:data:`EXTRA_PLUGINS_ENV`, and the host's own memory plugin are registered
into one ``pluggy.PluginManager``.  A plugin that fails to import, fails
validation, implements a hook that does not exist (a misspelt name) or whose
``framework_info`` raises or answers something the host cannot use is
unregistered and listed in :attr:`LoadedPlugins.failures` with a message that
names the fix.  :class:`~amp_suite.plugins.host.PluginHost` adds the hook
calls to what is loaded here.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pluggy

from amp_suite.errors import PluginError, SweepInterrupted, one_line
from amp_suite.markers import ENTRY_POINT_GROUP, PROJECT_NAME, __version__
from amp_suite.plugins import hookspecs, host_memory
from amp_suite.plugins.answers import declaration_problem
from amp_suite.plugins.containment import contained
from amp_suite.plugins.contracts import check_return
from amp_suite.records import FrameworkInfo


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


class LoadedPlugins:
    """The plugin manager and what was loaded into it, or failed to be."""

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
        with contained(self.implementer("framework_info"), "framework_info"):
            infos = self.pm.hook.framework_info()
        for info in infos:
            if info.name in found:
                raise PluginError(f"two plugins describe framework {info.name!r}")
            found[info.name] = info
        return dict(sorted(found.items()))

    def _implementers(self, hook_name: str) -> list[str]:
        """Plugins implementing ``hook_name`` (not as a wrapper), in pluggy's call order."""
        return [impl.plugin_name for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls())
                if not (impl.hookwrapper or impl.wrapper)]

    def implementer(self, hook_name: str) -> str:
        """The name of the plugin that answers ``hook_name`` (``"a or b"`` where several implement it; ``"?"``
        where none does): what an error about its answer names."""
        return " or ".join(self._implementers(hook_name)) or "?"


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
        missing = [name for name in expected if name not in given]
        unknown = [name for name in given if name not in expected]
        hints = []
        for position, name in enumerate(given):
            if name in unknown:
                close = difflib.get_close_matches(name, missing or expected, n=1)
                # no name alike: the spec's argument at its place, or the one argument it lacks (batches -> staged)
                if not close and position < len(expected) and expected[position] in missing:
                    close = [expected[position]]
                elif not close and len(unknown) == 1 and len(missing) == 1:
                    close = missing
                hints.append(f"rename {name!r} to {close[0]!r}" if close else f"remove {name!r}")
        text += f"; {hook_name} takes ({', '.join(expected)}) or fewer" + "".join(f"; {h}" for h in hints)
    return f"{type(exc).__name__}: {text}"
