"""An experiment: the model, GPU, weights format and engine profile, and every section (:mod:`.cluster`,
:mod:`.engine`, :mod:`.workload`, :mod:`.slo`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.config.base import MAX_SEED, Strict
from simulator.config.cluster import ClusterConfig
from simulator.config.energy import EnergyConfig
from simulator.config.engine import CostModelConfig, KVCacheConfig, LoRAConfig, SchedulerConfig
from simulator.config.slo import MetricsConfig, SLOConfig
from simulator.config.workload import WorkloadConfig


class ExperimentConfig(Strict):
    name: str = "experiment"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    model: str = Field(description="catalog name, path to a model YAML, or a Hugging Face config.json")
    hardware: str = Field(description="catalog name or path to a hardware YAML; `<either>@<generation>` prices it with "
                          "another GPU generation's fitted parameters (e.g. h100-sxm@ampere)")
    dtype: Literal["bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4", "nvfp4"] = Field(
        default="bf16",
        description="weights: bf16/fp16 (activations the same), fp8/fp8_block/int8 (W8A8 at that peak), int4 and "
        "mxfp4 (weight-only, dequantised to 16-bit math; an engine may run MXFP4 experts against MXFP8: its profile's "
        "mxfp4_experts_by_generation), nvfp4 (W4A4 on FP4 tensor cores where the GPU has them, else dequantised); "
        "in a file, auto (the default there) = the checkpoint's quantization_config, else bf16; a quantised "
        "checkpoint's unquantised parts (e.g. gpt-oss attention) stay 16-bit",
    )
    engine: str = Field(
        default="vllm",
        description="engine profile: catalog name or path to a YAML; its server defaults fill the scheduler and KV "
        "cache settings the experiment leaves out",
    )
    cluster: ClusterConfig = ClusterConfig()
    scheduler: SchedulerConfig = Field(default_factory=dict, validate_default=True)  # each: its default kind's
    kv_cache: KVCacheConfig = Field(default_factory=dict, validate_default=True)
    cost_model: CostModelConfig = Field(default_factory=dict, validate_default=True)
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    metrics: MetricsConfig = MetricsConfig()
    energy: EnergyConfig = EnergyConfig()
    lora: LoRAConfig | None = None

    @model_validator(mode="after")
    def _admission_has_a_bound(self) -> ExperimentConfig:
        admission = self.cluster.admission
        if admission is None or admission.kind != "slo" or admission.ttft_ms is not None:
            return self
        unbound = [c.name for c in self.workload.classes or [] if c.slo is None or c.slo.ttft_ms is None]
        if self.slo.ttft_ms is None and (unbound or not self.workload.classes):
            whose = f" (request classes {unbound} have none of their own)" if unbound else ""
            raise ValueError("cluster.admission.ttft_ms: kind slo needs a TTFT bound; give ttft_ms or slo.ttft_ms"
                             + whose)
        return self

    @model_validator(mode="after")
    def _recv_interval_without_dp_ranks(self) -> ExperimentConfig:
        if self.scheduler.recv_interval > 1 and any(pool.data_parallel > 1 for pool in self.cluster.replica_pools()):
            raise ValueError("scheduler.recv_interval: needs cluster.data_parallel 1 (SGLang's recv skipper does not "
                             "run with --enable-dp-attention)")
        return self

    @model_validator(mode="after")
    def _lora_fits_the_deployment(self) -> ExperimentConfig:
        if self.lora is None:
            return self
        if self.scheduler.kind not in ("continuous", "chunked"):
            raise ValueError(f"lora: needs scheduler.kind continuous or chunked (got {self.scheduler.kind!r}): "
                             "max_loras is an admission rule of iteration-level batching")
        cluster = self.cluster
        pools = cluster.replica_pools() if cluster.kind == "colocated" else []
        if cluster.kind != "colocated" or any(pool.data_parallel > 1 for pool in pools):
            raise ValueError("lora: for colocated replicas without attention data parallelism (disaggregated pools "
                             "and DP ranks with adapters are not modelled yet)")
        return self
