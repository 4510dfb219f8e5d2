"""Issue 39, part A: nothing of the user's is deleted or overwritten, stored values are checked, text is bounded.

One test per defect: each builds the situation the defect was found in, then asserts the fixed behaviour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_suite.envs import EnvironmentSpec, state_of
from amp_suite.envs.build import STAMP, create, fingerprint, remove
from amp_suite.owned_paths import MARKER, MARKER_TEXT, NotOursError, make_marked_folder
from suite_cli import run_cli
from suite_cli import tiny_config_file as _config

SPEC = EnvironmentSpec("six@a", "fake", ("six==1.16.0",))
ENVIRONMENT = '\n[environments."six@a"]\nframework = "fake"\nrequirements = ["six==1.16.0"]\n'
FAILING_INSTALLER = "/bin/false"  # an installer that fails at once: create() cleans up after it


def _foreign(envs: Path) -> Path:
    """A folder of the user's that happens to carry a declared environment's name."""
    folder = envs / SPEC.name
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "thesis.tex").write_text("a week of work")
    return folder


# --- 1. environment folders ------------------------------------------------------------------


def test_env_create_refuses_to_remove_a_folder_amp_suite_did_not_make(tmp_path):
    """HIGH: env create removed a foreign folder with an environment's name before building."""
    folder = _foreign(tmp_path)
    with pytest.raises(NotOursError) as info:
        create(SPEC, tmp_path, uv=FAILING_INSTALLER)
    assert "\n" not in str(info.value) and str(folder) in str(info.value) and "left alone" in str(info.value)
    assert (folder / "data" / "thesis.tex").read_text() == "a week of work"


def test_env_remove_refuses_a_folder_amp_suite_did_not_make(tmp_path):
    """HIGH: env remove deleted a foreign folder outright."""
    folder = _foreign(tmp_path)
    config = _config(tmp_path, ENVIRONMENT)
    done = run_cli("env", "remove", SPEC.name, "--config", str(config), env={"AMP_SUITE_ENVS": str(tmp_path)})
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(errors) == 1 and "not make" in errors[0] and str(folder) in errors[0]
    assert (folder / "data" / "thesis.tex").exists()


def test_env_list_does_not_call_a_foreign_folder_a_half_finished_build(tmp_path):
    """HIGH: env list called a foreign folder a half-finished build and advised env create."""
    _foreign(tmp_path)
    state = state_of(SPEC, tmp_path)
    assert not state.built and "never finished" not in state.problem and "not an environment amp-suite built" \
        in state.problem
    config = _config(tmp_path, ENVIRONMENT)
    listed = run_cli("env", "list", "--config", str(config), env={"AMP_SUITE_ENVS": str(tmp_path)})
    assert "never finished" not in listed.stdout and "leaves it alone" in listed.stdout


def test_a_failed_build_removes_only_the_folder_it_made(tmp_path):
    """HIGH: a failed build left a foreign folder gone; it removes its own, marked folder only."""
    with pytest.raises(Exception, match="could not be built"):
        create(SPEC, tmp_path, uv=FAILING_INSTALLER)
    assert not (tmp_path / SPEC.name).exists()


def test_a_link_in_place_of_an_environment_or_its_marker_is_not_ours(tmp_path):
    """HIGH: the marker is checked without following links (a link to a marked folder, a linked marker)."""
    elsewhere = tmp_path / "elsewhere"
    make_marked_folder(elsewhere)
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / SPEC.name).symlink_to(elsewhere)
    with pytest.raises(NotOursError):
        remove(SPEC, envs)
    assert (elsewhere / MARKER).exists() and (envs / SPEC.name).is_symlink()
    (envs / SPEC.name).unlink()
    (envs / SPEC.name).mkdir()
    (envs / SPEC.name / MARKER).symlink_to(elsewhere / MARKER)
    with pytest.raises(NotOursError):
        remove(SPEC, envs)
    assert (envs / SPEC.name / MARKER).is_symlink()


def test_a_marked_or_stamped_environment_is_still_removed(tmp_path):
    """A folder amp-suite built (its marker, or a stamp from before the marker) is removed as before."""
    make_marked_folder(tmp_path / SPEC.name)
    assert remove(SPEC, tmp_path).startswith("removed")
    (tmp_path / SPEC.name).mkdir()
    (tmp_path / SPEC.name / STAMP).write_text(json.dumps({"fingerprint": fingerprint(SPEC)}))
    assert remove(SPEC, tmp_path).startswith("removed") and not (tmp_path / SPEC.name).exists()


_ENTRY = st.sampled_from(["file", "dir", "link-to-outside", "link-to-dir-outside"])
_MARKERS = st.sampled_from(["none", "good", "wrong-text", "link", "directory"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), _ENTRY, max_size=6),
       marker=_MARKERS, folder_is_link=st.booleans())
def test_generated_folders_never_lose_what_amp_suite_did_not_make(tmp_path_factory, entries, marker,
                                                                 folder_is_link):
    """HIGH, property: whatever a folder holds, remove and create delete it only when it carries a real marker."""
    root = tmp_path_factory.mktemp("prop")
    outside = root / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("keep")
    (outside / "sub" / "keep.txt").write_text("keep")
    real = root / "real"
    real.mkdir()
    for name, kind in entries.items():
        if kind == "file":
            (real / name).write_text(name)
        elif kind == "dir":
            (real / name).mkdir()
            (real / name / "inner").write_text(name)
        elif kind == "link-to-outside":
            (real / name).symlink_to(outside / "keep.txt")
        else:
            (real / name).symlink_to(outside / "sub")
    if marker == "good":
        (real / MARKER).write_text(MARKER_TEXT)
    elif marker == "wrong-text":
        (real / MARKER).write_text("mine\n")
    elif marker == "link":
        (outside / "marker").write_text(MARKER_TEXT)
        (real / MARKER).symlink_to(outside / "marker")
    elif marker == "directory":
        (real / MARKER).mkdir()
    envs = root / "envs"
    envs.mkdir()
    if folder_is_link:
        (envs / SPEC.name).symlink_to(real)
    else:
        real.rename(envs / SPEC.name)
        real = envs / SPEC.name
    ours = marker == "good" and not folder_is_link
    before = sorted(str(p.relative_to(real)) for p in real.rglob("*"))
    for action in (lambda: remove(SPEC, envs), lambda: create(SPEC, envs, uv=FAILING_INSTALLER)):
        try:
            action()
        except NotOursError:
            assert not ours
        except Exception as exc:  # the failing installer
            assert ours and "could not be built" in str(exc)
        if not ours:
            assert sorted(str(p.relative_to(real)) for p in real.rglob("*")) == before
    assert ours != os.path.lexists(envs / SPEC.name)
    assert (outside / "keep.txt").read_text() == "keep" and (outside / "sub" / "keep.txt").read_text() == "keep"
    if marker == "link":
        assert (outside / "marker").read_text() == MARKER_TEXT
