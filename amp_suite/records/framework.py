"""What a framework plugin declares of itself (:class:`FrameworkInfo`, its options) and of the device a cell runs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amp_suite.schema import Field

# Device kinds a plugin may declare precisions for.
DEVICE_KINDS = ("cpu", "gpu")


@dataclass(frozen=True)
class FrameworkOption:
    """One option a framework plugin reads from ``run.options``: a key of ``[frameworks.NAME]``.

    ``schema`` is its type and bounds (:class:`amp_suite.schema.Field`): the
    sweep checks the table against it before the first cell runs, refusing an
    unknown key with the closest declared name.  ``default`` is what the
    plugin uses when the key is absent; ``help`` says what it changes, in one
    line.
    """

    schema: Field
    default: Any
    help: str


@dataclass(frozen=True)
class FrameworkInfo:
    """How a framework plugin describes itself, without importing its framework.

    ``precisions`` maps a device kind (``"cpu"`` or ``"gpu"``) to the precision
    names the plugin can run there.  ``env`` holds environment variables the
    worker sets *before* the framework is imported (e.g. JAX's
    ``XLA_PYTHON_CLIENT_PREALLOCATE``).  ``extra`` names the ``pip install
    amp-suite[EXTRA]`` extra that installs the framework (built-in plugins);
    a third-party plugin leaves it empty and gives ``install_command``
    instead.  ``distributions`` are the package names whose installed
    versions are the framework's version (``amp-suite list``, report header).
    ``launcher`` says how a data-parallel cell is started (see
    :mod:`amp_suite.launchers`): ``"process"``, one worker per node driving
    every device of the node, or ``"torchrun"``, one worker per device; empty
    (the default) when the plugin has no data-parallel engine, and then its
    cells on several devices are ``unsupported``.
    ``launcher_program`` is the module that implements a multi-process
    launcher, run as ``python -m MODULE`` with the launcher's command line
    (the torch plugin's is ``torch.distributed.run`` for ``"torchrun"``): the
    plugin declares it, so no framework's module is named in ``amp_suite/``.
    A ``"torchrun"`` launcher without one fails its data-parallel cells with a
    line saying so.  ``sync_counter`` is the ``module:function`` that counts
    the framework's host synchronizations for the conformance kit
    (:attr:`amp_suite.testing.conformance.BackendConformance.sync_counter`,
    ``"auto"``); empty: the kit's test of it is skipped.

    ``options`` declares the plugin's own keys of ``[frameworks.NAME]`` (the
    loss-scaling keys every plugin reads are added by the host).
    ``modes`` maps a device kind to the execution modes the plugin can run
    there (:data:`amp_suite.modes.MODES`); ``default_mode`` is the one it runs
    when the sweep asks for none.  A plugin that declares none runs only its
    default, unnamed mode, and any mode asked of it is ``unsupported``.
    ``doctor_probe`` and ``calibration_probe`` name modules the host runs as
    ``python -m MODULE ...`` in a fresh process with ``env`` set, for
    ``amp-suite doctor`` and ``amp-suite calibrate`` (the protocols are in
    :mod:`amp_suite.doctor.probe_kit` and :mod:`amp_suite.calibration.kit`);
    empty: the command skips the framework.
    ``layer_kinds`` are the kinds of the layer vocabulary
    (:data:`amp_suite.workloads.kinds.KINDS`) the plugin builds; empty: not
    declared.  The host makes a cell of a workload with any other kind
    ``unsupported`` before it starts, naming the kinds missing.
    """

    name: str
    display_name: str
    modules: tuple[str, ...]
    extra: str
    precisions: dict[str, tuple[str, ...]]
    env: dict[str, str] = field(default_factory=dict)
    distributions: tuple[str, ...] = ()
    install_command: str = ""
    launcher: str = ""
    launcher_program: str = ""
    sync_counter: str = ""
    options: dict[str, FrameworkOption] = field(default_factory=dict)
    doctor_probe: str = ""
    calibration_probe: str = ""
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    default_mode: str = ""
    layer_kinds: tuple[str, ...] = ()

    def install_hint(self) -> str:
        """The command that installs the framework: ``install_command``, the extra, or the distributions."""
        if self.install_command:
            return self.install_command
        if self.extra:
            return f"pip install 'amp-suite[{self.extra}]'"
        return "pip install " + " ".join(self.distributions or self.modules)

    def missing_modules(self) -> list[str]:
        """The :attr:`modules` that are not installed in this interpreter (found without importing them)."""
        import importlib.util

        missing = []
        for module in self.modules:
            try:
                if importlib.util.find_spec(module) is None:
                    missing.append(module)
            except (ImportError, ValueError):
                missing.append(module)
        return missing


@dataclass(frozen=True)
class DeviceInfo:
    """The device a run uses, as the framework sees it.

    ``kind`` is ``"cpu"`` or ``"gpu"``; ``platform`` is the framework's own
    name for it (``"cuda"``, ``"rocm"``, ``"cpu"``).  ``supports_tf32`` is true
    only on GPUs with TF32 tensor cores (compute capability 8.0 and newer).
    """

    kind: str
    platform: str
    name: str
    count: int = 1
    driver: str = ""
    compute_capability: str = ""
    memory_total_bytes: int | None = None
    supports_tf32: bool = False
