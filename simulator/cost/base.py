"""The contract every cost model keeps.

An iteration is described by :class:`IterationShape`: prompt chunks being prefilled (new tokens, tokens already in
the KV cache before the chunk) and decode sequences (how many, and the sum of their context lengths *after* this
step's token is written). ``iteration_time`` returns seconds.

For speed the engine advances runs of identical decode iterations in closed form, so a cost model must also give
``decode_step_coefficients(num_decodes) -> (a, c)`` with

    iteration_time(decode-only, num_decodes=B, decode_context_sum=S) == a + c × S      (exactly, for every S)

i.e. a pure decode step is affine in the total context of the batch. While a batch of B sequences decodes, S grows
by B per step, so n steps starting at S0 take  n·a + c·(n·S0 + B·n(n−1)/2)  seconds.

A cost model that prices FLOPs and bytes (``prices_work``) also says why an iteration costs what it costs
(:mod:`simulator.cost.work`): ``iteration_work(shape)``, whose parts sum to ``iteration_time(shape)``, and
``decode_step_work(num_decodes) -> (w0, w1)``, the work of a decode-only step with context sum S being
``w0 + w1 × S`` (exactly, as its time).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from simulator.cost.work import Work
from simulator.registry import Registry

if TYPE_CHECKING:
    from simulator.catalog import EngineProfile, HardwareSpec, ModelSpec
    from simulator.config.experiment import ExperimentConfig


class IterationShape(NamedTuple):
    """What one forward pass processes."""

    prefill_chunks: tuple[tuple[int, int], ...] = ()  # (new tokens, cached tokens) per sequence
    num_decodes: int = 0
    decode_context_sum: int = 0  # sum over decode sequences of their context length including this step's token
    decode_positions: int = 1  # positions each decode sequence runs through (k + 1 when verifying k drafted tokens)

    @property
    def prefill_tokens(self) -> int:
        return sum(new for new, _ in self.prefill_chunks)


class CostModel(ABC):
    """Seconds per iteration on one replica (all its tensor-parallel GPUs together)."""

    prices_work: ClassVar[bool] = False  # answers iteration_work and decode_step_work

    @classmethod
    @abstractmethod
    def from_config(cls, config: ExperimentConfig, model: ModelSpec, hardware: HardwareSpec,
                    engine: EngineProfile) -> CostModel: ...

    @abstractmethod
    def iteration_time(self, shape: IterationShape) -> float: ...

    @abstractmethod
    def decode_step_coefficients(self, num_decodes: int) -> tuple[float, float]:
        """``(a, c)`` such that a decode-only step with context sum S costs ``a + c*S`` seconds."""

    def iteration_work(self, shape: IterationShape) -> Work:
        """The iteration's FLOPs, HBM bytes and time split (:mod:`simulator.cost.work`) on one GPU."""
        raise NotImplementedError(f"{type(self).__name__} prices no FLOPs or bytes (prices_work is false)")

    def decode_step_work(self, num_decodes: int) -> tuple[Work, Work]:
        """``(w0, w1)`` such that a decode-only step with context sum S does ``w0 + w1 × S``."""
        raise NotImplementedError(f"{type(self).__name__} prices no FLOPs or bytes (prices_work is false)")


COST_MODELS: Registry[CostModel] = Registry("cost_model")


def decode_run_time(a: float, c: float, num_decodes: int, context_sum0: int, steps: int) -> float:
    """Seconds for ``steps`` consecutive decode steps whose first step has context sum ``context_sum0``."""
    return steps * a + c * (steps * context_sum0 + num_decodes * steps * (steps - 1) / 2)
