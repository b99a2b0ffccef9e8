"""A Celery worker whose verification is slow, so that a test can kill it inside the task.

    python -m tests.service.slow_worker SECONDS WORKER-OPTIONS...

Wraps `leaderboard.pipeline._verify` (the part of a run between the claim and the final
transaction) with a sleep of SECONDS, then runs `celery -A server worker WORKER-OPTIONS` in this
process; the prefork pool's children inherit the wrapper. Used by test_e2e_services.py: the service
itself has no test-only delay.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    import django

    django.setup()  # the pipeline's models need the app registry: import it only after this
    from leaderboard import pipeline
    from server.celery import app

    delay = float(argv[0])
    verify = pipeline._verify

    def slow_verify(sub: Any) -> dict[str, Any]:
        time.sleep(delay)
        return verify(sub)

    pipeline._verify = slow_verify  # type: ignore[assignment]
    app.worker_main(["worker", *argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
