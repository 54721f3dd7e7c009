"""Batching policies behind one interface (:mod:`.base`): static, continuous, chunked."""

from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler
from simulator.schedulers.chunked import ChunkedScheduler
from simulator.schedulers.continuous import ContinuousScheduler
from simulator.schedulers.static import StaticScheduler

__all__ = ["SCHEDULERS", "Batch", "ChunkedScheduler", "ContinuousScheduler", "Scheduler", "StaticScheduler"]
