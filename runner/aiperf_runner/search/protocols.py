"""The interfaces the controller drives the two searches through, as typing Protocols.

- `ArchitectureSearcher`: proposes architectures (`ArchitectureProposal`) and learns the accuracy
  each reached; `bayesian.ArchitectureSearch` (GP + simulated annealing) is the one in the runner.
- `HparamOptimiser`: suggests the hyper-parameters of a new trial and learns its result;
  `hparams.HparamSearch` (optuna TPE) is the one in the runner.

Both are rebuilt from the run's log on resume (`from_history`, a classmethod). They match by
structure, not inheritance: any class with these methods can stand in (a fake in a test, another
search a site wants to try). The concrete classes are checked against them by mypy where they are
defined.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aiperf_runner.spec.graph import Graph

if TYPE_CHECKING:
    from typing import Self


class ArchitectureProposal(Protocol):
    """One architecture to train, as the search proposes it."""

    @property
    def graph(self) -> Graph: ...

    @property
    def arch_hash(self) -> str: ...

    @property
    def parent_hash(self) -> str | None:
        """The architecture it was morphed from; None for the seed."""

    @property
    def morphisms(self) -> Sequence[str]:
        """The morphisms from the parent, in order ("deeper", "wider", "skip")."""


class ArchitectureSearcher(Protocol):
    """The architecture search. The controller calls it from one thread (its ProposalBuffer)."""

    def propose(self) -> ArchitectureProposal | None:
        """The next architecture to train, never one proposed before; None when none is left."""

    def observe(self, arch_hash: str, accuracy: float) -> None:
        """The best accuracy a trial of architecture `arch_hash` reached (repeats are aggregated)."""

    @classmethod
    def from_history(cls, seed_graph: Graph, history: Iterable[Mapping[str, Any]], **kwargs: Any) -> Self:
        """A search that has seen the run so far: `history` holds the log's trials in proposal
        order, each with "graph", "arch_hash", "parent_hash", "morphisms" and "accuracy" (None
        unless finished); kwargs as for the constructor (e.g. `rng_seed`)."""


class HparamOptimiser(Protocol):
    """The hyper-parameter optimiser: one point per trial, each result paired with its trial id."""

    def suggest(self, trial_id: str, parent: object = None, round: int = 0) -> tuple[dict[str, Any], str]:
        """(hyper-parameters, source) for new trial `trial_id`. `parent`: the trial its architecture
        was morphed from (id, or the controller's record with `.trial` and `.hparams`), None for
        the seed; `round`: its round. Source: "seed", "inherited" or "tpe"."""

    def tell(self, trial_id: str, accuracy: float | None) -> bool:
        """The result of trial `trial_id` (None: it failed for good). False when the trial is
        unknown or was told already."""

    @classmethod
    def from_history(cls, records: Iterable[Sequence[Any] | Mapping[str, Any]], **kwargs: Any) -> Self:
        """An optimiser that has seen the run so far: records in proposal order, each with "trial",
        "hparams", "hparam_source" and "accuracy" (None unless finished); kwargs as for the
        constructor (e.g. `preset`, `seed`)."""
