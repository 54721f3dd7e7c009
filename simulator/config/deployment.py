"""What an experiment's names resolve to, once per run: :func:`resolve` loads the model, the GPU of the experiment
and of each replica pool, the engine profile and a speculative draft (a draft model, or the model's MTP modules or
an EAGLE head: :mod:`simulator.catalog.draft`), and the run passes the :class:`Deployment` down to everything it
builds instead of looking the names up again."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.catalog import EngineProfile, HardwareSpec, ModelSpec, load_engine, load_hardware, load_model
from simulator.catalog.draft import HEAD_METHODS, DraftHead, draft_head
from simulator.catalog.mig import mig_slice
from simulator.config.cluster import ClusterConfig, PoolConfig
from simulator.config.experiment import ExperimentConfig


@dataclass(frozen=True)
class Deployment:
    """An experiment's model, engine profile, GPUs (by the name the experiment or a pool gives) and speculative
    draft: a separate draft model, or a draft head on the target's GPUs."""

    model: ModelSpec
    engine: EngineProfile
    gpus: dict[str, HardwareSpec]
    default_gpu: str  # the experiment's ``hardware``
    draft_model: ModelSpec | None = None  # scheduler.speculative.draft_model
    draft_head: DraftHead | None = None  # scheduler.speculative.method mtp, eagle or eagle3

    slices: dict[tuple[str, str], HardwareSpec] = field(default_factory=dict)  # (GPU, MIG profile) -> its slice

    def gpu(self, pool: PoolConfig | None = None) -> HardwareSpec:
        """The GPU of ``pool``: its own ``hardware``, else the experiment's (also without a pool); with a ``mig``
        profile, that slice of it (:func:`~simulator.catalog.mig.mig_slice`)."""
        name = (pool.hardware if pool is not None else None) or self.default_gpu
        if pool is not None and pool.mig is not None:
            return self.slices[name, pool.mig]
        return self.gpus[name]


def pool_labels(cluster: ClusterConfig) -> list[str]:
    """Where each of ``cluster.replica_pools()`` is configured, for errors."""
    if cluster.kind == "disaggregated":
        return ["cluster.prefill", "cluster.decode"]
    return [f"cluster.pools[{i}]" for i in range(len(cluster.pools))] if cluster.pools else ["cluster"]


def resolve(config: ExperimentConfig) -> Deployment:
    """Load every catalog entry ``config`` names: the model first, then the GPUs in pool order, then the engine
    profile and the draft (the first that does not load is the error reported; ``method: mtp`` on a model without
    MTP modules is one)."""
    model = load_model(config.model)
    names = [config.hardware, *(pool.hardware for pool in config.cluster.replica_pools() if pool.hardware)]
    gpus = {name: load_hardware(name) for name in dict.fromkeys(names)}
    slices = {}
    for pool, label in zip(config.cluster.replica_pools(), pool_labels(config.cluster), strict=True):
        if pool.mig is not None:
            name = pool.hardware or config.hardware
            slices[name, pool.mig] = mig_slice(gpus[name], pool.mig, f"{label}.mig")
    speculative = getattr(config.scheduler, "speculative", None)
    draft = speculative.draft_model if speculative is not None else None
    engine = load_engine(config.engine)
    head = draft_head(model, speculative.method) if speculative is not None and speculative.method in HEAD_METHODS \
        else None
    return Deployment(model, engine, gpus, config.hardware, load_model(draft) if draft is not None else None, head,
                      slices)
