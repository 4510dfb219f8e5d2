"""The acceptance's state file: what each phase judged, so ``--resume`` continues where the last one stopped.

It lies beside the report (``amp-suite-acceptance.md`` → ``amp-suite-acceptance.json``) and is
rewritten, atomically, whenever the report is: before each command and after each check.  A phase
killed at any moment therefore leaves a state and a report that agree and hold every check it
finished.  The file is plain JSON a person can read; a damaged or foreign one is refused in one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError

STATE_VERSION = 1


@dataclass(frozen=True)
class StoredOutcome:
    """One judged check (pass or fail) as an earlier phase left it."""

    key: str
    status: str
    observed: str
    phase: str  # that phase's start, ISO 8601


@dataclass
class AcceptanceState:
    """Everything a later phase needs: the plan's identity, the judged checks, the commands run."""

    mode: str
    device: str
    frameworks: list[str]
    workdir: str
    phases: list[str] = field(default_factory=list)
    outcomes: dict[str, StoredOutcome] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    calibration_output: str = ""  # the calibrate command's stdout: the ceiling beside the sweeps' figures

    def to_json(self) -> str:
        data = asdict(self)
        data["version"] = STATE_VERSION
        return json.dumps(data, indent=1, sort_keys=True) + "\n"


def state_path(report: Path) -> Path:
    """Where the state of the report at ``report`` lies."""
    return report.with_suffix(".json") if report.suffix != ".json" else report.with_name(report.name + ".state")


def check_state_replaceable(path: Path, *, force: bool) -> None:
    """A one-line error unless the state file at ``path`` may be written: absent, or a state an acceptance run
    wrote (a JSON object of this version), or any regular file with ``force``; a link or special file never."""
    from amp_suite.errors import UsageError
    from amp_suite.owned_paths import FORCE_FLAG, NotOursError, read_private_file
    from amp_suite.safe_files import UnsafeFileError, check_regular_or_absent

    try:
        check_regular_or_absent(path)
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None
    if not path.exists() or force:
        return
    data = read_private_file(path.parent, path.name, 64 << 20)
    try:
        value = json.loads(data or b"")
    except ValueError:
        value = None
    if isinstance(value, dict) and value.get("version") == STATE_VERSION and "mode" in value:
        return
    raise NotOursError(f"{str(path)[:300]!r} (where the report's state goes) exists and is not a file amp-suite "
                       f"doctor --acceptance wrote; left alone (pass {FORCE_FLAG} to replace it, or choose another "
                       "--report)")


def load_state(path: Path) -> AcceptanceState:
    """The state at ``path``; a missing, unreadable or malformed file is a one-line :class:`UsageError`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--resume: no acceptance state at {path} (an earlier `amp-suite doctor --acceptance` "
                         "with the same --report writes it)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: cannot read the acceptance state {path}: {exc}") from None
    try:
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version') if isinstance(data, dict) else None!r}, "
                             f"expected {STATE_VERSION}")
        outcomes = {}
        for key, item in dict(data.get("outcomes") or {}).items():
            outcome = StoredOutcome(str(item["key"]), str(item["status"]), str(item["observed"]), str(item["phase"]))
            if outcome.status not in ("pass", "fail"):
                raise ValueError(f"check {key!r} has status {outcome.status!r}")
            outcomes[str(key)] = outcome
        commands = [dict(c) for c in data.get("commands") or []]
        return AcceptanceState(str(data["mode"]), str(data["device"]), [str(f) for f in data["frameworks"]],
                               str(data["workdir"]), [str(p) for p in data.get("phases") or []], outcomes,
                               commands, str(data.get("calibration_output") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--resume: {path} is not an acceptance state amp-suite wrote ({exc})") from None
