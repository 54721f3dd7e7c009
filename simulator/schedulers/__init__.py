"""Batching policies behind one interface (:mod:`.base`)."""

from simulator.schedulers.base import SCHEDULERS, Batch, Scheduler
from simulator.schedulers.continuous import ContinuousScheduler

__all__ = ["SCHEDULERS", "Batch", "ContinuousScheduler", "Scheduler"]
