"""What speculative drafting adds to an iteration (:func:`build_draft`), by ``scheduler.speculative.method``.

With k drafted tokens per sequence, B decoding sequences of context sum S (the verification's
:class:`~simulator.cost.base.IterationShape`, k + 1 positions each) and a target decode step of ``a + c·S``:

- no method, ``draft_cost_ratio`` r: k·r·(a + c·S) — k draft steps, each r of a target decode step;
- ``draft_model`` (or no method with ``draft_model``): k·(a' + c'·S), the draft model's decode step on the same GPUs;
- ``mtp``, ``eagle``, ``eagle3``: a draft head (:mod:`simulator.catalog.draft`) on the target's GPUs, run as vLLM's
  EAGLE proposer and SGLang's EAGLE worker run it: after every target pass one draft pass over the same rows (the
  prompt chunks, and the k + 1 verified positions of each decoding sequence, whose KV and hidden states the next
  drafts need), then k − 1 single-token passes over the decoding sequences, each a decode step of the head's network
  (``a_h + c_h·S``: its layer's GEMMs, attention over the whole context, norms, the all-reduces of tensor
  parallelism and its LM head), plus its projections per token in every pass (``step_gemms``; EAGLE-3's fusion in the
  first pass only). An iteration with decodes thus costs

      target(shape) + draft(chunks, B at k + 1 positions) + (k − 1)·(a_h + c_h·S) + projections,

  one with prompt chunks only target(shape) + draft(chunks). The head's passes run inside the engine's iteration:
  the engine's per-iteration and per-sequence host costs are the target pass's, its per-layer cost counted for the
  head's layer;
- ``ngram``: prompt lookup on the host, ``ngram_us_per_sequence`` × B, no GPU work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from simulator.cost.base import CostModel, IterationShape
from simulator.cost.roofline import RooflineCostModel
from simulator.errors import ConfigError
from simulator.kv.sizing import kv_dtype

if TYPE_CHECKING:
    from simulator.catalog import EngineProfile, HardwareSpec
    from simulator.catalog.draft import DraftHead
    from simulator.config.engine import SpeculativeConfig
    from simulator.config.experiment import ExperimentConfig


class Draft(ABC):
    """Seconds the drafts of one iteration add to its target pass."""

    @abstractmethod
    def time(self, shape: IterationShape) -> float:
        """Seconds of drafting around a target pass of ``shape`` (decodes at k + 1 positions when verifying)."""


class RatioDraft(Draft):
    """k draft steps of ``ratio`` × a target decode step each (the generic draft of no method)."""

    def __init__(self, cost: CostModel, steps: int, ratio: float) -> None:
        self.cost, self.steps, self.ratio = cost, steps, ratio

    def time(self, shape: IterationShape) -> float:
        if not shape.num_decodes:
            return 0.0
        a, c = self.cost.decode_step_coefficients(shape.num_decodes)
        return self.steps * self.ratio * (a + c * shape.decode_context_sum)


class ModelDraft(RatioDraft):
    """k decode steps of a separate draft model on the same GPUs (its own cost model)."""

    def __init__(self, cost: CostModel, steps: int) -> None:
        super().__init__(cost, steps, 1.0)


class HostDraft(Draft):
    """Prompt lookup on the host: ``seconds_per_sequence`` × the decoding sequences (``ngram``)."""

    def __init__(self, seconds_per_sequence: float) -> None:
        self.seconds_per_sequence = seconds_per_sequence

    def time(self, shape: IterationShape) -> float:
        return shape.num_decodes * self.seconds_per_sequence


class HeadDraft(Draft):
    """A draft head's passes on the target's GPUs (module docstring), priced by the roofline of its network."""

    def __init__(self, head: DraftHead, network: RooflineCostModel, steps: int) -> None:
        self.network, self.steps = network, steps
        self.gemm = network.head_gemm  # the projections stay 16-bit (DeepSeek's eh_proj too)
        # column-parallel: each of the t GPUs computes n / t of the outputs (gathered after)
        t = network.tp
        self.step_gemms = [(n / t, k) for n, k in head.step_gemms]
        self.first_pass_gemms = [(n / t, k) for n, k in head.first_pass_gemms]

    def _projections(self, rows: int, first: bool) -> float:
        gemms = [*self.step_gemms, *self.first_pass_gemms] if first else self.step_gemms
        return sum(self.gemm.time(rows, n, k) for n, k in gemms)

    def time(self, shape: IterationShape) -> float:
        network, decodes = self.network, shape.num_decodes
        rows = shape.prefill_tokens + decodes * shape.decode_positions
        seconds = network.iteration_time(shape) + self._projections(rows, True)
        if decodes and self.steps > 1:
            a, c = network.decode_step_coefficients(decodes)
            seconds += (self.steps - 1) * (a + c * shape.decode_context_sum + self._projections(decodes, False))
        return seconds


def build_draft(spec: SpeculativeConfig, config: ExperimentConfig, target: CostModel, hardware: HardwareSpec,
                engine: EngineProfile, head: DraftHead | None = None, draft_cost: CostModel | None = None) -> Draft:
    """The drafting of ``spec`` on a replica whose target cost model is ``target`` (``config``: the experiment shaped
    to the replica's parallelism; ``head``: the deployment's draft head for mtp / eagle / eagle3; ``draft_cost``: a
    draft model's cost model). Raises :class:`~simulator.errors.ConfigError` for a head under a cost model other
    than the roofline (a head is priced from its shapes)."""
    k = spec.num_speculative_tokens
    if spec.method == "ngram":
        return HostDraft(spec.ngram_us_per_sequence * 1e-6)
    if head is not None:
        if not isinstance(target, RooflineCostModel):
            raise ConfigError(f"scheduler.speculative.method: {spec.method} prices its draft head from its shapes: it "
                              f"needs cost_model.kind: roofline, got {config.cost_model.kind!r} (or give the "
                              "generic draft_cost_ratio without a method)")
        cluster, cost = config.cluster, config.cost_model
        host = engine.model_copy(update={"per_iteration_ms": 0.0, "per_prompt_ms": 0.0, "per_sequence_us": 0.0})
        network = RooflineCostModel(
            head.model, hardware, cluster.tensor_parallel, config.dtype, kv_dtype(config.kv_cache.dtype, config.dtype),
            host, 1,
            cluster.expert_parallel, cluster.data_parallel, getattr(cost, "expert_load_cv", 0.0),
            getattr(cost, "all_to_all", "nccl"), getattr(cost, "eplb_redundant_experts", None),
            getattr(cost, "two_batch_overlap", False))
        return HeadDraft(head, network, k)
    if draft_cost is not None:
        return ModelDraft(draft_cost, k)
    return RatioDraft(target, k, spec.draft_cost_ratio)  # type: ignore[arg-type]  # set: no method, no draft model
