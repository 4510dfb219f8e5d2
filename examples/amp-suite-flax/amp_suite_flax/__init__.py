"""amp-suite-flax: a Flax NNX backend for amp-suite, kept as the template for third-party plugins."""

__version__ = "0.1.0"
