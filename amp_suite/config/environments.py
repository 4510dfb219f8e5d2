"""``[environments."NAME"]`` tables: which Python environment runs a framework's workers.

An environment either lists what to install (``requirements``, with optional
``index_url``, ``extra_index_urls`` and ``find_links``), and ``amp-suite env
create`` builds it under the environments folder, or names an interpreter the
user manages (``python``).  ``framework`` says which plugin's workers it runs.
``gpu = true`` puts it in the GPU set (``amp-suite env create --gpu``): a plain
framework name on a GPU sweep then runs in the built GPU environment of that
framework.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.schema import Field, check_name, check_table, shown

# The environments folder, when not the default .amp-suite/envs beside the config file (or here).
ENVS_DIR_ENV = "AMP_SUITE_ENVS"
ENVS_SUBDIR = Path(".amp-suite") / "envs"
# python = "this": the interpreter amp-suite itself runs in (a machine whose frameworks are preinstalled,
# a GPU machine lent without a registry): nothing is built and the environment names what already is.
THIS_INTERPRETER = "this"

ENVIRONMENT_FIELDS: dict[str, Field] = {
    "framework": Field(str, names=True),
    "requirements": Field(tuple),
    "index_url": Field(str),
    "extra_index_urls": Field(tuple),
    "find_links": Field(tuple),
    "python": Field(str),
    "gpu": Field(bool),
    "description": Field(str),
}


@dataclass(frozen=True)
class EnvironmentSpec:
    """One declared environment.  ``python`` set: a user-managed interpreter, nothing to build."""

    name: str
    framework: str
    requirements: tuple[str, ...] = ()
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    python: str = ""
    gpu: bool = False
    description: str = ""

    @property
    def managed(self) -> bool:
        """True when amp-suite builds it (``requirements``), false for a user's own ``python``."""
        return not self.python

    def install_options(self) -> list[str]:
        """The index options shared by uv and pip."""
        options = [f"--index-url={self.index_url}"] if self.index_url else []
        options += [f"--extra-index-url={url}" for url in self.extra_index_urls]
        options += [f"--find-links={link}" for link in self.find_links]
        return options


def environment_from_table(name: str, table: Any, where: str) -> EnvironmentSpec:
    """A checked ``[environments."NAME"]`` table; every problem is one line naming ``where``."""
    check_name("environment", name)
    values = check_table(table, ENVIRONMENT_FIELDS, f'{where}: [environments."{name}"]')
    here = f'{where}: [environments."{name}"]'
    if "framework" not in values:
        raise UsageError(f"{here}: framework is missing (the framework whose workers it runs, e.g. \"torch\")")
    if ("python" in values) == ("requirements" in values):
        raise UsageError(f"{here}: give requirements (amp-suite builds it) or python (an interpreter you "
                         "manage), not both and not neither")
    if "python" in values:
        if "index_url" in values or "extra_index_urls" in values or "find_links" in values:
            raise UsageError(f"{here}: index_url, extra_index_urls and find_links go with requirements, "
                             "not with python")
        if values["python"] == THIS_INTERPRETER:  # the interpreter amp-suite runs in: nothing to build
            values = {**values, "python": sys.executable}
        if not os.path.isabs(values["python"]):
            raise UsageError(f"{here}: python must be an absolute path or \"{THIS_INTERPRETER}\" (the interpreter "
                             f"amp-suite runs in), got {shown(values['python'])}")
    elif not values["requirements"]:
        raise UsageError(f"{here}: requirements must list at least one requirement")
    for requirement in values.get("requirements", ()):
        if requirement.startswith("-") or "\n" in requirement:
            raise UsageError(f"{here}: requirement {shown(requirement)} is not a requirement string "
                             "(options go in index_url, extra_index_urls, find_links)")
    return EnvironmentSpec(name=name, **values)


def environments_dir(config_path: Path | None, environ: Any = None) -> Path:
    """Where managed environments live: ``$AMP_SUITE_ENVS``, else ``.amp-suite/envs`` beside the config file.

    Without a config file, beside the working directory.
    """
    env = os.environ if environ is None else environ
    if env.get(ENVS_DIR_ENV):
        return Path(env[ENVS_DIR_ENV]).absolute()
    base = config_path.absolute().parent if config_path is not None else Path.cwd()
    return base / ENVS_SUBDIR


def packaged_gpu_set() -> dict[str, str]:
    """Framework -> the name of its environment in the packaged GPU set (``catalog/environments.toml``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, published as tomli
        import tomli as tomllib

    path = Path(__file__).resolve().parent.parent / "catalog" / "environments.toml"
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8")).get("environments", {})
    except (OSError, ValueError):
        return {}
    return {table["framework"]: name for name, table in tables.items()
            if isinstance(table, dict) and table.get("gpu") and isinstance(table.get("framework"), str)}
