"""schemathesis' stateful testing in-process: the schema's OpenAPI links (leaderboard/api/links.py) chain
requests against a live server, bounded in scenarios and steps, with the counts kept for the report.

`run_stateful` builds the state machine from the served schema, sends every request with the given
headers, validates each answer (no 5xx, valid against the schema, plus the caller's checks) and returns
how many scenarios, steps and link-followed steps it ran.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import schemathesis
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

import tests.service.schemathesis_hooks  # noqa: F401 - the upload chunks' media type

Check = Callable[[Any, Any, Any], bool | None]


@dataclass
class Counts:
    scenarios: int = 0
    steps: int = 0
    seconds: float = 0.0
    links: Counter[str] = field(default_factory=Counter)  # explicit links followed, by name
    inferred: int = 0  # steps along links schemathesis inferred itself
    statuses: Counter[str] = field(default_factory=Counter)  # "POST /api/v1/systems/ 201"
    link_statuses: Counter[str] = field(default_factory=Counter)  # "<link id> 201": the answers to link-made calls

    def summary(self, name: str) -> str:
        followed = sum(self.links.values())
        top = ", ".join(f"{k.split(' -> ')[-1]}×{n}" for k, n in self.links.most_common(8))
        return (f"schemathesis stateful {name}: {self.scenarios} scenarios, {self.steps} steps, {followed} along the "
                f"schema's links ({top}), {self.inferred} along inferred ones, {self.seconds:.1f} s")


def run_stateful(schema_url: str, headers: dict[str, str], *, scenarios: int, steps: int,
                 checks: list[Check]) -> Counts:
    """Run the state machine; raises on the first failed check (no shrinking: the failure is printed as found)."""
    schema = schemathesis.openapi.from_url(schema_url)
    base = schema.as_state_machine()
    counts = Counts()

    class Machine(base):  # type: ignore[valid-type,misc]
        def setup(self) -> None:
            counts.scenarios += 1

        def step(self, input):  # type: ignore[no-untyped-def]
            counts.steps += 1
            transition = input.transition
            self.link = None
            if transition is not None and input.is_applied:
                if transition.is_inferred:
                    counts.inferred += 1
                else:
                    counts.links[transition.id] += 1
                    self.link = transition.id
            return super().step(input)

        def get_call_kwargs(self, case):  # type: ignore[no-untyped-def]
            return {"headers": headers, "timeout": 30}

        def after_call(self, response, case):  # type: ignore[no-untyped-def]
            counts.statuses[f"{case.method} {case.operation.path} {response.status_code}"] += 1
            if getattr(self, "link", None):
                counts.link_statuses[f"{self.link} {response.status_code}"] += 1

        def validate_response(self, response, case, additional_checks=None, **kwargs):  # type: ignore[no-untyped-def]
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance, *checks],
                                   headers=headers, transport_kwargs=kwargs or None)

    started = time.monotonic()
    try:
        run_state_machine_as_test(Machine, settings=hypothesis.settings(
            max_examples=scenarios, stateful_step_count=steps, deadline=None, derandomize=True, database=None,
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            suppress_health_check=list(hypothesis.HealthCheck)))
    finally:
        counts.seconds = time.monotonic() - started
    return counts
