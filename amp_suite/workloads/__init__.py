"""What a cell trains, framework-neutral: the layer vocabulary, architectures and ImageNet backbones built from it, and each workload's canonical initial variables and FLOPs."""

from amp_suite.moved import moved_names

# Earlier versions' ``from amp_suite.workloads import workload_from_config`` (when this was one module).
__getattr__ = moved_names("amp_suite.workloads", globals(), {name: "amp_suite.workloads.workload" for name in (
    "workload_from_config", "init_variables", "learning_rate_at")})
