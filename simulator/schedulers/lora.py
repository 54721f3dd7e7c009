"""A replica's LoRA adapters (``lora``): which may join the batch, which are in GPU slots, what loading costs.

vLLM's rules: at most ``max_loras`` distinct adapters among the running requests (a waiting request whose adapter
would exceed that is passed over); the GPU holds ``max_loras`` adapters, least recently used evicted first (never
one a running request uses); host memory caches the ``max_cpu_loras`` most recently used (all, by default). An
adapter that joins the batch without a GPU slot is loaded during that iteration: its bytes per GPU over the host
link, plus, with ``max_cpu_loras`` set and the adapter not in host memory (which starts empty then), the replica's
whole adapter read from storage first. The seconds owed are
collected in :attr:`AdapterSlots.pending_s` and charged to the iteration being formed.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from simulator.config.engine import LoRAConfig


class AdapterSlots:
    __slots__ = ("_host", "_host_capacity", "_storage_s", "_transfer_s", "gpu", "max_loras", "pending_s", "running",
                 "totals")

    def __init__(self, config: LoRAConfig, bytes_per_gpu: float, gpus: int, host_link_bytes_per_s: float,
                 totals: Counter[str]) -> None:
        """``bytes_per_gpu``: one adapter's weights on one GPU of the replica's ``gpus``; ``totals``: the run's
        counts, shared by every replica's slots — ``loads`` (adapters loaded into GPU slots), ``storage_reads``
        and ``load_s`` (seconds the loads added to iterations)."""
        self.max_loras = config.max_loras
        self.gpu: OrderedDict[int, None] = OrderedDict()  # resident adapters, least recently used first
        self.running: dict[int, int] = {}  # adapter -> running requests naming it
        self._host_capacity = config.max_cpu_loras or 0
        self._host: OrderedDict[int, None] = OrderedDict()  # with max_cpu_loras: starts empty
        self._transfer_s = bytes_per_gpu / host_link_bytes_per_s
        storage = config.storage_gb_per_s if config.max_cpu_loras is not None else None
        self._storage_s = bytes_per_gpu * gpus / (storage * 1e9) if storage else 0.0
        self.pending_s = 0.0  # load seconds owed by the iteration being formed
        self.totals = totals

    def admissible(self, adapter: int) -> bool:
        """Whether a request naming ``adapter`` may join the running requests now."""
        return adapter < 0 or adapter in self.running or len(self.running) < self.max_loras

    def join(self, adapter: int) -> None:
        """A request naming ``adapter`` (admissible) starts running: load the adapter if it has no GPU slot."""
        if adapter < 0:
            return
        running = self.running
        running[adapter] = running.get(adapter, 0) + 1
        gpu = self.gpu
        if adapter in gpu:
            gpu.move_to_end(adapter)
            return
        if len(gpu) >= self.max_loras:  # evict the least recently used adapter no running request names
            del gpu[next(a for a in gpu if a not in running)]
        gpu[adapter] = None
        self.totals["loads"] += 1
        self.pending_s += self._transfer_s
        if self._storage_s:  # host memory holds only the max_cpu_loras most recently used
            host = self._host
            if adapter in host:
                host.move_to_end(adapter)
            else:
                if len(host) >= self._host_capacity:
                    host.popitem(last=False)
                host[adapter] = None
                self.totals["storage_reads"] += 1
                self.pending_s += self._storage_s

    def leave(self, adapter: int) -> None:
        """A request naming ``adapter`` stopped running (finished or preempted)."""
        if adapter < 0:
            return
        left = self.running[adapter] - 1
        if left:
            self.running[adapter] = left
        else:
            del self.running[adapter]

    def take_pending(self) -> float:
        """The load seconds owed so far, now charged (and cleared)."""
        seconds, self.pending_s = self.pending_s, 0.0
        self.totals["load_s"] += seconds  # type: ignore[assignment]  # a Counter: seconds beside the counts
        return seconds
