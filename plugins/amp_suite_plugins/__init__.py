"""amp-suite's built-in plugins.

Each ``<framework>_plugin`` module is registered through the ``amp_suite``
entry-point group, exactly as a third-party plugin would be (see
``pyproject.toml``), and never imports its framework at import time.  Beside
each, the modules its ``FrameworkInfo`` names run in processes of their own
and import the framework at once: ``<framework>_doctor`` (``amp-suite
doctor``) and ``<framework>_calibration`` (``amp-suite calibrate``).
"""
