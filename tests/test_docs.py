"""Documentation that cannot rot: every hook, and every helper a backend calls, has a section headed
by its exact signature."""

import inspect
import re

from amp_suite.plugins import hookspecs
from suite_cli import REPO, source_modules


def hook_signatures() -> dict[str, str]:
    out = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(func, "amp_suite_spec"):
            continue
        sig = inspect.signature(func)
        params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
        out[name] = f"{name}({params}) -> {sig.return_annotation}"
    return out


def test_there_are_hooks_to_document():
    assert {"framework_info", "build_model", "set_precision", "train_epoch", "measure"} <= set(hook_signatures())


def test_every_hook_has_a_section_headed_by_its_signature():
    headings = set(re.findall(r"^#+ `(.+)`$", (REPO / "docs" / "hooks.md").read_text(), flags=re.M))
    missing = [sig for sig in hook_signatures().values() if sig not in headings]
    assert not missing, f"undocumented or out-of-date hooks in docs/hooks.md: {missing}"


def test_firstresult_hooks_are_marked_in_the_docs():
    text = (REPO / "docs" / "hooks.md").read_text()
    for name, sig in hook_signatures().items():
        spec = getattr(hookspecs, name).amp_suite_spec
        section = text.split(f"`{sig}`", 1)[1].split("\n#", 1)[0]
        assert ("**firstresult.**" in section) == bool(spec.get("firstresult")), name


# --- records, plugin_kit and amp_suite.testing: tables and signatures checked against the code ---

import dataclasses  # noqa: E402

from amp_suite import records, testing
from amp_suite.plugins import kit as plugin_kit  # noqa: E402


def signature_text(func) -> str:
    """``name(a: T, *, b: U = 1) -> R`` as written in the source (string annotations, callables by name)."""
    sig = inspect.signature(func)
    parts, star = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        star = star or p.kind is p.VAR_POSITIONAL  # keyword-only parameters follow *args with no bare *
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        text = prefix + p.name + (f": {p.annotation}" if p.annotation is not p.empty else "")
        if p.default is not p.empty:
            text += " = " + (p.default.__name__ if callable(p.default) else repr(p.default))
        parts.append(text)
    returns = "" if sig.return_annotation is sig.empty else f" -> {sig.return_annotation}"
    return f"{func.__name__}({', '.join(parts)}){returns}"


def public_functions(module) -> dict[str, str]:
    """The functions ``module`` hands out: those its ``__all__`` names (a package that gathers its rooms' names),
    else those defined in it."""
    exported = getattr(module, "__all__", None)
    return {name: signature_text(func) for name, func in inspect.getmembers(module, inspect.isfunction)
            if (name in exported if exported is not None else func.__module__ == module.__name__)
            and not name.startswith("_")}


def record_tables() -> dict[str, list[tuple[str, str, str]]]:
    """Record name -> (field, type, meaning) rows of its table in docs/records.md."""
    text = (REPO / "docs" / "records.md").read_text()
    tables = {}
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        name = section.split("\n", 1)[0].strip("` ")
        rows = []
        for line in section.splitlines():
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "field":
                rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
        tables[name] = rows
    return tables


def test_every_record_field_is_documented_with_its_type_and_meaning():
    tables = record_tables()
    classes = {name: cls for name, cls in inspect.getmembers(records, inspect.isclass)
               if dataclasses.is_dataclass(cls) and cls.__module__.startswith(records.__name__ + ".")}
    assert set(classes) == set(tables), f"records.md sections {sorted(tables)} != records.py {sorted(classes)}"
    for name, cls in classes.items():
        expected = [(f.name, str(f.type)) for f in dataclasses.fields(cls)]
        assert [(field, type_) for field, type_, _ in tables[name]] == expected, name
        assert all(meaning for _, _, meaning in tables[name]), f"{name}: a field without a meaning"


def test_every_plugin_kit_and_testing_function_has_a_heading_with_its_signature():
    headings = set(re.findall(r"^#+ `(.+)`$", (REPO / "docs" / "writing-a-plugin.md").read_text(), flags=re.M))
    for module in (plugin_kit, testing):
        missing = [sig for sig in public_functions(module).values() if sig not in headings]
        assert not missing, f"undocumented or out-of-date {module.__name__} functions in writing-a-plugin.md: {missing}"


def test_every_conformance_test_is_in_the_table():
    from amp_suite.testing.conformance import BackendConformance

    text = (REPO / "docs" / "writing-a-plugin.md").read_text()
    names = [name for name in dir(BackendConformance) if name.startswith("test_")]
    assert names and all(f"| `{name}` |" in text for name in names), names
    fields = [f.name for f in dataclasses.fields(testing.ProbeRequest)]
    assert "ProbeRequest(" + ", ".join(fields[:1]) in text and all(f in text for f in fields)


# --- helpers a backend calls (writing-a-plugin.md): headed by their signatures, checked both ways ---

import ast  # noqa: E402
import importlib  # noqa: E402

# Modules whose helpers writing-a-plugin.md documents, each in a section headed "### `MODULE`".
HELPER_MODULES = ("amp_suite.plugins.kit", "amp_suite.workloads.layers", "amp_suite.workloads.workload", "amp_suite.machine.environment",
                  "amp_suite.doctor.probe_kit", "amp_suite.calibration.kit")
# Code written as a backend author writes it: the built-in plugins and the example packages (not their tests).
BACKEND_SOURCES = ("builtin/amp_suite_plugins", "examples")


def imported_helpers() -> dict[str, set[str]]:
    """Module -> the functions the built-in plugins and the examples import from it by name."""
    public = importlib.import_module("amp_suite.plugin_api")
    names: dict[str, set[str]] = {module: set() for module in HELPER_MODULES}
    for path in source_modules(*BACKEND_SOURCES):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in names:
                names[node.module].update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "amp_suite.plugin_api":
                for alias in node.names:  # the public module's name, documented where it is defined
                    defined = getattr(getattr(public, alias.name), "__module__", None)
                    if defined in names:
                        names[defined].add(alias.name)
    return {module: {name for name in found if inspect.isfunction(getattr(importlib.import_module(module), name, None))}
            for module, found in names.items()}


def helper_headings() -> dict[str, list[str]]:
    """Module -> the ``#### `signature` `` headings of its ``### `MODULE` `` section in writing-a-plugin.md."""
    text = (REPO / "docs" / "writing-a-plugin.md").read_text()
    sections: dict[str, list[str]] = {}
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        title = section.split("\n", 1)[0].strip("` ")
        body = re.split(r"^## ", section, flags=re.M)[0]  # a section ends at the next ## heading too
        sections[title] = re.findall(r"^#### `(.+)`$", body, flags=re.M)
    return sections


def test_the_backends_import_helpers_to_document():
    found = imported_helpers()
    assert {"walk", "iter_layers", "dense_after_flatten"} <= found["amp_suite.workloads.layers"], found
    assert "learning_rate_at" in found["amp_suite.workloads.workload"] and "timed_window" in found["amp_suite.plugins.kit"]


def test_every_helper_a_backend_imports_has_a_heading_with_its_signature():
    headings = helper_headings()
    for module, names in imported_helpers().items():
        expected = [signature_text(getattr(importlib.import_module(module), name)) for name in sorted(names)]
        missing = [sig for sig in expected if sig not in headings.get(module, [])]
        assert not missing, f"writing-a-plugin.md, section `{module}`: no heading for {missing}"


def test_every_helper_heading_is_the_current_signature():
    headings = helper_headings()
    for module_name in HELPER_MODULES:
        module = importlib.import_module(module_name)
        assert headings.get(module_name), f"writing-a-plugin.md has no section `{module_name}` with headings"
        for heading in headings[module_name]:
            function = getattr(module, heading.split("(", 1)[0], None)
            assert inspect.isfunction(function), f"`{module_name}`: {heading!r} names no function of the module"
            assert signature_text(function) == heading, f"`{module_name}`: {heading!r} is out of date"


# --- the README's two commands and CI ------------------------------------------------------------


def readme_commands() -> list[str]:
    return re.findall(r"^```sh\n(.+?)\n```$", (REPO / "README.md").read_text(), flags=re.M | re.S)


def test_the_readme_holds_exactly_two_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) == 2, f"the README must hold two commands (set up + run, set up + test): {commands}"
    assert all("\n" not in command for command in commands), commands
    run_command, test_command = commands
    assert run_command.endswith("amp-suite run") and test_command.endswith("python -m pytest")
    ci_lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith("#")]
    # `|| exit $?`: a failed venv or install must stop CI there (set -e does not, inside an && list)
    ci_test_line = f"{test_command} || exit $?"
    assert ci_test_line in ci_lines, f".ci/run does not run the README's test command as {ci_test_line!r}"
    after = ci_lines[ci_lines.index(ci_test_line) + 1:]
    assert after == [".venv/bin/ruff check", ".venv/bin/mypy"], f"lint and type checks after the tests: {after}"


def test_the_command_synopsis_in_usage_holds_every_flag_of_every_command():
    """docs/usage.md's ## Commands block names each flag the parser takes (a --no-X through its --X, a long
    option with a short form through either), so a new flag cannot go undocumented there."""
    import argparse
    import re

    from amp_suite.cli import build_parser

    text = (REPO / "docs" / "usage.md").read_text()
    block = text.split("## Commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    missing = []
    for name, command in commands.items():
        assert f"amp-suite {name}" in block, f"amp-suite {name} is not in the synopsis"
        for action in command._actions:
            names = [o for o in action.option_strings if o not in ("-h", "--help")]
            names += [o.replace("--no-", "--", 1) for o in names if o.startswith("--no-")]
            if names and not any(re.search(re.escape(o) + r"(?![\w-])", block) for o in names):
                missing.append(f"{name} {'/'.join(action.option_strings)}")
    assert not missing, f"flags missing from the synopsis of docs/usage.md: {', '.join(missing)}"
