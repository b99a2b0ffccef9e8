"""A trial's configuration: what `trial.json`, `hparams.json` and `graph.json` in its directory say.

`TrialConfig.load(trial_dir)` reads and checks the three files (docs/internals.md, "Trial
program"); `TrialError` is a trial that cannot run as configured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiperf_runner.data import staging as stagedata
from aiperf_runner.rundir.privacy import read_private
from aiperf_runner.spec.bundle import LOCAL_DIR
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.graph import Graph

from .data import DataSpec


class TrialError(AiperfError, RuntimeError):
    """A trial that cannot run as configured (bad files, inconsistent resume state)."""



@dataclass
class TrialConfig:
    trial: str
    graph: Graph
    data: DataSpec
    epoch_budget: int
    precision: str
    seed: int
    device_type: str
    patience: int | None  # early stopping on validation loss; None = off
    batch_size: int  # per device
    lr: float
    weight_decay: float
    label_smoothing: float
    dropout: float
    channels_last: bool | None = None  # None: on (faster on CUDA and, with oneDNN, on CPU too)
    lr_scaling: dict[str, Any] | None = None  # {rule, reference_batch, warmup_epochs}: lrscale.py; None: unscaled
    cpu_bind: bool = True  # pin ranks and data-loader workers to their cores (util/cpubind.py)
    commit_every_steps: int | None = None  # commit the training state this often (spec/proof.py); None: never
    keep_states: bool = True  # store the committed states (a witnessed run's audit may ask for them)
    hparams: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, trial_dir: Path) -> TrialConfig:
        def read(name: str) -> dict[str, Any]:
            path = trial_dir / name
            try:
                with open(path, encoding="utf-8") as fh:
                    return json.load(fh)
            except FileNotFoundError:
                raise TrialError(f"{path} is missing") from None
            except ValueError as exc:
                raise TrialError(f"{path} is not valid JSON: {exc}") from None

        trial, hp, graph_json = read("trial.json"), read("hparams.json"), read("graph.json")
        graph = Graph.from_json(graph_json)
        graph.validate()
        run_dir = trial_dir.parent.parent
        if not trial.get("data"):  # the data root stays out of the published trial.json
            trial["data"] = read_private(run_dir).get("data")
        staged = stagedata.stage_for_trial(run_dir)  # run --stage-data: this node's checked copy
        if staged is not None:
            trial["data"] = str(staged)
        data = DataSpec.from_trial(trial)
        if staged is not None and data.name != "fashion-mnist":
            data = replace(data, index=str(run_dir / LOCAL_DIR / stagedata.INDEX_NAME))
        want = (data.channels, data.image_size, data.image_size)
        if tuple(graph.input_shape) != want:
            raise TrialError(f"graph input shape {list(graph.input_shape)} does not match the dataset's "
                             f"images {list(want)}")
        patience = trial.get("early_stopping_patience")
        cfg = cls(
            trial=str(trial.get("trial") or trial_dir.name),
            graph=graph,
            data=data,
            epoch_budget=int(trial["epoch_budget"]),
            precision=str(trial.get("precision", "fp32")),
            seed=int(trial.get("seed", 0)),
            device_type=str(trial.get("device_type", "cpu")),
            patience=int(patience) if patience else None,
            batch_size=int(hp.get("batch_size", 32)),
            lr=float(hp.get("lr", 0.1)),
            weight_decay=float(hp.get("weight_decay", 5e-4)),
            label_smoothing=float(hp.get("label_smoothing", 0.0)),
            dropout=float(hp.get("dropout", 0.0)),
            channels_last=trial.get("channels_last"),
            lr_scaling=trial.get("lr_scaling"),
            cpu_bind=bool(trial.get("cpu_bind", True)),
            commit_every_steps=int(trial["commit_every_steps"]) if trial.get("commit_every_steps") else None,
            keep_states=bool(trial.get("keep_states", True)),
            hparams=hp,
        )
        if cfg.epoch_budget < 0 or cfg.batch_size < 1 or cfg.lr <= 0:
            raise TrialError(f"bad trial settings: epoch_budget={cfg.epoch_budget} batch_size={cfg.batch_size} lr={cfg.lr}")
        if cfg.device_type not in ("cpu", "cuda"):
            raise TrialError(f"device_type must be 'cpu' or 'cuda', not {cfg.device_type!r}")
        return cfg
