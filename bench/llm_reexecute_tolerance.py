"""How far an AIPerf-LLM trial's re-execution lands from an honest trial's final weights, and from the weights of a
trial that trained fewer steps than it logged: the measurements behind `spec.llmrules.REEXECUTE_TOLERANCE`.

Per preset, two trials: the seed (`t0001`) and a child grown from it by two growths (`t0002`), each with the
search's default hyper-parameters (search/llmhparams.py DEFAULTS, the preset's smallest batch but one on
llm-smoke, its smallest on llm-kjv to bound the time). Every ratio is the audit's
(train/llm/reexecute.py): ||replayed - claimed|| / ||claimed - start||.

- **honest**: the trial trained by the trial program itself (trialmain.run_rank; with world 2, two processes of a
  gloo group), on `world` 1 or 2 ranks of 1 or 2 threads each, in fp32 or under bf16 autocast (CPU autocast
  standing in for a GPU trainer's: train/llm/trainer.py autocasts bf16 on CUDA), then re-executed in fp32 on 1
  and 2 threads, as the audit would on its CPU; an fp32 trainer's weights also against a re-execution in float64
  (standing in for another machine's fp32 kernels, which round otherwise: no other machine was at hand);
- **budget k/n**: the same trial trained from the same start with a smaller Budget (k = 1/10, 1/2, 9/10 of its n
  steps: its cosine compressed into k steps) and logged as n, re-executed for n steps;
- **truncated k/n**: the first k steps of the n-step schedule only (a trainer stopped early), for comparison.

    python bench/llm_reexecute_tolerance.py [--quick] [--preset NAME ...]

Bounded: 1.5 to 3.5 minutes for llm-smoke on a busy 2-core machine (training on 1 thread a rank), 10 more for llm-kjv
(seed and child, fewer configurations; `--quick` or `--preset llm-smoke` skips it, and it is skipped when Debian's
bible-kjv text cannot be made).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmgrowth import replay as grown_arch
from aiperf_runner.spec.llmrules import REEXECUTE_TOLERANCE, llm_preset
from aiperf_runner.train.llm import trialmain
from aiperf_runner.train.llm.reexecute import Plan, Replayed, replay, start_session, training_data
from aiperf_runner.train.llm.trainer import Budget, LlmHparams, train, train_as_ranks
from aiperf_runner.train.weights import load_weights
from llm_audit_tolerance import bf16  # the sibling bench's CPU stand-in for CUDA's bf16 autocast

FRACTIONS = (0.1, 0.5, 0.9)
GROWTHS = {
    "llm-smoke": [{"kind": "widen_mlp", "layer": 0, "new_hidden": 192},
                  {"kind": "insert_block", "index": 1, "layer": {"heads": 2, "head_dim": 16, "mlp_hidden": 128}}],
    "llm-kjv": [{"kind": "widen_mlp", "layer": 0, "new_hidden": 384}, {"kind": "add_heads", "layer": 1, "n": 2}],
}
# (world, threads per rank, precision) of the honest trainers, and the replays' (world, threads)
HONEST = {
    "llm-smoke": [(1, 1, "fp32"), (1, 2, "fp32"), (2, 1, "fp32"), (1, 1, "bf16"), (1, 2, "bf16"), (2, 1, "bf16")],
    "llm-kjv": [(1, 1, "fp32"), (2, 1, "fp32"), (1, 1, "bf16")],
}
REPLAY_THREADS = {"llm-smoke": (1, 2), "llm-kjv": (1, 2)}
BATCH = {"llm-smoke": 2048, "llm-kjv": 2048}


def _rank(rank: int, world: int, trial_dir: str, spec: dict[str, Any], rendezvous: str, half: bool,
          threads: int) -> None:
    torch.set_num_threads(threads)
    with bf16(half):
        trialmain.run_rank(rank, world, Path(trial_dir), spec, rendezvous)


def _spawned(rank: int, world: int, trial_dir: str, spec: dict[str, Any], rendezvous: str, half: bool,
             threads: int) -> None:
    _rank(rank, world, trial_dir, spec, rendezvous, half, threads)
    os._exit(0)  # as the trial program's ranks (trialmain._spawned): gloo's threads can abort finalisation


def train_honest(trial_dir: Path, spec: dict[str, Any], world: int, threads: int, half: bool) -> None:
    """The trial program's own training of `spec` in `trial_dir` (its parent's files in a sibling directory)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "trial.json").write_text(json.dumps({**spec, "world": world}))
    if world == 1:
        before = torch.get_num_threads()
        try:
            _rank(0, 1, str(trial_dir), {**spec, "world": 1}, "", half, threads)
        finally:
            torch.set_num_threads(before)
        return
    fd, name = tempfile.mkstemp(prefix="rdzv-", dir=trial_dir)
    os.close(fd)
    os.unlink(name)
    torch.multiprocessing.spawn(_spawned, args=(world, str(trial_dir), {**spec, "world": world}, f"file://{name}",
                                                half, threads), nprocs=world, join=True)


def forged(plan: Plan, data: Any, k: int, how: str, half: bool = False) -> dict[str, torch.Tensor]:
    """The trial's weights after k of its steps: `budget` (a Budget of k steps) or `truncated` (the first k steps
    of its n-step schedule), trained from its true start on `plan.world` ranks (emulated: the same floats)."""
    spec = plan.spec()
    hp = LlmHparams(**spec["hparams"])
    session = start_session(plan, data)
    with bf16(half):
        if how == "budget" and plan.world == 1:
            train(session, data.train, hp, Budget(steps=k), seed=spec["seed"])
        elif how == "budget":
            train_as_ranks(session, data.train, hp, k, seed=spec["seed"], world=plan.world)
        else:
            train_as_ranks(session, data.train, hp, spec["steps"], seed=spec["seed"], world=plan.world, limit=k)
    return {n: t.detach().to("cpu") for n, t in session.model.state_dict().items()}


def replay_fp64(plan: Plan, data: Any) -> Replayed:
    """The trial re-executed in float64 (the model, its moments and every step; the loss still taken in fp32): its
    distance from an fp32 trainer's weights bounds what another machine's fp32 kernels, rounding otherwise, make."""
    spec = plan.spec()
    session = start_session(plan, data)
    session.model.double()
    for state in session.optimizer.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor) and value.is_floating_point():
                state[key] = value.double()
    start = {n: p.detach().to(torch.float64, copy=True) for n, p in session.model.named_parameters()}
    seconds = train_as_ranks(session, data.train, LlmHparams(**spec["hparams"]), spec["steps"], seed=spec["seed"],
                             world=plan.world)
    return Replayed(start, {n: t.detach() for n, t in session.model.state_dict().items()}, seconds)


def measure(preset_name: str, work: Path) -> list[dict[str, Any]]:
    preset = llm_preset(preset_name)
    data = training_data(preset)
    n = preset.steps_per_trial
    hp = {"lr": 3e-3, "warmup_steps": 30, "weight_decay": 0.1, "batch_tokens": BATCH[preset_name]}
    seed_arch: LlmArch = preset.seed_arch
    child_arch = grown_arch(seed_arch, GROWTHS[preset_name])
    proposals = {
        "seed": {"trial": "t0001", "arch": seed_arch.to_dict(), "parent": None, "growths": [], "hparams": hp,
                 "steps": n},
        "child": {"trial": "t0002", "arch": child_arch.to_dict(), "parent": "t0001",
                  "growths": GROWTHS[preset_name], "hparams": hp, "steps": n},
    }
    parent_dir = work / preset_name / "parent" / "trials" / "t0001"
    rows: list[dict[str, Any]] = []
    for kind, proposal in proposals.items():
        spec = {**proposal, "attempt": 1, "preset": preset_name,
                "parent_arch": seed_arch.to_dict() if kind == "child" else None, "seed": int(proposal["trial"][1:])}

        def plan(world: int, claimed: Path, threads: int | None = None, _p: dict[str, Any] = proposal,
                 _kind: str = kind) -> Plan:
            parent = {"parent_arch": seed_arch.to_dict(), "parent_weights": parent_dir / trialmain.WEIGHTS,
                      "parent_optimizer": parent_dir / trialmain.OPTIMIZER} if _kind == "child" else {}
            return Plan(proposal=_p, run_seed=0, world=world, preset=preset_name, weights=claimed, threads=threads,
                        **parent)

        if kind == "seed":  # the parent of the child: the honest seed trial, fp32 on one rank of one thread
            train_honest(parent_dir, spec, 1, 1, False)
        replays: dict[tuple[int, int], Replayed] = {}
        for world in sorted({w for w, _, _ in HONEST[preset_name]}):
            for threads in REPLAY_THREADS[preset_name]:
                if world == 2 and threads == 2 and preset_name != "llm-smoke":
                    continue
                replays[(world, threads)] = replay(plan(world, Path("-"), threads), data)
        torch.set_num_threads(1)
        fp64 = replay_fp64(plan(1, Path("-")), data)
        for world, threads, precision in HONEST[preset_name]:
            case = work / preset_name / f"{kind}-w{world}-t{threads}-{precision}" / "trials" / proposal["trial"]
            if kind == "child":
                shutil.copytree(parent_dir, case.parent / "t0001", dirs_exist_ok=True)
            started = time.perf_counter()
            train_honest(case, spec, world, threads, precision == "bf16")
            claimed = load_weights(case / trialmain.WEIGHTS)
            for (w, t), rep in replays.items():
                if w == world:
                    rows.append({"preset": preset_name, "trial": kind, "how": "honest", "world": world,
                                 "threads": threads, "precision": precision, "replay_threads": t,
                                 "ratio": rep.ratio(claimed), "equal": rep.equal(claimed),
                                 "train_s": time.perf_counter() - started})
            if world == 1 and precision == "fp32":
                rows.append({"preset": preset_name, "trial": kind, "how": "honest", "world": 1, "threads": threads,
                             "precision": "fp32", "replay_threads": "1 in fp64", "ratio": fp64.ratio(claimed),
                             "equal": False, "train_s": 0.0})
        torch.set_num_threads(1)
        for world in sorted({w for w, _, _ in HONEST[preset_name]}):
            rep = replays[(world, 1)]
            for how, half in (("budget", False), ("budget", True), ("truncated", False)):
                if half and world != 1:
                    continue
                for fraction in FRACTIONS:
                    k = max(1, round(fraction * n))
                    claimed = forged(plan(world, Path("-")), data, k, how, half)
                    rows.append({"preset": preset_name, "trial": kind, "how": f"{how} {k}/{n}", "world": world,
                                 "threads": 1, "precision": "bf16" if half else "fp32", "replay_threads": 1,
                                 "ratio": rep.ratio(claimed), "equal": rep.equal(claimed), "train_s": 0.0})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="llm-smoke only")
    ap.add_argument("--preset", action="append", choices=sorted(HONEST), help="only these presets (repeatable)")
    args = ap.parse_args()
    presets = args.preset or (["llm-smoke"] if args.quick else ["llm-smoke", "llm-kjv"])
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llm-reexecute-") as tmp:
        for name in presets:
            started = time.perf_counter()
            try:
                got = measure(name, Path(tmp))
            except ValueError as exc:  # llm-kjv without Debian's bible-kjv text
                print(f"{name}: skipped ({exc})")
                continue
            rows += got
            for r in got:
                print(f"{r['preset']} {r['trial']:5} {r['how']:15} world {r['world']} x {r['threads']} thread(s) "
                      f"{r['precision']}, replayed on {r['replay_threads']}: ratio {r['ratio']:.3g}"
                      f"{' (bit-identical)' if r['equal'] else ''}")
            print(f"{name}: {time.perf_counter() - started:.0f} s")
    print("summary (the ratio: ||replayed - claimed|| / ||claimed - start||):")
    for precision in ("fp32", "bf16"):
        honest = [r["ratio"] for r in rows if r["how"] == "honest" and r["precision"] == precision
                  and r["replay_threads"] in (1, 2)]
        if honest:
            print(f"  honest {precision}: max {max(honest):.3g} over {len(honest)} re-executions")
    wide = [r["ratio"] for r in rows if r["replay_threads"] == "1 in fp64"]
    if wide:
        print(f"  honest fp32 re-executed in fp64 (another machine's fp32 kernels, bounded): max {max(wide):.3g} "
              f"over {len(wide)}")
    for how in ("budget", "truncated"):
        for precision in ("fp32", "bf16"):
            for fraction in FRACTIONS:
                ratios = [r["ratio"] for r in rows if r["how"].startswith(how) and r["precision"] == precision
                          and math.isclose(int(r["how"].split()[1].split("/")[0]) / int(r["how"].split("/")[1]),
                                           fraction, abs_tol=0.02)]
                if ratios:
                    print(f"  {how} {fraction:g} of the steps, {precision}: min {min(ratios):.3g} over {len(ratios)}")
    print(f"  REEXECUTE_TOLERANCE: {REEXECUTE_TOLERANCE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
