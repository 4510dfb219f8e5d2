"""amp-suite's built-in plugins: one package per framework backend, and the reporters.

Each backend's ``plugin`` module (``torch.plugin``, ``keras.plugin``,
``jax.plugin``) is registered through the ``amp_suite`` entry-point group,
exactly as a third-party plugin would be (see ``pyproject.toml``), and never
imports its framework at import time.  Beside it, the modules its
``FrameworkInfo`` names run in processes of their own and import the
framework at once: ``doctor`` (``amp-suite doctor``) and ``calibration``
(``amp-suite calibrate``).  The packages are named after their frameworks;
their modules import the frameworks themselves by absolute name, which a
package of the same name inside this one never shadows.
"""
