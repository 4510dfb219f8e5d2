"""The kit's probes shared by the xdist lanes of a session: one run per request, however many lanes ask.

The probe itself is replaced by a stand-in that counts its runs (a real one
is a framework's step, seconds to minutes): what is tested is who runs it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amp_suite.testing import PROBE_CACHE_ENV, ProbeRequest, session_probe_folder, shared_probe, shared_probes

# A lane: it asks for the same probe as the others, the probe taking a second; it prints what it got.
_LANE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from amp_suite.testing import ProbeRequest, shared_probe, shared_probes

    runs = Path(sys.argv[2])
    def run_probe(request, folder, *, server=None):
        with runs.open("a") as counter:
            counter.write("ran\\n")
        time.sleep(1.0)
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "probe.json").write_text("{}")
        return "ran here"
    shared_probes.run_probe = run_probe
    shared_probes.load_probe = lambda request, folder: "loaded " + Path(folder, "probe.json").read_text()
    print(shared_probe(ProbeRequest("torch", "amp_bf16"), session=Path(sys.argv[1]), folder=lambda: None))
""")


def test_lanes_asking_at_once_run_the_probe_once_and_the_others_load_it(tmp_path):
    session, runs = tmp_path / "session", tmp_path / "runs.txt"
    lanes = [subprocess.Popen([sys.executable, "-c", _LANE, str(session), str(runs)], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    answers = sorted(lane.communicate(timeout=60)[0].strip() for lane in lanes)
    assert answers == ["loaded {}", "loaded {}", "ran here"]
    assert runs.read_text() == "ran\n"


class _Probes:
    """A stand-in for run_probe that records its calls and fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.folders: list[Path] = []
        self.servers: list[object] = []
        self.failing = False

    def run(self, request, folder, *, server=None):
        self.folders.append(Path(folder))
        self.servers.append(server)
        Path(folder).mkdir(parents=True, exist_ok=True)
        Path(folder, "probe.json").write_text("half")
        if self.failing:
            raise AssertionError("probe of torch amp_bf16 failed (exit 1)")
        return "ran"


@pytest.fixture
def probes(monkeypatch) -> _Probes:
    fake = _Probes()
    monkeypatch.setattr(shared_probes, "run_probe", fake.run)
    monkeypatch.setattr(shared_probes, "load_probe", lambda request, folder: f"loaded {Path(folder).name}")
    return fake


def test_a_failed_probe_keeps_nothing_and_the_next_ask_runs_it_again(tmp_path, probes):
    request = ProbeRequest("torch", "amp_bf16")
    probes.failing = True
    with pytest.raises(AssertionError, match="probe of torch amp_bf16 failed"):
        shared_probe(request, session=tmp_path, folder=lambda: tmp_path / "unused")
    probes.failing = False
    assert shared_probe(request, session=tmp_path, folder=lambda: tmp_path / "unused") == "ran"
    assert len(probes.folders) == 2 and probes.folders[0] == probes.folders[1]  # the half-written files went
    assert shared_probe(request, session=tmp_path, folder=lambda: tmp_path / "unused").startswith("loaded ")
    # Another request is another entry.
    assert shared_probe(ProbeRequest("torch", "fp32"), session=tmp_path, folder=lambda: tmp_path / "unused") == "ran"
    assert len(set(probes.folders)) == 2


def test_the_server_starts_only_in_the_lane_that_runs_the_probe(tmp_path, probes):
    started: list[str] = []

    def server():
        started.append("server")
        return "a server"

    request = ProbeRequest("keras", "fp32")
    shared_probe(request, session=tmp_path, folder=lambda: tmp_path / "unused", server=server)
    shared_probe(request, session=tmp_path, folder=lambda: tmp_path / "unused", server=server)
    assert started == ["server"] and probes.servers == ["a server"]


def test_without_a_session_folder_the_probe_runs_in_the_folder_it_is_given(tmp_path, probes):
    (tmp_path / "here").mkdir()
    assert shared_probe(ProbeRequest("jax", "fp32"), session=None, folder=lambda: tmp_path / "here") == "ran"
    assert shared_probe(ProbeRequest("jax", "fp32"), session=None, folder=lambda: tmp_path / "here") == "ran"
    assert probes.folders == [tmp_path / "here", tmp_path / "here"] and probes.servers == [None, None]


class _Factory:
    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def test_the_session_folder_is_the_chosen_one_else_the_xdist_runs_else_none(tmp_path, monkeypatch):
    factory = _Factory(tmp_path / "pytest-7" / "popen-gw1")
    for name in (PROBE_CACHE_ENV, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    assert session_probe_folder(factory) is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "abc123")
    assert session_probe_folder(factory) == tmp_path / "pytest-7" / "amp-suite-probes-abc123"
    monkeypatch.setenv(PROBE_CACHE_ENV, str(tmp_path / "chosen"))
    assert session_probe_folder(factory) == tmp_path / "chosen"


def test_a_shared_folder_is_filled_once_and_a_failed_fill_leaves_nothing(tmp_path):
    fills = []

    def fill(folder: Path) -> None:
        fills.append(folder)
        (folder / "checks.json").write_text("{}")

    def broken(folder: Path) -> None:
        (folder / "half.json").write_text("{")
        raise RuntimeError("the measuring process died")

    with pytest.raises(RuntimeError, match="died"):
        shared_probes.shared_folder(tmp_path, "keras", broken)
    assert not (tmp_path / "keras").exists()
    first = shared_probes.shared_folder(tmp_path, "keras", fill)
    again = shared_probes.shared_folder(tmp_path, "keras", fill)
    assert first == again == tmp_path / "keras" and fills == [first]
    assert (first / "checks.json").read_text() == "{}"


def test_run_probe_without_a_folder_removes_its_temporary_one_after_loading_or_failing(tmp_path, monkeypatch):
    import tempfile

    from amp_suite.testing import probes

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    loaded: list[dict[str, object]] = []

    class Server:  # a ProbeServer's run: writes the probe's file, or fails as a probe does
        failing = False

        def run(self, request_json, folder, timeout):
            if self.failing:
                raise AssertionError("the probe failed")
            Path(folder, "probe.json").write_text(request_json)

    def load(request, folder):
        loaded.append({"folder": Path(folder), "text": Path(folder, "probe.json").read_text()})
        return "result"

    monkeypatch.setattr(probes, "load_probe", load)
    server = Server()
    assert probes.run_probe(ProbeRequest("torch"), server=server) == "result"
    assert loaded[0]["text"] == ProbeRequest("torch").to_json()  # loaded while the folder was there
    assert loaded[0]["folder"].parent == tmp_path and not list(tmp_path.iterdir())
    server.failing = True
    with pytest.raises(AssertionError, match="the probe failed"):
        probes.run_probe(ProbeRequest("torch"), server=server)
    assert not list(tmp_path.iterdir())
    kept = tmp_path / "mine"
    server.failing = False
    probes.run_probe(ProbeRequest("torch"), kept, server=server)
    assert (kept / "probe.json").is_file()  # a folder the caller names stays
