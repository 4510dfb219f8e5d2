"""A Python environment per framework or framework version (``[environments."NAME"]``, ``amp-suite env``).

Every cell already runs in a fresh worker process; an environment chooses
that process's interpreter, so each framework can bring its own CUDA and
cuDNN wheels and two versions of one framework are one sweep.

* :mod:`amp_suite.config.environments` reads ``[environments."NAME"]`` tables (config reads
  them with the rest of ``benchmarks.toml``);
* :mod:`.build` builds (uv, else venv + pip), inspects and removes them;
* :mod:`.placement` decides which interpreter runs each requested framework.

Nothing here imports a framework.
"""

from amp_suite.config.environments import EnvironmentSpec, environment_from_table, environments_dir
from amp_suite.envs.build import EnvironmentState, create, remove, state_of
from amp_suite.envs.placement import Placement, place_frameworks

__all__ = ["EnvironmentSpec", "EnvironmentState", "Placement", "create", "environment_from_table",
           "environments_dir", "place_frameworks", "remove", "state_of"]
