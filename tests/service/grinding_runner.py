"""A patched runner that grinds the beacon: it reads each receipt and throws some away (a site would keep
asking until a beacon steered the challenge away from the trials it cheated on), then goes on. Here the
second and third receipts are thrown away whatever their beacons, so that the test does not depend on luck.

    python -m tests.service.grinding_runner hide|rechain RUNNER-ARGS...

`hide`: later heartbeats name the thrown-away receipt (the chain the service expects), the log never
holds it. `rechain`: later heartbeats name the last receipt the log holds, as if the thrown-away one
had never been issued. Either way the runner never asks the service for receipts it missed (the honest
runner does, on resume and before it submits, and would log the thrown-away ones). Used by
test_e2e_trust.py for the run and its submission: each must end outside the official division.
"""

from __future__ import annotations

import sys
from typing import Any


def main(mode: str, argv: list[str]) -> None:
    from aiperf_runner.cli import main as runner_main
    from aiperf_runner.run import heartbeats
    from aiperf_runner.spec import witness

    drained = heartbeats.Witnessing.receipts

    def receipts(self: Any) -> list[dict[str, Any]]:
        kept = []
        for receipt in drained(self):
            thrown, seen = getattr(self, "thrown", 0), getattr(self, "seen", 0)
            self.seen = seen + 1
            if seen >= 1 and thrown < 2:
                self.thrown = thrown + 1
                if mode == "rechain":
                    with self._lock:
                        self._previous = getattr(self, "kept_digest", None)
                continue
            self.kept_digest = witness.receipt_digest(receipt)
            kept.append(receipt)
        return kept

    heartbeats.Witnessing.receipts = receipts  # type: ignore[method-assign]
    heartbeats.Witnessing.missing_receipts = lambda self, beats, witnessed: []  # type: ignore[method-assign]
    sys.argv = ["aiperf-runner", *argv]
    runner_main()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
