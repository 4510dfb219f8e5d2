"""``ProbeServer``: one long-lived probe process per framework, so a kit run pays its imports once.

A kit run makes dozens of probes of one framework.  Each used to start a
fresh Python process and import the framework again (TensorFlow alone takes
seconds); the server starts ``python -m amp_suite.testing.probe --serve``
once and hands it one request after another.  Requests of several devices
still get a process of their own (:func:`amp_suite.testing.run_probe`), since
a data-parallel engine is set up before the framework is imported.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any


class ProbeServer:
    """Runs probe requests of one framework in one process, started on first use and restarted after a crash."""

    def __init__(self, log_dir: Path | str | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="amp-suite-server-"))
        self.process: subprocess.Popen[str] | None = None
        self.log: IO[str] | None = None
        self.started = 0

    def run(self, request_json: str, out_dir: Path, timeout: float) -> None:
        """Run one request (``ProbeRequest.to_json()``) writing into ``out_dir``; ``AssertionError`` on failure."""
        process = self._process()
        assert process.stdin is not None and process.stdout is not None
        order = json.dumps({"request": json.loads(request_json), "out": str(out_dir)})
        try:
            process.stdin.write(order + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it died: the read below says how
        line = self._read_line(process.stdout, timeout)
        if line is None:
            self.close()
            raise AssertionError(f"probe server timed out after {timeout:g} s on {order[:300]}; its log:\n"
                                 f"{self._log_tail()}")
        if not line:
            code = process.wait()
            self.process = None
            raise AssertionError(f"probe server exited with code {code} on {order[:300]}; its log:\n{self._log_tail()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise AssertionError(f"probe failed:\n{answer['error']}")

    def close(self) -> None:
        """End the process (it exits when its stdin closes; killed if it does not within 30 s)."""
        process, self.process = self.process, None
        if process is not None:
            try:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        if self.log is not None:
            self.log.close()
            self.log = None

    def _process(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.started += 1
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.log = open(self.log_dir / f"server-{self.started}.log", "w", encoding="utf-8")
            self.process = subprocess.Popen(
                [sys.executable, "-m", "amp_suite.testing.probe", "--serve"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=self.log_dir)
        return self.process

    @staticmethod
    def _read_line(stream: IO[str], timeout: float) -> str | None:
        """The next line (``""`` at end of file), or None after ``timeout`` seconds."""
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            if not selector.select(timeout):
                return None
        return stream.readline()

    def _log_tail(self) -> str:
        if self.log is not None:
            self.log.flush()
        path = self.log_dir / f"server-{self.started}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def __enter__(self) -> ProbeServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
