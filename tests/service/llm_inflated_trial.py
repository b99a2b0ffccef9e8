"""A dishonest AIPerf-LLM trial program for the audit's end-to-end test (`run --workload llm --trial-module
tests.service.llm_inflated_trial --devices-per-slot 1`): it trains honestly and keeps its own weights, but logs a
validation loss 0.3 nats lower than they reach. Every line of its log holds together; only re-evaluating the
weights (the service's audit.loss) can tell."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from aiperf_runner.train.llm import trialmain

UNDERSTATED_BY = 0.3
_honest = trialmain.train


def _inflated(*args: Any, **kwargs: Any) -> Any:
    result = _honest(*args, **kwargs)
    return dataclasses.replace(result, val_loss=result.val_loss - UNDERSTATED_BY)


trialmain.train = _inflated  # one process per slot: rank 0 runs in this interpreter

if __name__ == "__main__":
    sys.exit(trialmain.main())
