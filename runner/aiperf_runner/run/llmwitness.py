"""The service's witness of an AIPerf-LLM run (run/llmrun.py): a run token before the run starts (the service picks
the run id and signs what the run will be), heartbeats with the log's head while it runs, every receipt into the
log, and one last witnessed heartbeat after `run_finished` — the same client, heartbeat lines and receipt chain
as an image run's (run/heartbeats.py), so that spec/llmtrust.py checks them as spec/verify.py does an image log's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from aiperf_runner.client.service import Service
from aiperf_runner.run.heartbeats import (
    WitnessedLog,
    Witnessing,
    ask_token,
    first_line_hash,
    token_interval,
)
from aiperf_runner.spec import keys
from aiperf_runner.spec import witness as spec_witness
from aiperf_runner.spec.eventlog import EventWriter

FINAL_RECEIPT_WAIT_S = 60.0  # how long the end of a witnessed run waits for its last receipt

Figures = Callable[[], tuple[float, int, float | None]]
"""What a heartbeat says of the run so far: FLOPs of the finished trials, training records, best e^-loss."""


def ask(service: Service, registration: Mapping[str, Any], run_json: Mapping[str, Any]) -> dict[str, Any]:
    """The run token for the run `run_json` describes (its `config` block holds slots, devices and duration)."""
    config = run_json["config"]
    fields = {k: (config[k] if k in ("slots", "devices_per_slot", "duration_s") else run_json[k])
              for k in spec_witness.TOKEN_BOUND}
    if config.get("rehearsal"):
        fields["rehearsal"] = True  # a rehearsal token: verified for this site only, never ranked
    return ask_token(service, dict(registration), fields)


class LlmWitness:
    """A witnessed run's heartbeats and receipts, driven by the controller's loop (`tick`) and its end (`finish`)."""

    def __init__(self, service: Service, token: Mapping[str, Any], log: EventWriter, figures: Figures,
                 say: Callable[[str], None]) -> None:
        run_id = str(token["statement"]["run_id"])
        self.witnessing = Witnessing(service, run_id, token_interval(dict(token)), keys.load_private_key(),
                                     first_line_hash(log.path))
        self.logged = WitnessedLog(self.witnessing, log.append, lambda: log.head, figures, lambda _beacon: None, say)

    @classmethod
    def resumed(cls, service: Service, events: list[dict[str, Any]], log: EventWriter, figures: Figures,
                say: Callable[[str], None]) -> LlmWitness | None:
        """The witness of a resumed run (None when it was not witnessed): the receipts the service issued that the
        killed controller never logged go in first, and the chain goes on from the log's last receipt."""
        token = events[0].get("token") if events else None
        if not isinstance(token, Mapping):
            return None
        self = cls(service, token, log, figures, say)
        heartbeats = [int(e["seq"]) for e in events if e["type"] == "heartbeat"]
        witnessed = {int(e["heartbeat_seq"]) for e in events if e["type"] == "witness"}
        receipts = [e for e in events if e["type"] == "witness"]
        for receipt in self.witnessing.missing_receipts(heartbeats, witnessed):
            self.logged.log_receipt(receipt)
            receipts.append(receipt)
        self.witnessing.follow(max(receipts, key=lambda r: r["heartbeat_seq"]) if receipts else None)
        return self

    def tick(self) -> None:
        self.logged.tick()

    def finish(self) -> None:
        """After run_finished: the end of the run witnessed (or a note that `submit` will try again)."""
        try:
            self.logged.final(FINAL_RECEIPT_WAIT_S)
        finally:
            self.witnessing.stop()


def figures_of(losses: list[float], flops: float, records: int) -> tuple[float, int, float | None]:
    """A heartbeat's figures from the run so far (the best loss as its accuracy equivalent e^-L)."""
    return flops, records, math.exp(-min(losses)) if losses else None
