"""`integrity.bound`: what decides the score was fixed before the run and agrees everywhere.

- `run_started` (the log's first line) and `run.json` state the same rules, preset, precision,
  slots, devices per slot and data set (a run.json edited after the run, e.g. to other FLOP rules,
  disagrees with the log it was signed with);
- run.json's data set is the preset's (spec/presetfacts.py: ImageNet-1k has 1,281,167 training and
  50,000 validation images in 1,000 classes at 224x224); a run that read a pack (`aiperf-runner stage`)
  records it as `dataset.packed` (its manifest's digest and image count, which are the data set's; a
  pack of decoded pixels, `stage --decoded`, also `pixels`: its decoder, which must be run.json's
  `data_decoder`);
- every trial's graph takes the preset's input (channels x size x size) and has the data set's
  classes, within the search's bounds (spec/seeds.py: at most the preset's ratios times the seed's
  train FLOPs per image and layers); its hyper-parameters (`hparams.json`) are the ones its
  `trial_proposed` logged, inside the preset's search space (`kernel_size` fixed at 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import presetfacts, seeds
from .logaudit import Findings
from .replay import Replay
from .runio import RunDir, RunIOError, canonical_digest

RUN_STARTED_BOUND = ("rules", "rules_version", "preset", "precision", "slots", "devices_per_slot")
# `packed`: the pack the run read (data/shards.py: its manifest's digest and images), absent from both for a tree.
DATASET_BOUND = ("train_images", "val_images", "classes", "image_size", "packed")


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _config(run: Mapping[str, Any], key: str) -> Any:
    if key in ("slots", "devices_per_slot"):
        cfg = run.get("config")
        return cfg.get(key) if isinstance(cfg, Mapping) else None
    return run.get(key)


def bound_findings(run: Mapping[str, Any], replay: Replay, run_dir: RunDir) -> Findings:
    found = Findings()
    started = replay.run_started_event or {}
    for key in RUN_STARTED_BOUND:
        if started.get(key) != _config(run, key):
            found.add(1, f"run_started says {key} {started.get(key)!r}, run.json {_config(run, key)!r}")
    dataset = _mapping(run.get("dataset"))
    logged = _mapping(started.get("dataset"))
    for key in DATASET_BOUND:
        if logged.get(key) != dataset.get(key):
            found.add(1, f"run_started says dataset.{key} {logged.get(key)!r}, run.json {dataset.get(key)!r}")
    preset = presetfacts.get(run.get("preset"))
    if preset is None:
        found.add(0, f"preset {run.get('preset')!r} is not one this spec knows ({', '.join(presetfacts.PRESETS)})")
        return found
    for problem in presetfacts.dataset_problems(preset, dataset):
        found.add(0, f"run.json {problem}")
    pixels = presetfacts.pixel_pack_problem(dataset, run.get("data_decoder"))
    if pixels:
        found.add(0, f"run.json {pixels}")
    _trials(preset, dataset.get("classes"), replay, run_dir, found)
    return found


def _limits(preset: presetfacts.PresetSpec, classes: Any) -> dict[str, int | None]:
    """The search's bounds on a graph of this preset and data set (spec/seeds.py)."""
    if not (type(classes) is int and classes >= 1):
        return {"max_train_flops": None, "max_layers": None}  # the data set's problem is reported already
    seed = seeds.seed_for_preset(preset.name, classes, preset.image_size)
    return seeds.search_bounds(preset.name, seed)


def _trials(preset: presetfacts.PresetSpec, classes: Any, replay: Replay, run_dir: RunDir, found: Findings) -> None:
    want_in = preset.input_shape
    limits = _limits(preset, classes)
    max_flops, max_layers = limits["max_train_flops"], limits["max_layers"]
    for tr in replay.trials.values():
        where = f"trials/{tr.trial}"
        try:
            arch = run_dir.arch(tr.trial)
        except RunIOError:
            continue  # integrity.graphs reports it
        if arch.input_shape is not None and tuple(arch.input_shape) != want_in:
            found.add(0, f"{where}/graph.json takes {list(arch.input_shape)} images; preset {preset.name!r} "
                         f"fixes {list(want_in)}")
        if arch.output_shape is not None and tuple(arch.output_shape) != (classes,):
            found.add(0, f"{where}/graph.json outputs {list(arch.output_shape)}; the data set has {classes} classes")
        if max_layers is not None and arch.layers is not None and arch.layers > max_layers:
            found.add(0, f"{where}/graph.json has {arch.layers} layers; the search of preset {preset.name!r} "
                         f"proposes at most {max_layers}")
        if max_flops is not None and arch.error is None and arch.input_shape is not None:
            try:
                train = run_dir.trial_flops(tr.trial, "v2").train
            except RunIOError:
                train = None
            if train is not None and train > max_flops:
                found.add(0, f"{where}/graph.json trains at {train:,} FLOPs per image; the search of preset "
                             f"{preset.name!r} proposes at most {max_flops:,}")
        facts = run_dir.hparams_facts(tr.trial, preset.space)  # read in parallel by RunDir.prefetch, if many
        if facts.error is not None:
            found.add(0, facts.error)
            continue
        if facts.canonical != canonical_digest(tr.hparams):
            found.add(0, f"{where}/hparams.json differs from the hyper-parameters its trial_proposed logged")
        for problem in facts.problems:
            found.add(0, f"{where}/hparams.json: {problem}")
