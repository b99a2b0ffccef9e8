"""A Celery worker whose verification or audit is slow, so that a test can kill it inside the task
or have the task outlast the broker's visibility timeout.

    python -m tests.service.slow_worker verify|audit SECONDS WORKER-OPTIONS...

`verify` wraps `leaderboard.pipeline._verify` (the part of a run between the claim and the final
transaction) with a sleep of SECONDS; `audit` wraps `leaderboard.audit.evaluate` (one challenged
trial's re-evaluation). Then it runs `celery -A server worker WORKER-OPTIONS` in this process; the
prefork pool's children inherit the wrapper. Used by test_e2e_services.py, test_faults.py and
test_e2e_trust.py: the service itself has no test-only delay.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    import django

    django.setup()  # the pipeline's models need the app registry: import it only after this
    from leaderboard import audit, pipeline
    from server.celery import app

    what, delay = argv[0], float(argv[1])
    module, name = {"verify": (pipeline, "_verify"), "audit": (audit, "evaluate")}[what]
    slowed = getattr(module, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay)
        return slowed(*args, **kwargs)

    setattr(module, name, slow)
    app.worker_main(["worker", *argv[2:]])


if __name__ == "__main__":
    main(sys.argv[1:])
