"""The host installs offline beside frameworks already there, as on a GPU machine without a registry.

docs/gpu.md: ``pip install --no-index --no-deps --no-build-isolation -e .``.  The test builds a new
environment without pip, lets it see this environment's packages (the "frameworks already there"), and
installs a copy of the source tree into it with ``--no-index``: nothing can be downloaded.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

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


def _bare_environment(root: Path) -> Path:
    """A new environment without pip that sees this environment's packages (the frameworks already there)."""
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "frameworks-already-here.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


OFFLINE = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _copy_of_the_tree(root: Path) -> Path:
    """The tracked files, copied: an editable install writes its metadata into the tree it installs, and the
    repository's own would then shadow the test environment's."""
    source = root / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = source / name
        if (REPO / name).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((REPO / name).read_bytes())
            target.chmod((REPO / name).stat().st_mode)
    return source


def test_the_host_installs_with_no_index_no_deps_no_build_isolation(tmp_path):
    source = _copy_of_the_tree(tmp_path)
    python = _bare_environment(tmp_path)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                           "--no-deps", "--no-build-isolation", "-e", str(source)],
                          capture_output=True, text=True, env=OFFLINE, timeout=300)
    assert done.returncode == 0, done.stderr
    where = subprocess.run([str(python), "-c", "import amp_suite; print(amp_suite.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where == str(source / "amp_suite" / "__init__.py")
    listed = subprocess.run([str(python.parent / "amp-suite"), "list"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "frameworks:" in listed.stdout and "mnist_cnn" in listed.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the script's CPU phase runs a PyTorch cell")
def test_the_gpu_visit_script_installs_offline_runs_a_phase_and_packs_it(tmp_path):
    """benchmarks/gpu_visit.sh on a CPU: one acceptance phase (the CPU sweep) with a budget, then --resume."""
    import tarfile

    source = _copy_of_the_tree(tmp_path)
    python = _bare_environment(tmp_path)
    env = {**OFFLINE, "PYTHON": str(python), "PIP": f"{sys.executable} -m pip --python {python}"}
    out = tmp_path / "visit"
    script = [str(source / "benchmarks" / "gpu_visit.sh"), "--device", "cpu", "--frameworks", "torch",
              "--out", str(out), "--budget", "200"]
    done = subprocess.run([*script, "--checks", "sweep"], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_visit: installed amp-suite offline" in done.stdout
    report = (out / "acceptance.md").read_text()
    assert report.startswith("# amp-suite acceptance: INCOMPLETE") and "| sweep | CPU sweep" in report
    with tarfile.open(out / "gpu-visit.tar.gz") as packed:
        names = packed.getnames()
    assert "./acceptance.md" in names and "./acceptance.json" in names
    assert any(n.endswith("/sweep/results.jsonl") for n in names)
    bad = subprocess.run([*script, "--budget", "soon"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "--budget must be a number of seconds, got 'soon'" in bad.stderr
