"""One row of ``amp-suite doctor`` (:class:`CheckResult`), its outcomes, and the row of a failed probe section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class CheckResult:
    """One row of the doctor's table."""

    scope: str
    check: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def _error(scope: str, check: str, section: dict[str, Any] | None) -> CheckResult | None:
    if section is None:
        return CheckResult(scope, check, FAILED, "the probe returned nothing for this check")
    if section.get("error"):
        return CheckResult(scope, check, FAILED, f"the probe raised {section['error']}")
    return None
