"""Measured per-token costs, for users who have them (and for hand-checkable examples).

    prefill part = overhead_ms + prefill_ms_per_token × (prompt tokens in the iteration)   [if any prefill]
    decode part  = decode_ms_per_step + decode_ms_per_seq × (decoding sequences)            [if any decode]

An iteration costs the sum of the parts present. Decode cost does not depend on context (c = 0).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simulator.catalog import EngineProfile, HardwareSpec, ModelSpec
from simulator.config.engine import CostModelBase
from simulator.config.experiment import ExperimentConfig
from simulator.cost.base import COST_MODELS, CostModel, IterationShape


class LinearCostConfig(CostModelBase):
    """Measured per-token costs: prefill = overhead + tokens × rate; decode step = per step + per sequence."""

    kind: Literal["linear"]
    prefill_ms_per_token: float = Field(ge=0)
    decode_ms_per_step: float = Field(ge=0)
    decode_ms_per_seq: float = Field(default=0.0, ge=0)
    overhead_ms: float = Field(default=0.0, ge=0, description="fixed cost of an iteration that runs prefill")


@COST_MODELS.register("linear", config=LinearCostConfig)
class LinearCostModel(CostModel):
    def __init__(self, config: LinearCostConfig) -> None:
        self.config = config

    @classmethod
    def from_config(cls, config: ExperimentConfig, model: ModelSpec, hardware: HardwareSpec,
                    engine: EngineProfile) -> LinearCostModel:
        assert isinstance(config.cost_model, LinearCostConfig)  # picked by its kind, linear
        return cls(config.cost_model)

    def iteration_time(self, shape: IterationShape) -> float:
        cfg = self.config
        ms = 0.0
        if shape.prefill_chunks:
            ms += cfg.overhead_ms + cfg.prefill_ms_per_token * shape.prefill_tokens
        if shape.num_decodes:
            ms += cfg.decode_ms_per_step + cfg.decode_ms_per_seq * shape.num_decodes
        return ms / 1000

    def decode_step_coefficients(self, num_decodes: int) -> tuple[float, float]:
        return (self.config.decode_ms_per_step + self.config.decode_ms_per_seq * num_decodes) / 1000, 0.0
