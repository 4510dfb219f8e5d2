"""The plugin authors' surface: one public module, every name the doc tells them to import, old paths that warn."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings

import pytest

import amp_suite.plugin_api as api
from suite_cli import REPO, source_modules

DOC = REPO / "docs" / "writing-a-plugin.md"
# The modules an author is told to import from: the public module for plugin code, the testing kit for tests.
PUBLIC = ("amp_suite.plugin_api", "amp_suite.testing")

# Every import path earlier versions of docs/writing-a-plugin.md and of examples/ used that no longer holds the
# name (git log -p -- docs/writing-a-plugin.md examples/): (old module, name, where the warning sends the author).
OLD_PATHS = [
    ("amp_suite.plugin_kit", "timed_window", "amp_suite.plugin_api"),
    ("amp_suite.plugin_kit", "require_device_kind", "amp_suite.plugin_api"),
    ("amp_suite.plugin_kit", "standard_precision", "amp_suite.plugin_api"),
    ("amp_suite.plugin_kit", "take_slowest_window", "amp_suite.plugin_api"),
    ("amp_suite.layers", "walk", "amp_suite.plugin_api"),
    ("amp_suite.layers", "iter_layers", "amp_suite.plugin_api"),
    ("amp_suite.layers", "dense_after_flatten", "amp_suite.plugin_api"),
    ("amp_suite.layers", "LAYER_KINDS", "amp_suite.plugin_api"),
    ("amp_suite.calibration_kit", "measure_both", "amp_suite.calibration.kit"),
    ("amp_suite.environment", "package_version", "amp_suite.plugin_api"),
    ("amp_suite.framework_plugin", "FrameworkPlugin", "amp_suite.plugin_api"),
    ("amp_suite.results", "to_plain", "amp_suite.plugin_api"),
    ("amp_suite.plugin_host", "PluginHost", "amp_suite.plugins.host"),
    ("amp_suite.devices", "version_text", "amp_suite.plugin_api"),
    ("amp_suite.architectures", "ARCHITECTURES", "amp_suite.workloads.architectures"),
    ("amp_suite.report", "summary_frame", "amp_suite.plugin_api"),
    ("amp_suite.workloads", "workload_from_config", "amp_suite.plugin_api"),
    ("amp_suite.workloads", "init_variables", "amp_suite.plugin_api"),
    ("amp_suite_plugins.optax_optimizer", "optax_optimizer", "amp_suite_plugins.jax.optax_optimizer"),
]


def _code_blocks(text: str, language: str = "python") -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def _stable_names() -> list[str]:
    """The names the doc's "The public module" section lists as stable (each in backticks, in its table)."""
    section = DOC.read_text().split("## The public module", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    return [name for row in rows for name in re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", row.split("|")[2])]


def test_every_stable_name_the_doc_lists_is_exported_and_every_export_is_listed():
    listed = _stable_names()
    assert sorted(listed) == sorted(api.__all__), set(listed) ^ set(api.__all__)
    for name in listed:
        assert getattr(api, name) is not None, name


def test_every_import_in_the_docs_python_examples_comes_from_the_public_modules():
    found = []
    for block in _code_blocks(DOC.read_text()):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("amp_suite"):
                assert node.module in PUBLIC or node.module.startswith("amp_suite.testing."), node.module
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
                    found.append(alias.name)
    assert {"hookimpl", "write_files_atomically", "summary_frame", "run_reporter"} <= set(found), found


def test_every_helper_the_doc_documents_is_in_the_public_module():
    """The doc's helper sections (#### `name(...)` headings) hold what an author imports from plugin_api."""
    text = DOC.read_text().split("## Testing a backend", 1)[0]
    headings = re.findall(r"^#### `([A-Za-z_][A-Za-z_0-9]*)\(", text, flags=re.M)
    documented = set(headings) - set(dir(api.probe_kit)) - set(dir(api.calibration_kit))
    assert documented and documented <= set(api.__all__), documented - set(api.__all__)


def test_the_examples_import_amp_suite_only_from_the_public_modules():
    for path in source_modules("examples"):  # not an example's own tests, nor the build/ copies pip leaves
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for module in modules:
                if module == "amp_suite" or module.startswith("amp_suite."):
                    assert module in PUBLIC, f"{path.relative_to(REPO)}: imports {module}"


def test_the_public_module_imports_no_framework_and_no_pandas():
    code = ("import sys, amp_suite.plugin_api; "
            "print(sorted(m for m in ('pandas', 'torch', 'jax', 'tensorflow', 'keras', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("old,name,new", OLD_PATHS, ids=[f"{o}.{n}" for o, n, _ in OLD_PATHS])
def test_an_old_import_path_still_works_and_names_the_new_one(old, name, new):
    module = importlib.import_module(old)
    module.__dict__.pop(name, None)  # a package keeps a name once asked: ask afresh
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old}.{name} moved: import {name} from {new}")):
        value = getattr(module, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert value is getattr(importlib.import_module(new), name)


def test_an_old_import_statement_warns_in_a_fresh_process():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "from amp_suite.plugin_kit import timed_window\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1 and "import timed_window from amp_suite.plugin_api" in out.stderr, out.stderr


def test_a_name_that_was_replaced_says_by_what():
    with pytest.raises(ImportError, match="timed_epoch no longer exists: timed_window replaced it"):
        from amp_suite.plugin_kit import timed_epoch  # noqa: F401


def test_a_plugin_written_against_an_earlier_doc_loads_and_the_host_says_what_moved(tmp_path):
    from suite_cli import run_cli

    (tmp_path / "old_style_reporter.py").write_text(
        "from amp_suite import hookimpl\n"
        "from amp_suite.plugin_kit import standard_precision\n"
        "from amp_suite.report import summary_frame\n\n\n"
        "@hookimpl\ndef write_report(results, out_dir):\n    return []\n")
    out = run_cli("plugins", "-p", "old_style_reporter", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "old_style_reporter  (module old_style_reporter)" in out.stdout
    warned = [line for line in out.stderr.splitlines() if "moved: import" in line]
    assert warned == [
        "amp-suite: warning: plugin 'old_style_reporter': amp_suite.plugin_kit.standard_precision moved: import "
        "standard_precision from amp_suite.plugin_api (amp_suite.plugin_kit goes away in a later version)",
        "amp-suite: warning: plugin 'old_style_reporter': amp_suite.report.summary_frame moved: import "
        "summary_frame from amp_suite.plugin_api (amp_suite.report.summary_frame goes away in a later version)"]
