"""A dishonest AIPerf-LLM trial program for the audit's end-to-end test (`run --workload llm --trial-module
tests.service.llm_skipping_trial --devices-per-slot 1`): it trains a tenth of its steps, then waits out half the
time the rest would have taken, and logs every step it was given (tokens and FLOPs to match). So it stands for a
machine five times slower than its log says: its weights and their digests are what it did, its loss is logged
truly (the re-evaluation agrees), its training rate is one its system could reach. Only training the trial again
from the start its log binds can tell (the service's audit.reexecute)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from aiperf_runner.train.llm import trialmain
from aiperf_runner.train.llm.trainer import Budget

TRAINED_ONE_IN = 10
_honest = trialmain.train


def _skipping(session: Any, data: Any, hp: Any, budget: Budget, **kwargs: Any) -> Any:
    claimed = int(budget.steps or 0)
    result = _honest(session, data, hp, Budget(steps=max(1, claimed // TRAINED_ONE_IN)), **kwargs)
    # Half the skipped steps' time (`seconds`: training alone): its logged rate twice what it reached, still far
    # under the CPU's peak; the whole time, measured from a first steps' slow start, outlasted an 80-s run.
    time.sleep(result.seconds * (claimed / result.steps - 1) / 2)
    return dataclasses.replace(result, steps=claimed, train_tokens=result.train_tokens * claimed // result.steps,
                               flops=result.flops * claimed // result.steps)


trialmain.train = _skipping  # one process per slot: rank 0 runs in this interpreter

if __name__ == "__main__":
    sys.exit(trialmain.main())
