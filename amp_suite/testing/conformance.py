"""``BackendConformance``: the whole contract of a framework backend as one pytest test class.

A plugin's test file::

    from amp_suite.testing.conformance import BackendConformance


    class TestMxnetConformance(BackendConformance):
        framework = "mxnet"

pytest collects every test below for ``mxnet``.  The probes of one framework
run one after another in one process of their own (a
:class:`~amp_suite.testing.ProbeServer`, started on first use and ended with
the session); a probe of several devices gets a fresh process.  Results are
cached for the session, so the reference framework's probes are shared by
every class that uses it.
"""

from __future__ import annotations

import atexit
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from amp_suite.testing import (
    OPTIMIZER_CHECKS,
    OPTIMIZERS,
    WORKLOADS,
    ProbeRequest,
    ProbeResult,
    ProbeServer,
    assert_batch_norm_in_float32,
    assert_cell_ok,
    assert_compiles_once,
    assert_declares_layer_kinds,
    assert_deterministic,
    assert_gradients_match_reference,
    assert_kept_in_float32,
    assert_layer_dtypes,
    assert_matches_reference,
    assert_no_loss_scaling,
    assert_one_wait_per_window,
    assert_optimizer_arithmetic,
    assert_overflow_skipped,
    assert_reduced_precision,
    assert_scale_grows,
    assert_static_scale,
    assert_training_predict_changes_nothing,
    assert_trains_like_reference,
    assert_trajectory_halves,
    framework_info,
    framework_installed,
    reference_framework,
    session_probe_folder,
    shared_probe,
)

# Probe results of this session, by request (shared across test classes).
_PROBES: dict[str, ProbeResult] = {}
# One probe process per framework and plugin modules, for the whole session.
_SERVERS: dict[tuple[str, tuple[str, ...]], ProbeServer] = {}
# The resnet8 table the BatchNorm precision check trains on: integer images reach the first convolution as they are.
INTEGER_STEM_TABLE = {**WORKLOADS["resnet8"], "normalize": False, "augment": False}
# Each probe compiles its own step (seconds of a CPU on Keras and XLA), so one probe serves every check that can read
# it.  fp32 mnist_cnn, 3 steps in each of 2 epochs: the reference comparison (logits before training, first loss)
# and the compile-once check.
TWO_EPOCHS = {"steps": 3, "epochs": 2}
# amp_fp16 from a loss scale of 2**10 that doubles every 2 finite steps, 2 steps in each of 2 epochs: the scale
# doubles twice (after steps 2 and 4, so the growth count carries across epochs) and the step, which carries the
# changing scale, compiles once.
GROWING_SCALE = {"precision": "amp_fp16", "steps": 2, "epochs": 2,
                 "options": {"initial_loss_scale": 2.0 ** 10, "loss_scale_growth_interval": 2}}


def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()


atexit.register(_close_servers)


class BackendConformance:
    """Subclass with ``framework = "NAME"``; override the other attributes where your backend differs."""

    #: the framework name the plugin's ``framework_info`` gives
    framework: ClassVar[str] = ""
    #: the framework compared against: None picks the first installed of torch, jax, keras; "" compares with none
    reference: ClassVar[str | None] = None
    #: extra plugin modules to load (like ``-p``), for a plugin that has no entry point yet
    plugin_modules: ClassVar[tuple[str, ...]] = ()
    #: ``module:function`` returning the dtypes inside the model (see ProbeRequest.inspect); None skips that test
    inspect: ClassVar[str | None] = None
    #: whether the backend compiles its step and reports ``EpochResult.extra["traces"]``
    compiles: ClassVar[bool] = True
    #: the expected mnist_cnn parameter count (None: only equal to the reference's)
    param_count: ClassVar[int | None] = None
    #: relative tolerance of every cross-framework comparison
    rtol: ClassVar[float] = 1e-4
    #: whether measure's framework_version must read "NAME VERSION[, NAME VERSION ...]"
    check_version_format: ClassVar[bool] = True
    #: ``module:function`` returning a counter of host synchronizations (see ProbeRequest); "auto" takes the
    #: one the backend's ``FrameworkInfo.sync_counter`` declares; None (or none declared) skips that test
    sync_counter: ClassVar[str | None] = "auto"
    #: kinds of the layer vocabulary the backend leaves out on purpose (a CNN-only backend: the token kinds,
    #: ``amp_suite.workloads.kinds.TOKEN_KINDS``); every other kind must be in ``FrameworkInfo.layer_kinds``
    lacks_kinds: ClassVar[tuple[str, ...]] = ()

    # --- plumbing -----------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _framework_is_installed(self) -> None:
        if not self.framework:
            pytest.fail(f"{type(self).__name__} sets no framework")
        if not framework_installed(self.framework, self.plugin_modules):
            pytest.skip(f"{self.framework} (or its plugin) is not installed")

    @pytest.fixture
    def probe(self, tmp_path_factory: pytest.TempPathFactory) -> Any:
        """``probe(framework=None, **ProbeRequest fields) -> ProbeResult``, cached for the session (and shared by
        its xdist lanes: :func:`amp_suite.testing.shared_probes.shared_probe`)."""

        def get(framework: str | None = None, **fields: Any) -> ProbeResult:
            name = framework or self.framework
            request = ProbeRequest(framework=name, plugin_modules=self.plugin_modules if name == self.framework
                                   else (), **fields)
            lacked = self._lacked(request.workload, request.table) if name == self.framework else []
            if lacked:  # the backend says it builds none of these: the check is not for it
                pytest.skip(f"{self.framework} lacks {', '.join(lacked)} (lacks_kinds), which this check's workload "
                            f"{request.workload} has")
            key = request.to_json()
            if key not in _PROBES:
                def server() -> ProbeServer:
                    server_key = (name, request.plugin_modules)
                    if server_key not in _SERVERS:
                        _SERVERS[server_key] = ProbeServer(tmp_path_factory.mktemp(f"server-{name}"))
                    return _SERVERS[server_key]

                # Shared with the other xdist lanes of the session: a probe runs once, in the lane that asks first.
                _PROBES[key] = shared_probe(request, session=session_probe_folder(tmp_path_factory), server=server,
                                            folder=lambda: tmp_path_factory.mktemp(f"probe-{name}-{request.precision}"))
            return _PROBES[key]

        return get

    def _lacked(self, workload: str, table: dict[str, Any] | None) -> list[str]:
        """The kinds of ``workload`` (its ``table``, else the kit's) in :attr:`lacks_kinds`."""
        if not self.lacks_kinds:
            return []
        from amp_suite.cell.kind_check import kinds_used
        from amp_suite.workloads.workload import workload_from_config

        layers = workload_from_config(workload, table if table is not None else WORKLOADS[workload]).layers
        return sorted(set(kinds_used(layers)) & set(self.lacks_kinds))

    def _buildable(self, workload: str) -> str:
        """``workload``, or mnist_cnn when the backend lacks one of its kinds (a backend without BatchNorm still
        gets its gradients, its trajectory and its optimizers checked)."""
        return "mnist_cnn" if self._lacked(workload, None) else workload

    def _reference(self) -> str:
        name = reference_framework(exclude=self.framework) if self.reference is None else self.reference
        if not name:
            pytest.skip(f"no reference framework for {self.framework}")
        if not framework_installed(name):
            pytest.skip(f"reference framework {name} is not installed")
        return name

    # --- the contract -------------------------------------------------------

    def test_plugin_imports_no_framework_when_loaded(self) -> None:
        """``amp-suite list`` loads every plugin: the framework must be imported inside the hooks only."""
        code = ("import sys; from amp_suite.plugins.host import PluginHost\n"
                f"info = PluginHost(extra_modules={self.plugin_modules!r}).frameworks()[{self.framework!r}]\n"
                "print(','.join(m for m in info.modules if m != 'numpy' and m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "", f"loading the plugin imported {done.stdout.strip()}"

    def test_declares_every_layer_kind(self) -> None:
        """``FrameworkInfo.layer_kinds`` holds every kind of the vocabulary but ``lacks_kinds``: the failure lists
        the missing ones (a sweep makes a cell of a workload with an undeclared kind ``unsupported``)."""
        assert_declares_layer_kinds(framework_info(self.framework, self.plugin_modules), lacks=self.lacks_kinds)

    def test_fp32_matches_the_reference_from_the_canonical_weights(self, probe: Any) -> None:
        reference = self._reference()
        assert_matches_reference(probe(**TWO_EPOCHS), probe(reference, **TWO_EPOCHS), rtol=self.rtol,
                                 param_count=self.param_count)

    def test_the_same_request_run_again_trains_the_same(self, probe: Any) -> None:
        # fp32 mnist_cnn, 3 steps in each of 2 epochs, run twice: nothing but the request decides a run
        assert_deterministic(probe(**TWO_EPOCHS), probe(**TWO_EPOCHS, again=1))

    @pytest.mark.parametrize("model", ["resnet8", "deep_cnn"])
    def test_gradients_at_the_canonical_weights_match_the_reference(self, probe: Any, model: str) -> None:
        # one step's gradients and BatchNorm statistics, compared before any training can amplify round-off; a
        # backend that lacks one of the model's kinds has its gradients checked on mnist_cnn instead (once)
        reference = self._reference()
        checked = self._buildable(model)
        if checked != model and model != "resnet8":
            pytest.skip(f"{self.framework} lacks kinds of {model}; its gradients are checked on {checked} in the "
                        "resnet8 case")
        fields = self._oracle_fields(checked, "sgd")
        assert_gradients_match_reference(probe(**fields), probe(reference, **fields), rtol=self.rtol)

    @pytest.mark.parametrize("optimizer", list(OPTIMIZER_CHECKS))
    def test_optimizer_updates_are_the_suites_arithmetic_on_the_backends_gradients(self, probe: Any,
                                                                                  optimizer: str) -> None:
        # every hyper-parameter away from its default, coupled weight decay, a cosine schedule; two steps, so the
        # optimizer's state carries from one to the next
        assert_optimizer_arithmetic(probe(**{**self._oracle_fields(self._buildable("resnet8"), optimizer),
                                             "steps": 2}))

    def test_a_stable_trajectory_trains_like_the_reference(self, probe: Any) -> None:
        # resnet8 (BatchNorm state, momentum carried across steps), SGD at a rate where the loss falls: three
        # steps stay within round-off of the reference's.  deep_cnn's steps are covered by the step checks above.
        # A backend that lacks one of resnet8's kinds trains mnist_cnn instead (no BatchNorm state to compare).
        reference = self._reference()
        model = self._buildable("resnet8")
        fields = {"workload": model, "table": {**WORKLOADS[model], **OPTIMIZERS["sgd"]}, "steps": 3,
                  "batch_size": 8}
        ours, theirs = probe(**fields), probe(reference, **fields)
        assert_trains_like_reference(ours, theirs, rtol=self.rtol)
        assert_training_predict_changes_nothing(ours)
        import numpy as np

        if model == "resnet8":  # the running statistics really moved
            assert not np.allclose(ours.variables["bn1/mean"], 0) and not np.allclose(ours.variables["bn1/var"], 1)

    @pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
    def test_batch_norm_computes_in_float32_under_amp(self, probe: Any, precision: str) -> None:
        fields = {"workload": "resnet8", "table": INTEGER_STEM_TABLE, "steps": 1, "batch_size": 8,
                  "integer_stem": True}
        assert_batch_norm_in_float32(probe(precision=precision, **fields), probe(**fields))

    @staticmethod
    def _oracle_fields(model: str, optimizer: str) -> dict[str, Any]:
        """A gradient-oracle probe of ``model`` with the checked ``optimizer`` (resnet8: 2 steps, else 1)."""
        return {"workload": model, "table": {**WORKLOADS[model], **OPTIMIZER_CHECKS[optimizer]},
                "steps": 2 if model == "resnet8" else 1, "batch_size": 8, "gradient_oracle": True}

    def test_amp_bf16_really_computes_in_bfloat16(self, probe: Any) -> None:
        # the windows check's probes: the same batch of 8 in both precisions
        assert_reduced_precision(probe(**self._window_fields("amp_bf16")), probe(**self._window_fields("fp32")),
                                 "bfloat16")

    def test_amp_fp16_overflowing_step_is_skipped_and_the_scale_halves(self, probe: Any) -> None:
        # A loss scale of 2**100 makes the float16 gradients overflow on the first step.
        result = probe(precision="amp_fp16", options={"initial_loss_scale": 2.0 ** 100})
        assert_overflow_skipped(result, 2.0 ** 100)

    def test_amp_fp16_finite_steps_apply_and_the_scale_grows(self, probe: Any) -> None:
        assert_scale_grows(probe(**GROWING_SCALE), 2.0 ** 10, 2)  # doubled after steps 2 and 4 (of 2 epochs)

    def test_amp_fp16_without_loss_scaling_scales_nothing(self, probe: Any) -> None:
        # 2**100 would overflow at once if the loss were scaled anyway
        result = probe(precision="amp_fp16", options={"loss_scaling": "none", "initial_loss_scale": 2.0 ** 100})
        assert_no_loss_scaling(result)

    def test_amp_fp16_static_loss_scale_never_moves(self, probe: Any) -> None:
        result = probe(precision="amp_fp16", steps=2,
                       options={"loss_scaling": "static", "initial_loss_scale": 2.0 ** 100})
        assert_static_scale(result, 2.0 ** 100)

    def test_amp_fp16_loss_scale_trajectory_halves_on_overflow(self, probe: Any) -> None:
        result = probe(precision="amp_fp16", steps=2, batch_size=8, cell=True,
                       options={"initial_loss_scale": 2.0 ** 100})
        assert_trajectory_halves(result, 2.0 ** 100)

    @pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
    def test_keep_fp32_keeps_the_named_layers_in_float32(self, probe: Any, precision: str) -> None:
        if not self.inspect:
            pytest.skip("no inspect function (set inspect = 'module:function')")
        result = probe(precision=precision, steps=1, inspect=self.inspect,
                       options={"keep_fp32": ["conv2d", "logits"]})
        assert_kept_in_float32(result, "bfloat16" if precision == "amp_bf16" else "float16")

    @pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
    def test_train_step_compiles_once_across_epochs(self, probe: Any, precision: str) -> None:
        if not self.compiles:
            pytest.skip(f"{self.framework} does not compile its step")
        # amp_fp16 carries a loss-scale state, whose value grows between steps, through every step: it must not
        # retrace either
        assert_compiles_once(probe(**(TWO_EPOCHS if precision == "fp32" else GROWING_SCALE)))

    def test_a_step_carrying_batch_norm_state_compiles_once(self, probe: Any) -> None:
        if not self.compiles:
            pytest.skip(f"{self.framework} does not compile its step")
        # resnet8 threads its running statistics (and augmented batches) through every step, amp_fp16 its loss
        # scale as well: the dtype check's probe of amp_fp16
        assert_compiles_once(probe(**self._resnet8_dtype_fields("amp_fp16")))

    @pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
    def test_a_window_waits_once_however_many_steps_it_holds(self, probe: Any, precision: str) -> None:
        if not self._sync_counter():
            pytest.skip("no sync counter (declare FrameworkInfo.sync_counter, or set sync_counter = "
                        "'module:function')")
        assert_one_wait_per_window(probe(**self._window_fields(precision)))

    def _window_fields(self, precision: str) -> dict[str, Any]:
        """2 steps of batch 8 in ``precision``, then windows of 2 and 6 steps counted by the sync counter (when
        there is one); in fp32 one whole cell after them.  The probes of the windows, bfloat16 and whole-cell
        checks."""
        counter = self._sync_counter()
        counted: dict[str, Any] = {"count_syncs": (2, 6), "sync_counter": counter} if counter else {}
        return {"precision": precision, "steps": 2, "batch_size": 8, "cell": precision == "fp32", **counted}

    def _sync_counter(self) -> str | None:
        """``sync_counter``, with "auto" resolved to the one the backend's FrameworkInfo declares."""
        if self.sync_counter != "auto":
            return self.sync_counter
        from amp_suite.plugins.host import PluginHost

        return PluginHost(extra_modules=self.plugin_modules).frameworks()[self.framework].sync_counter or None

    @pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
    def test_precision_applied_is_the_one_reported(self, probe: Any, precision: str) -> None:
        if not self.inspect:
            pytest.skip("no inspect function (set inspect = 'module:function')")
        result = probe(**self._resnet8_dtype_fields(precision))
        assert_layer_dtypes(result, "bfloat16" if precision == "amp_bf16" else "float16")

    def _resnet8_dtype_fields(self, precision: str) -> dict[str, Any]:
        """resnet8 with SGD in ``precision``, 3 steps in each of 2 epochs, inspected where the class can: the probes
        of the dtype and BatchNorm compile-once checks."""
        return {"precision": precision, "workload": "resnet8", "table": {**WORKLOADS["resnet8"], **OPTIMIZERS["sgd"]},
                "steps": 3, "epochs": 2, "batch_size": 8, "inspect": self.inspect}

    def test_a_whole_cell_runs_and_its_measure_keys_do_not_clash(self, probe: Any) -> None:
        # the fp32 windows probe runs the cell after its windows
        assert_cell_ok(probe(**self._window_fields("fp32")), check_version_format=self.check_version_format)

    @pytest.mark.parametrize("batch_norm", ["per_replica", "synchronized"])
    def test_two_devices_match_one_device_on_the_global_batch(self, probe: Any, batch_norm: str) -> None:
        """One ResNet-8 SGD step on 2 devices is one device's step on the global batch.

        Per-replica BatchNorm: the mean of one device's steps on each shard; synchronized BatchNorm
        (``sync_batch_norm``): one device's step on the whole batch, running statistics included.
        """
        from amp_suite.testing import data_parallel

        if not data_parallel.data_parallel_launcher(self.framework, self.plugin_modules):
            pytest.skip(f"{self.framework} has no data-parallel engine (FrameworkInfo.launcher is empty)")
        fields = data_parallel.one_step_fields()
        devices = data_parallel.DEVICES
        parallel = probe(devices=devices, sync_batch_norm=batch_norm == "synchronized", **fields)
        declined = data_parallel.declined_sync_batch_norm(parallel)
        if declined:
            pytest.skip(f"{self.framework} keeps per-replica BatchNorm statistics here when asked to "
                        f"synchronize them: {declined}")
        shards = [probe(shard=(i, devices), **fields) for i in range(devices)]
        data_parallel.assert_data_parallel_matches(parallel, probe(**fields), shards)
