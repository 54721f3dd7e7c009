"""Serving-engine profiles: the fixed costs of an iteration that are not GPU kernels.

CPU scheduling, input preparation, kernel launches the GPU waits for, sampling synchronisation and Python overhead
belong to the engine, not the GPU. A profile (``engine_profiles/NAME.yaml``, chosen by ``engine:`` in an experiment
or ``--engine`` on the CLI) charges, per iteration,

    per_iteration_ms + layers × per_layer_us + sequences × per_sequence_us

and says how close the engine's kernels and collectives come to the best achievable on the hardware
(``compute_efficiency``, ``memory_efficiency``, ``communication_efficiency``: 1 = as fast as the hardware
profile's fitted GEMM, streaming and NCCL rates), and whether it batches the prompts of an iteration into one
forward pass (``prefill_batching``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog.loading import load_catalog_entry
from simulator.catalog.paths import PROJECT_ROOT

ENGINE_DIR = PROJECT_ROOT / "engine_profiles"


class EngineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    per_iteration_ms: float = Field(default=0.0, ge=0)
    per_layer_us: float = Field(default=0.0, ge=0)
    per_sequence_us: float = Field(default=0.0, ge=0)
    compute_efficiency: float = Field(default=1.0, gt=0, le=1, description="engine kernels vs the GPU's best GEMMs")
    memory_efficiency: float = Field(default=1.0, gt=0, le=1, description="engine kernels vs the GPU's best streaming")
    communication_efficiency: float = Field(
        default=1.0, gt=0, le=1, description="engine collectives vs the hardware's NCCL bandwidth"
    )
    prefill_batching: Literal["batched", "sequential"] = Field(
        default="batched", description="sequential: each prompt of an iteration is its own forward pass"
    )
    sources: list[str] = Field(default_factory=list)

    def iteration_overhead(self, num_layers: int, num_sequences: int) -> float:
        """Seconds the engine adds to one iteration."""
        return (
            self.per_iteration_ms * 1e-3 + num_layers * self.per_layer_us * 1e-6
            + num_sequences * self.per_sequence_us * 1e-6
        )


def load_engine(name_or_path: str) -> EngineProfile:
    """A catalog name (``splitwise``) or a path to an engine YAML."""
    return load_catalog_entry(name_or_path, ENGINE_DIR, EngineProfile, "engine", "engine profile")
