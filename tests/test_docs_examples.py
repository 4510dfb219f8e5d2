"""Every shell and Python example in README.md and docs/*.md runs, as its doc declares beside it.

A fenced ``sh`` or ``python`` block runs as it is, in a fresh folder, unless
the HTML comment on the line above it says otherwise::

    <!-- test: DIRECTIVE; DIRECTIVE; ... -->

The directives, each ``NAME: VALUE`` (``slow`` has no value):

* ``skip: REASON``: not run (a GPU, a cluster, a download); pytest counts it
  as skipped with the reason;
* ``run: COMMAND``: run only this command line of the block (repeatable; it
  must be one of the block's lines, word for word); ``rest: REASON`` says why
  the others are not run;
* ``add: FLAGS``: appended to every ``amp-suite run`` command (the shrinking:
  fewer steps, one framework, fewer validation images; a later flag wins over the example's own);
* ``replace: OLD => NEW``: a text of the block replaced before it runs
  (repeatable; OLD must be in the block);
* ``setup: COMMANDS``, ``then: COMMANDS``: shell commands run before and
  after the block (``then`` checks what it made);
* ``module: PATH``: the block is a file saved at PATH (a plugin module, a test,
  a ``benchmarks.toml``), not a script to run; ``needs: PATH`` also saves the
  block of the same doc whose module is PATH;
* ``slow``: it runs a real framework (``-m 'not slow'`` leaves it out).

Shell examples run under ``bash -e -o pipefail`` with this interpreter's
``bin`` first on ``PATH`` and ``.venv`` pointing at its environment, so
``amp-suite``, ``.venv/bin/amp-suite`` and ``python`` are the suite's.  The
fake framework (``-p fakefw``, tests/helpers) stands in where a doc's shrinking
names it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from suite_cli import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = ("sh", "python")
KNOWN = ("skip", "run", "rest", "add", "replace", "setup", "then", "module", "needs", "slow")
# What one example may take, shrunk (a fake-framework sweep takes seconds; a real one under a minute on 2 cores).
EXAMPLE_TIMEOUT_S = 300


@dataclass
class Example:
    """One fenced block of a doc and the directives above it."""

    doc: Path
    line: int
    language: str
    code: str
    directives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def values(self, key: str) -> list[str]:
        return [value for name, value in self.directives if name == key]

    def value(self, key: str) -> str | None:
        found = self.values(key)
        return found[0] if found else None


def parse_directives(text: str) -> list[tuple[str, str]]:
    """``skip: no GPU; slow`` -> [("skip", "no GPU"), ("slow", "")]; an unknown name is an error."""
    directives = []
    # a ";" ends a directive only where the next one's name follows: a command may hold ";" of its own
    starts = "|".join(KNOWN)
    for part in (p.strip() for p in re.split(rf";\s*(?=(?:{starts})\b)", text)):
        if not part:
            continue
        name, _, value = part.partition(":")
        name = name.strip()
        assert name in KNOWN, f"unknown directive {name!r} in <!-- test: {text} -->; known: {', '.join(KNOWN)}"
        directives.append((name, value.strip()))
    return directives


def examples_in(doc: Path, text: str) -> list[Example]:
    """Every ``sh`` and ``python`` block of a doc's ``text`` (and any block saved as a module), with its
    directives."""
    examples = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
        language = match.group(1)
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = re.fullmatch(r"<!-- test: (.*) -->", before.strip())
        directives = parse_directives(marker.group(1)) if marker else []
        if language in LANGUAGES or any(name == "module" for name, _ in directives):
            examples.append(Example(doc, text[:match.start()].count("\n") + 1, language, match.group(2),
                                    directives))
    return examples


def collect(docs: list[Path] = DOCS) -> list[Example]:
    return [example for doc in docs for example in examples_in(doc, doc.read_text())]


EXAMPLES = collect()


def command_lines(code: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped, ``&&`` chains split
    (the script stops at the first command that fails, as the chain would)."""
    joined = re.sub(r"\s*\\\n\s*", " ", code)
    lines = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        lines += [part.strip() for part in line.split(" && ") if part.strip()]
    return lines


def shrunk(command: str, add: str | None) -> str:
    """``command`` with ``add`` appended when it is an ``amp-suite run``."""
    return f"{command} {add}" if add and re.match(r"(\S*/)?amp-suite run\b", command) else command


def script_of(example: Example) -> str:
    """The shell script that runs ``example`` as its directives say."""
    code = example.code
    for replacement in example.values("replace"):
        old, _, new = replacement.partition(" => ")
        assert old in code, f"{example.name}: replace: {old!r} is not in the example"
        code = code.replace(old, new)
    steps = list(example.values("setup"))
    for needed in example.values("needs"):
        [source] = [e for e in EXAMPLES if e.doc == example.doc and e.value("module") == needed] or [None]
        assert source is not None, f"{example.name}: needs {needed!r}, which no block of the doc saves"
        steps.append(_write_file(needed, source.code))
    module = example.value("module")
    if module:
        steps.append(_write_file(module, code))
    elif example.language == "python":
        steps += [_write_file("example.py", code), "python example.py"]
    else:
        lines = command_lines(code)
        chosen = example.values("run")
        for command in chosen:
            assert command in lines, f"{example.name}: run: {command!r} is not a command line of the example"
        if chosen:
            assert example.value("rest") or set(chosen) == set(lines), \
                f"{example.name}: say why the other commands do not run (rest: REASON)"
        steps += [shrunk(command, example.value("add")) for command in (chosen or lines)]
    steps += example.values("then")
    return "\n".join(steps) + "\n"


def _write_file(path: str, text: str) -> str:
    """A shell step writing ``text`` to ``path`` (its folder made first)."""
    delimiter = "AMP_SUITE_EXAMPLE_EOF"
    assert delimiter not in text
    folder = str(Path(path).parent)
    return f"mkdir -p '{folder}' && cat > '{path}' <<'{delimiter}'\n{text}{delimiter}\n"


def _params():
    for example in EXAMPLES:
        marks = [pytest.mark.slow] if example.value("slow") is not None else []
        yield pytest.param(example, id=example.name, marks=marks)


@pytest.mark.parametrize("example", list(_params()))
def test_the_example_runs(example: Example, tmp_path: Path) -> None:
    reason = example.value("skip")
    if reason is not None:
        pytest.skip(f"{example.name}: {reason}")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "AMP_SUITE_CACHE": str(tmp_path / "cache")}
    script = script_of(example)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert done.returncode == 0, (f"{example.name} failed (exit {done.returncode})\n--- script:\n{script}"
                                  f"--- stdout:\n{done.stdout[-3000:]}\n--- stderr:\n{done.stderr[-3000:]}")


def test_every_example_is_run_or_skipped_for_a_stated_reason() -> None:
    """The count: every sh and python block of the docs is here, and each one not run says why."""
    for language in LANGUAGES:  # counted apart from the parser: no block slips past it
        fences = sum(doc.read_text().count(f"\n```{language}\n") for doc in DOCS)
        assert len([e for e in EXAMPLES if e.language == language]) == fences > 5, language
    skipped = [e for e in EXAMPLES if e.value("skip") is not None]
    assert all(len(e.value("skip") or "") >= 10 for e in skipped), [e.name for e in skipped]
    for example in EXAMPLES:
        if example.value("skip") is None:
            script_of(example)  # every run:, replace: and needs: names what the example holds


def test_the_directives_are_read_as_declared() -> None:
    [example] = examples_in(REPO / "docs" / "made-up.md", "<!-- test: run: amp-suite list; add: --steps 2; rest: the first needs a GPU -->\n"
                             "```sh\namp-suite run --device gpu \\\n    --steps 20   # slow\namp-suite list\n```\n")
    assert command_lines(example.code) == ["amp-suite run --device gpu --steps 20", "amp-suite list"]
    assert script_of(example) == "amp-suite list\n"
    assert command_lines("python3 -m venv .venv && .venv/bin/amp-suite run  # all\n") == [
        "python3 -m venv .venv", ".venv/bin/amp-suite run"]
    assert shrunk(".venv/bin/amp-suite run", "-q") == ".venv/bin/amp-suite run -q"
    assert shrunk("amp-suite list", "-q") == "amp-suite list"
    with pytest.raises(AssertionError, match="unknown directive 'skipp'"):
        parse_directives("skipp: typo")


