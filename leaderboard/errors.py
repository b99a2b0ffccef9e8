"""The one exception for a bundle the service will not take: refused at upload or rejected by verification.

A `Rejected` carries the checks that failed, each with its message (`reasons`, what a submission
stores and an API answer shows), and the HTTP status an upload is refused with. Checks made while
an upload is answered have bare names (`signature`, `chain`, docs/service.md); checks of the
verification task are named `<group>.<check>` (`integrity.key`, `plausibility.score_peak`).
"""

from __future__ import annotations

from typing import TypedDict


class Reason(TypedDict):
    check: str
    message: str


class Rejected(Exception):
    """A bundle refused by one or more named checks; `status` is the HTTP status of an upload's answer."""

    def __init__(self, check: str, message: str, status: int = 400) -> None:
        self.reasons: list[Reason] = [{"check": check, "message": message}]
        self.status = status
        super().__init__(message)

    @classmethod
    def of(cls, reasons: list[Reason], status: int = 400) -> Rejected:
        """Several checks failed at once (a verification report)."""
        if not reasons:
            raise ValueError("a rejection needs at least one reason")
        exc = cls(reasons[0]["check"], reasons[0]["message"], status)
        exc.reasons = list(reasons)
        exc.args = ("; ".join(r["message"] for r in reasons),)
        return exc

    @property
    def check(self) -> str:
        """The (first) failed check's name: what an upload's answer names."""
        return self.reasons[0]["check"]

    @property
    def detail(self) -> str:
        """The (first) failed check's message."""
        return self.reasons[0]["message"]

    def within(self, group: str) -> Rejected:
        """The same rejection with upload check names put in `group` (`bundle` -> `integrity.bundle`)."""
        def named(check: str) -> str:
            return check if "." in check or check == group else f"{group}.{check}"

        return Rejected.of([{"check": named(r["check"]), "message": r["message"]} for r in self.reasons],
                           self.status)
