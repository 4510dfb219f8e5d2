"""``python -m amp_suite_plugins.jax.build_compiles REQUEST.json``: how many XLA programs a backend on JAX
compiles to build one model (:func:`amp_suite.testing.jax_compiles_to_build` runs it in a fresh process; the
kit itself imports no framework).

The request is ``{"framework", "workload", "table", "precision", "plugin_modules"}``; the one line printed is
``{"compiles": N}``.  The host selects the device and sets the precision first, as a worker does; only what
``build_model`` compiles is counted (JAX's ``backend_compile_duration`` events, a cache hit excluded).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> None:
    import jax

    from amp_suite.plugins.host import PluginHost
    from amp_suite.records import RunSpec
    from amp_suite.workloads.workload import init_variables, workload_from_config

    request = json.loads(Path(path).read_text())
    workload = workload_from_config(request["workload"], request["table"])
    plugin_modules = tuple(request["plugin_modules"])
    host = PluginHost(framework=request["framework"], extra_modules=plugin_modules)
    run = RunSpec(framework=request["framework"], workload=workload.name, precision=request["precision"], steps=1,
                  epochs=1, warmup=0, batch_size=workload.batch_size, plugin_modules=plugin_modules)
    weights, state = init_variables(workload, 0)
    device = host.select_device(run)
    applied = host.set_precision(run, device)
    compiles: list[str] = []

    def count(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(count)
    host.build_model(run, workload, weights, state, applied, device)
    print(json.dumps({"compiles": len(compiles)}))


if __name__ == "__main__":
    main(sys.argv[1])
