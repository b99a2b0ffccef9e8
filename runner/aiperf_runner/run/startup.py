"""Starting a run, the steps before its controller exists (Controller.create): the config completed
from the preset, the backend opened, the system described for run.json (the backend's facts masked
like everything else the run publishes) and run.json assembled.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

from aiperf_runner import __version__
from aiperf_runner.backends.base import Backend, Slot, load_backend
from aiperf_runner.client.service import Service
from aiperf_runner.data import staging as stagedata
from aiperf_runner.data.presets import Preset, get_preset
from aiperf_runner.run.heartbeats import ask_token
from aiperf_runner.rundir import privacy
from aiperf_runner.rundir.config import DECODER_ENV, DEFAULT_DATA_DECODER, ControllerError, RunConfig
from aiperf_runner.spec import SPEC_VERSION, presetfacts
from aiperf_runner.spec.rules import RULES_VERSION
from aiperf_runner.util import sysinfo


def resolve_preset_defaults(config: RunConfig) -> Preset:
    """Check the config and fill what it leaves to the preset (epoch budgets, patience) and to the
    environment (the ImageFolder decoder)."""
    if not config.data_decoder:
        config.data_decoder = os.environ.get(DECODER_ENV) or DEFAULT_DATA_DECODER
    config.check()
    preset = get_preset(config.preset)
    if not config.epoch_budgets:
        config.epoch_budgets = list(preset.epoch_budgets)
    if not config.early_stopping_patience:
        config.early_stopping_patience = preset.early_stopping_patience
    return preset


def check_pixels(config: RunConfig, dataset: dict[str, Any]) -> None:
    """A pixel pack (`stage --decoded`) holds one decoder's images: the run must decode with that one."""
    if presetfacts.pixel_pack_problem(dataset, config.data_decoder):
        pixels = dataset["packed"]["pixels"]
        raise ControllerError(f"--data {config.data} holds images decoded by {pixels} at staging, but this run "
                              f"decodes with {config.data_decoder}: set {DECODER_ENV}={pixels}, or stage the data "
                              "again")


def open_backend(config: RunConfig, run_dir: Path) -> tuple[Backend, list[Slot]]:
    """The run's backend and its slots; the config gets the devices per slot the backend resolved."""
    backend = load_backend(config.backend)(run_dir, slots=config.slots, devices_per_slot=config.devices_per_slot or None,
                                           **config.backend_options)
    config.devices_per_slot = backend.devices_per_slot  # as the backend resolved its default
    slots = backend.slots()
    if not slots:
        raise ControllerError(f"backend {config.backend!r} offers no slot")
    return backend, slots


def system_facts(backend: Backend, slots: list[Slot]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the backend says of the system, as it says it; what this machine says of itself)."""
    facts = backend.system_facts()
    host = sysinfo.collect(len(slots), slots[0].world_size, slots[0].device_type)
    return facts, host


def describe_system(config: RunConfig, slots: list[Slot], facts: dict[str, Any],
                    registration: dict[str, Any] | None) -> dict[str, Any]:
    """run.json's `system`: the facts, the nodes the slots use, and what the operator and the
    service's registration name (system name, interconnect, id)."""
    system = dict(facts)
    system["nodes"] = max(int(system.get("nodes") or 1), len({n for s in slots for n in s.nodes}))
    if config.system_name:
        system["name"] = config.system_name
    if config.interconnect:
        system["interconnect"] = config.interconnect
    if registration is not None:
        system["id"] = registration["id"]
        system["registration"] = dict(registration)
        system.setdefault("name", registration.get("name") or "")
        if registration.get("interconnect") and "interconnect" not in system:
            system["interconnect"] = registration["interconnect"]
    return system


def declared_peaks(config: RunConfig, slots: list[Slot], facts: dict[str, Any], registration: dict[str, Any] | None,
                   overrides: dict[str, float] | None) -> tuple[dict[str, float | None], dict[str, str]]:
    """The peak FLOP/s of the hardware as the backend and this machine describe it, before any name
    in it is masked (util/sysinfo.py), and the operator's overrides."""
    return sysinfo.declared_peaks(describe_system(config, slots, facts, registration), overrides)


def public_system(config: RunConfig, slots: list[Slot], host: dict[str, Any], facts: dict[str, Any],
                  registration: dict[str, Any] | None, masker: privacy.Masker) -> dict[str, Any]:
    """run.json's `system` as published: whatever the backend, its facts go through the run's
    masker (host names as pseudonyms unless the site publishes them, paths shortened)."""
    return describe_system(config, slots, {**host, **masker.value(facts)}, registration)


def record_data_source(config: RunConfig, preset: Preset, run_dir: Path, masker: privacy.Masker) -> dict[str, Any] | None:
    """run.json's `data_source` (the data staged to the nodes with --stage-data, else where it is read)."""
    try:
        return stagedata.start_run(run_dir, config.preset, preset.data_format, config.data, config.stage_data, masker)
    except stagedata.StageError as exc:
        raise ControllerError(f"--stage-data: {exc}") from None


def ask_run_token(config: RunConfig, registration: dict[str, Any] | None,
                  service: Service | None) -> dict[str, Any] | None:
    """The service's run id and token for a witnessed run (None: unwitnessed)."""
    if service is None or registration is None:
        return None
    fields: dict[str, Any] = {
        "preset": config.preset, "rules": config.rules, "precision": config.precision,
        "slots": config.slots, "devices_per_slot": config.devices_per_slot,
        "duration_s": config.duration_s, "runner_version": __version__}
    if config.rehearsal:
        fields["rehearsal"] = True
    return ask_token(service, registration, fields)


def tuning(config: RunConfig, dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """run.json's `tuning`: the settings a site may change in the closed division (docs/rules.md, "What a
    site may tune"), as this run trains with them; the list shows them beside the result. `decoded_at_staging`
    only for a run that reads a pixel pack (`stage --decoded`)."""
    workers = os.environ.get("AIPERF_DATA_WORKERS") or "auto"  # train/data.py default_workers
    knobs = {"precision": config.precision, "data_decoder": config.data_decoder, "data_workers": workers,
             "channels_last": True, "torch_compile": False, "cuda_graphs": False}
    packed = (dataset or {}).get("packed")
    if isinstance(packed, dict) and packed.get("pixels"):
        knobs["decoded_at_staging"] = True
    return knobs


def make_run_json(config: RunConfig, token: dict[str, Any] | None, public_config: dict[str, Any],
                  system: dict[str, Any], peaks: dict[str, float | None], peak_sources: dict[str, str],
                  dataset: dict[str, Any], data_source: dict[str, Any] | None) -> dict[str, Any]:
    """run.json of a new run (its id the service's for a witnessed run, else a random one)."""
    run_json = {
        "run_id": token["run_id"] if token else secrets.token_hex(16),
        "runner_version": __version__,
        "spec_version": SPEC_VERSION,
        "rules_version": RULES_VERSION,
        "rules": config.rules,
        "preset": config.preset,
        "precision": config.precision,
        "seed": config.seed,
        "created_at": time.time(),
        "config": public_config,
        "system": system,
        "declared_peak_flops": peaks,
        "declared_peak_source": peak_sources,
        "dataset": dataset,
        "data_decoder": config.data_decoder,  # how the trials decode ImageFolder images (train/decode.py)
        "tuning": tuning(config, dataset),
    }
    if data_source is not None:
        run_json["data_source"] = data_source
    return run_json

