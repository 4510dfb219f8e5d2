"""The Keras-on-TensorFlow plugin's options (``[frameworks.keras]``) and whether a run's steps go through XLA."""

from __future__ import annotations

from amp_suite.records import (
    FrameworkOption,
    RunSpec,
)
from amp_suite.schema import Field
from amp_suite_plugins.keras.backends import ATTENTION_OPTION

# The keys of [frameworks.keras] this plugin reads (the loss-scaling keys every plugin reads come on top).
OPTIONS = {
    "jit_compile": FrameworkOption(Field(bool), True, "compile the train step with XLA (jit_compile=True); "
                                   "false: a tf.function graph"),
    "attention": ATTENTION_OPTION,
}


def _jit(run: RunSpec) -> bool:
    if run.mode:  # --modes graph,compiled
        return run.mode == "compiled"
    return bool(run.options.get("jit_compile", OPTIONS["jit_compile"].default))
