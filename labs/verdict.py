"""What a check says and what a grade adds up to, and Gradescope's ``results.json``.

A check ends in one of three states:

* **passed** or **failed**, with feedback for the student;
* **ungraded**: the machine could not measure it (the fidelity gate refused every
  attempt, no root for the fabric, not enough time). An ungraded check costs the
  student nothing: it is left out of the score and the grade says it is incomplete.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CheckResult", "Grade", "Outcome", "fail", "ok", "ungraded"]

PASSED, FAILED, UNGRADED = "passed", "failed", "ungraded"


@dataclass(frozen=True)
class Outcome:
    """A check function's answer: ``status`` and the feedback a student reads.
    ``fraction`` of the points for a partly right answer (1 when passed)."""

    status: str
    feedback: str
    fraction: float = 0.0


def ok(feedback: str = "") -> Outcome:
    return Outcome(PASSED, feedback, 1.0)


def fail(feedback: str, fraction: float = 0.0) -> Outcome:
    return Outcome(FAILED, feedback, max(0.0, min(1.0, fraction)))


def ungraded(reason: str) -> Outcome:
    return Outcome(UNGRADED, reason)


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    kind: str
    todo: str
    visibility: str
    max_points: float
    outcome: Outcome
    seconds: float = 0.0

    @property
    def points(self) -> float:
        return 0.0 if self.outcome.status == UNGRADED else self.max_points * self.outcome.fraction

    def feedback(self, show_hidden: bool = False) -> str:
        """What the student reads: a hidden check says only whether it passed."""
        o = self.outcome
        if self.visibility == "hidden" and not show_hidden and o.status == FAILED:
            return f"hidden check failed (look again at {self.todo})"
        if o.status == FAILED:
            return f"{self.todo}: {o.feedback}"
        return o.feedback


@dataclass
class Grade:
    lab: int
    title: str
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def max_score(self) -> float:
        return sum(r.max_points for r in self.results)

    @property
    def ungraded(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome.status == UNGRADED]

    @property
    def passed(self) -> bool:
        """Every check passed (none failed, none ungraded)."""
        return all(r.outcome.status == PASSED for r in self.results)

    @property
    def verdict(self) -> str:
        if any(r.outcome.status == FAILED for r in self.results):
            return "FAILED"
        return "INCOMPLETE" if self.ungraded else "PASSED"

    def results_json(self, show_hidden: bool = False) -> str:
        """Gradescope's autograder format: one test per check. An ungraded check
        scores 0 of its points here and says why; the top-level output says the
        grade is incomplete, so that a teacher runs it again rather than counts it."""
        tests: list[dict[str, Any]] = []
        for r in self.results:
            test: dict[str, Any] = {
                "name": f"{r.id}: {r.title}", "score": round(r.points, 3),
                "max_score": r.max_points, "output": r.feedback(show_hidden),
                "visibility": "after_published" if r.visibility == "hidden" else "visible",
                "tags": [r.kind],
            }
            if r.outcome.status != UNGRADED:
                test["status"] = r.outcome.status
            else:
                test["output"] = f"ungraded (not a fail): {r.outcome.feedback}"
            tests.append(test)
        top = f"lab {self.lab}: {self.verdict}, {self.score:g} of {self.max_score:g} points"
        if self.ungraded:
            top += (f"; {len(self.ungraded)} check(s) ungraded because the machine could not "
                    "measure them: run the check again on a quieter machine")
        doc = {"score": round(self.score, 3), "max_score": self.max_score,
               "execution_time": round(self.seconds, 1), "output": top,
               "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
               "extra_data": {"verdict": self.verdict, "notes": self.notes,
                              "ungraded": [r.id for r in self.ungraded],
                              "checks": [asdict(r.outcome) | {"id": r.id} for r in self.results]
                              if show_hidden else []}}
        return json.dumps(doc, indent=2) + "\n"
