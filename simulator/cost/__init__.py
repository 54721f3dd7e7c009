"""What one iteration costs: the contract (:mod:`.base`), the roofline and the linear models, and the factory."""

from simulator.catalog import EngineProfile, HardwareSpec, ModelSpec
from simulator.config.experiment import ExperimentConfig
from simulator.cost.attention import attention_time
from simulator.cost.base import COST_MODELS, CostModel, IterationShape, decode_run_time
from simulator.cost.collectives import collective_time
from simulator.cost.gemm import gemm_time
from simulator.cost.linear import LinearCostModel
from simulator.cost.moe import moe_time
from simulator.cost.roofline import RooflineCostModel


def build_cost_model(config: ExperimentConfig, model: ModelSpec, hardware: HardwareSpec,
                     engine: EngineProfile) -> CostModel:
    """The cost model an experiment asks for (``cost_model.kind``), of ``model`` on ``hardware`` under ``engine``
    (resolved once per run: :func:`simulator.config.deployment.resolve`)."""
    return COST_MODELS.get(config.cost_model.kind).from_config(config, model, hardware, engine)


__all__ = [
    "COST_MODELS", "CostModel", "IterationShape", "LinearCostModel", "RooflineCostModel",
    "attention_time", "build_cost_model", "collective_time", "decode_run_time", "gemm_time", "moe_time",
]
