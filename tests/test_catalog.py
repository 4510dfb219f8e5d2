"""The catalog ships inside the package: it loads with no benchmarks.toml, a local benchmarks.toml extends and
overrides it by name, `amp-suite init` writes a starter that loads, and an installed wheel runs anywhere."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from amp_suite.config import catalog as config_module
from amp_suite.config.catalog import CATALOG_DIR, SweepSettings, catalog_files, find_config, load_config
from amp_suite.errors import UsageError
from suite_cli import REPO, run_cli

PRESETS = ("keras-tensor-cores", "keras-multi-gpu", "pytorch-fp16-cifar", "haiku-jmp-mnist")


def test_the_packaged_catalog_loads_without_a_benchmarks_toml(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_config(None) is None
    config = load_config(None)
    assert config.path is None
    assert {"mnist_cnn", "mnist_cnn_128", "cifar10_resnet18", "cifar10_resnet50", "mnist_deep_cnn"} <= set(config.workloads)
    assert set(PRESETS) <= set(config.presets) and set(PRESETS) <= set(config.published)
    assert (config.settings.dataset, config.settings.train_split) == ("mnist", "test[:8000]")
    assert config.framework_options["torch"] == {"channels_last": True}
    assert config.source("workloads.mnist_cnn") == "package: workloads.toml"
    assert config.source("presets.haiku-jmp-mnist") == "package: presets.toml"
    assert {path.name for path in catalog_files()} >= {"defaults.toml", "workloads.toml", "presets.toml",
                                                       "published.toml"}


def test_the_repository_benchmarks_toml_declares_nothing_twice():
    """The repo's file only extends the catalog: every setting is declared once, in the package."""
    config = load_config(REPO / "benchmarks.toml")
    assert config.replaced == frozenset() and set(config.sources.values()) <= set(catalog_files())


def test_a_local_benchmarks_toml_overrides_a_packaged_workload_by_name(tmp_path, monkeypatch):
    (tmp_path / "benchmarks.toml").write_text(
        '[workloads.mnist_cnn]\nmodel = "mnist_cnn"\ndescription = "mine"\nbatch_size = 32\n\n'
        '[workloads.mine]\nmodel = "resnet8"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(find_config(None))
    packaged = load_config(None)
    assert config.workloads["mnist_cnn"].batch_size == 32 and config.workloads["mnist_cnn"].description == "mine"
    assert config.workloads["mnist_cnn_128"] == packaged.workloads["mnist_cnn_128"]
    assert list(config.workloads)[:2] == ["mnist_cnn", "mine"]  # the file's own first
    assert config.source("workloads.mnist_cnn") == f"{tmp_path / 'benchmarks.toml'} (replaces the packaged one)"
    assert config.source("workloads.mine") == str(tmp_path / "benchmarks.toml")
    assert config.settings == packaged.settings  # no [defaults] here: the packaged one
    with pytest.raises(UsageError, match="unknown workload 'mnist_cn'; allowed: mnist_cnn, mine, .*"
                                         "\\(did you mean 'mnist_cnn'\\?\\)"):
        config_module.check_names("workload", ("mnist_cn",), config.workloads)


def test_a_local_defaults_table_replaces_the_packaged_one_as_a_whole(tmp_path):
    path = tmp_path / "benchmarks.toml"
    path.write_text("[defaults]\nsteps = 7\n")
    settings = load_config(path).settings
    assert settings.steps == 7 and settings.dataset == SweepSettings().dataset  # not the packaged "mnist"


def _catalog(monkeypatch, tmp_path: Path, files: dict[str, str]) -> None:
    folder = tmp_path / "catalog"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    monkeypatch.setattr(config_module, "CATALOG_DIR", folder)


def test_a_name_defined_twice_in_the_package_is_an_error(tmp_path, monkeypatch):
    workload = '[workloads.a]\nmodel = "mnist_cnn"\n'
    _catalog(monkeypatch, tmp_path, {"workloads.toml": workload, "more.toml": workload})
    with pytest.raises(UsageError) as info:
        load_config(None)
    message = str(info.value)
    assert "more.toml: [workloads.a] is already defined in" in message and "workloads.toml" in message


def test_a_malformed_catalog_file_names_its_file_and_line(tmp_path, monkeypatch):
    _catalog(monkeypatch, tmp_path, {"workloads.toml": '[workloads.a]\nmodel = "mnist_cnn"\n',
                                     "presets.toml": "[presets.p]\ndescription = \n"})
    with pytest.raises(UsageError, match=r"catalog/presets.toml: malformed TOML: .*line 2"):
        load_config(None)


def test_init_writes_a_starter_that_loads_and_refuses_to_overwrite(tmp_path):
    done = run_cli("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "benchmarks.toml"
    text = path.read_text()
    assert text.startswith("# benchmarks.toml") and "# [defaults]" in text and "# [presets.my-preset]" in text
    assert all(not line.strip() or line.startswith("#") for line in text.splitlines())
    config, packaged = load_config(path), load_config(None)
    assert (config.settings, config.workloads, config.presets) == (packaged.settings, packaged.workloads,
                                                                   packaged.presets)
    # Uncommenting the [defaults] block gives exactly the packaged defaults.
    block = text.split("# [defaults]\n", 1)[1].split("\n\n", 1)[0]
    path.write_text("[defaults]\n" + "\n".join(line[2:] for line in block.splitlines()) + "\n")
    uncommented = load_config(path)
    assert uncommented.settings == packaged.settings
    assert uncommented.device_defaults == packaged.device_defaults and set(packaged.device_defaults) == {"cpu", "gpu"}
    again = run_cli("init", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == f"amp-suite: error: {path} already exists; pass --force to overwrite it"
    assert run_cli("init", "--force", cwd=tmp_path).returncode == 0 and path.read_text() == text


def test_the_repositorys_benchmarks_toml_is_the_starter():
    # docs/usage.md says so, and a newcomer reads the packaged values in it
    from amp_suite.config.starter import starter_text
    from suite_cli import REPO

    assert (REPO / "benchmarks.toml").read_text() == starter_text(), \
        "benchmarks.toml is stale: rewrite it with `amp-suite init --force`"


def test_list_shows_the_presets_and_where_each_workload_and_preset_comes_from(tmp_path):
    (tmp_path / "benchmarks.toml").write_text(
        '[workloads.mine]\nmodel = "resnet8"\ndescription = "my ResNet-8"\n\n'
        '[presets.my-preset]\ndescription = "my ResNet-8 in fp32"\nworkloads = ["mine"]\n')
    done = run_cli("list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    presets = lines[lines.index("presets (amp-suite run --preset NAME; docs/presets.md):") + 1:]
    presets = presets[:next(i for i, line in enumerate(presets) if not line.startswith("  "))]
    assert [line.split()[0] for line in presets] == ["my-preset", *PRESETS, "transformers"]
    assert all(line.endswith("[package: presets.toml]") for line in presets[1:])
    assert presets[0].endswith(f"[{tmp_path / 'benchmarks.toml'}]")
    assert any(line.split()[0] == "mnist_cnn" and line.endswith("[package: workloads.toml]") for line in lines)
    assert any(line.split()[0] == "mine" and line.endswith(f"[{tmp_path / 'benchmarks.toml'}]") for line in lines)
    assert "unavailable" not in done.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_an_installed_wheel_runs_in_an_empty_directory(tmp_path):
    """`pip install amp-suite`, then `amp-suite run` where there is no benchmarks.toml."""
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("amp_suite", "builtin"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("amp_suite-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {f"amp_suite/catalog/{path.name}" for path in CATALOG_DIR.glob("*.toml")} <= shipped
    site = tmp_path / "site"
    install = subprocess.run([*pip, "install", "--no-deps", "--no-compile", "-q", "--target", str(site), str(wheel)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def amp_suite(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "amp_suite", *args], capture_output=True, text=True,
                              cwd=empty, env=env, timeout=600)

    where = subprocess.run([sys.executable, "-c", "import amp_suite; print(amp_suite.__file__)"],
                           capture_output=True, text=True, cwd=empty, env=env, timeout=60)
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # the wheel, not this checkout
    listing = amp_suite("list")
    assert "unavailable" not in listing.stdout and "haiku-jmp-mnist" in listing.stdout, listing.stdout
    assert "[package: workloads.toml]" in listing.stdout
    done = amp_suite("run", "--frameworks", "torch", "--precisions", "fp32", "--steps", "3", "--warmup", "1",
                     "--batch-size", "16", "--repeats", "1", "--val-split", "test[8000:8064]", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    report = (empty / "amp-suite-results" / "report.md").read_text()
    assert "| mnist_cnn" in report and "config none (the packaged catalog)" in report
    assert os.listdir(empty) == ["amp-suite-results"]
