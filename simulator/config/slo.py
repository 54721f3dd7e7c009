"""The ``slo:`` and ``metrics:`` sections: what a request must attain, and which requests the figures describe."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from simulator.config.base import Strict
from simulator.errors import renamed


class SLOConfig(Strict):
    """A request attains the SLO when every given bound holds (TTFT, TPOT, the longest gap between two of its
    output tokens, E2E latency; None = unbounded). The names are the metrics' (``ttft_ms``, ``tpot_ms``,
    ``max_itl_ms``, ``e2el_ms``); ``e2e_ms``, the old spelling of ``e2el_ms``, is still read, with a FutureWarning
    naming the new one."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    max_itl_ms: float | None = Field(default=None, gt=0, description="every inter-token gap of a request at most")
    e2el_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "slo", {"e2e_ms": "e2el_ms"})

    def bounds(self) -> dict[str, float]:
        """The bounds given, by metric (empty: no SLO, nothing to attain)."""
        return self.model_dump(exclude_none=True)


class MetricsConfig(Strict):
    """Which requests the latency, throughput and SLO figures describe: the first ``warmup_fraction`` and the last
    ``cooldown_fraction`` of the requests, in arrival order, are left out (a benchmark's warm-up, and the tail
    where the load drains away), as GuideLLM's warm-up / cool-down percentages and vLLM bench's ``--num-warmups``.
    Every request is still counted in ``num_requests`` / ``completed`` / ``num_rejected``. And whether the run
    records what bound each iteration (``iteration_bounds``)."""

    warmup_fraction: float = Field(default=0.0, ge=0, lt=1, description="first share of arrivals left out")
    cooldown_fraction: float = Field(default=0.0, ge=0, lt=1, description="last share of arrivals left out")
    iteration_bounds: bool = Field(
        default=False,
        description="record each iteration's bound (compute, memory or fixed) and fractions of the GPU's peak "
        "FLOP/s and HBM bandwidth (the iter_* metrics, roofline.parquet; a roofline cost model): it prices every "
        "kernel's work beside its time (about 1.7x a run's time), so off unless asked for; llmsim run turns it on "
        "unless the experiment sets it",
    )

    @model_validator(mode="after")
    def _leaves_some(self) -> MetricsConfig:
        if self.warmup_fraction + self.cooldown_fraction >= 1:
            raise ValueError(f"warmup_fraction + cooldown_fraction must be < 1 (some requests measured), got "
                             f"{self.warmup_fraction} + {self.cooldown_fraction}")
        return self
