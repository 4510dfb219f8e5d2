"""The host installs offline beside frameworks already there, as on a GPU machine without a registry.

docs/gpu.md: ``pip install --no-index --no-deps --no-build-isolation -e .``.  The test builds a new
environment without pip, lets it see this environment's packages (the "frameworks already there"), and
installs a copy of the source tree into it with ``--no-index``: nothing can be downloaded.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml"}


def _requirement_name(text: str) -> str:
    for stop in "<>=!~;[ ":
        text = text.split(stop)[0]
    return text.strip().lower()


def _third_party_imports(root: Path) -> set[str]:
    found: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("amp_suite", "amp_suite_plugins", "__future__"):
                    found.add(DISTRIBUTION.get(top, top))
    return found


def test_the_declared_dependencies_are_exactly_what_the_host_imports():
    """uv (env create only) and psutil (unused) were declared dependencies; the host needs neither."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_requirement_name(r) for r in project["dependencies"]}
    imported = _third_party_imports(REPO / "amp_suite")
    # the testing kit's pytest import is for plugin authors' test suites, which have pytest
    imported.discard("pytest")
    # frameworks are the plugins' business, imported lazily by the workers; the host never needs them
    frameworks = {"torch", "tensorflow", "keras", "jax", "jaxlib", "haiku", "jmp", "optax", "flax", "matplotlib",
                  "pynvml", "ray", "submitit", "uv"}
    assert declared == imported - frameworks
    assert "uv" in {_requirement_name(r) for r in project["optional-dependencies"]["envs"]}


def test_the_host_installs_with_no_index_no_deps_no_build_isolation(tmp_path):
    source = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = source / name
        if (REPO / name).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((REPO / name).read_bytes())
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the frameworks (and pluggy, numpy, pandas, tabulate) already there: this environment's packages
    Path(site, "frameworks-already-here.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                           "--no-deps", "--no-build-isolation", "-e", str(source)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    where = subprocess.run([str(python), "-c", "import amp_suite; print(amp_suite.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where == str(source / "amp_suite" / "__init__.py")
    listed = subprocess.run([str(env_dir / "bin" / "amp-suite"), "list"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "frameworks:" in listed.stdout and "mnist_cnn" in listed.stdout
