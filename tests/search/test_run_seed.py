"""`run --seed S`: the searches' proposals are a function of the seed and the results they were told,
so two runs with the same seed that see the same results propose the same things; other seeds differ."""

from __future__ import annotations

import hashlib

from aiperf_runner.data.presets import get_preset
from aiperf_runner.search.buffer import make_search


def _accuracy(key: str) -> float:
    """A result that depends only on what was proposed (the same for the same proposal)."""
    return 0.80 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) / 0xFFFFFF * 0.15


def _drive(seed: int, rounds: int = 6, slots: int = 3) -> list[tuple[str, dict]]:
    """A run's calls into both searches, in a fixed order: propose a wave, suggest its points, tell results."""
    preset = get_preset("smoke")
    search, hparams = make_search(preset, preset.dataset(None), seed)
    out: list[tuple[str, dict]] = []
    parent_of: dict[str, str] = {}
    seq = 0
    for round_ in range(rounds):
        wave = search.propose_batch(slots)
        for proposal in wave:
            trial = f"t{seq:04d}"
            seq += 1
            parent = parent_of.get(proposal.parent_hash or "")
            hp, source = hparams.suggest(trial, parent, round_)
            parent_of.setdefault(proposal.arch_hash, trial)
            out.append((proposal.arch_hash, {**hp, "source": source}))
        for (arch, hp), trial in zip(out[-len(wave):], [f"t{i:04d}" for i in range(seq - len(wave), seq)], strict=True):
            acc = _accuracy(arch + repr(sorted(hp.items())))
            search.observe(arch, acc)
            hparams.tell(trial, acc)
    return out


def test_the_same_seed_and_results_give_the_same_proposals() -> None:
    first, second = _drive(7), _drive(7)
    assert first == second
    assert any(hp["source"] == "tpe" for _, hp in first)  # TPE took part, not only inheritance


def test_other_seeds_propose_other_things() -> None:
    base = _drive(7)
    tpe = [h for _, h in base if h["source"] == "tpe"]
    for other in (_drive(8), _drive(9)):
        assert other[0][0] == base[0][0]  # the seed architecture comes first, whatever the seed
        assert [a for a, _ in other][1:] != [a for a, _ in base][1:]  # then the morphisms differ
        assert [h for _, h in other if h["source"] == "tpe"] != tpe  # and so do TPE's points
