"""NCCL collective timings of A100 nodes (the format of ``../shared/data/network``): all-reduce and send/recv on
8-GPU NVSwitch DGX nodes (1–2 nodes) and on PCIe A100s with pairwise NVLink bridges, predicted with
:func:`simulator.cost.collective_time`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, load_hardware
from simulator.cost.collectives import collective_time
from simulator.errors import LLMSimError
from simulator.fidelity.errors import ape

NETWORK_SYSTEMS = {"a100_dgx": "a100-80gb-sxm", "a100_pairwise_nvlink": "a100-80gb-pcie"}


def network_measurements(data_dir: Path, systems: tuple[str, ...] = tuple(NETWORK_SYSTEMS)) -> pd.DataFrame:
    """One row per (system, collective, GPUs, GPUs per node, bytes) with the measured seconds (median of ranks),
    from ``data_dir/network/<system>_<all_reduce|send_recv>.csv``."""
    frames = []
    for path in sorted((data_dir / "network").glob("*.csv")):
        system = next((s for s in systems if path.stem.startswith(s)), None)
        if system is None:
            continue
        op = path.stem[len(system) + 1 :]
        table = pd.read_csv(path)
        grouped = table.groupby(["num_workers", "devices_per_node", "size"])[f"time_stats.{op}.median"].median()
        frame = grouped.reset_index()
        frame.columns = ["gpus", "gpus_per_node", "bytes", "measured_s"]
        frame["measured_s"] *= 1e-3
        frame.insert(0, "op", op)
        frame.insert(0, "system", system)
        frames.append(frame)
    if not frames:
        raise LLMSimError(f"{data_dir / 'network'}: no collective timings for {list(systems)}")
    return pd.concat(frames, ignore_index=True)


def network_errors(
    data_dir: Path, profiles: dict[str, HardwareSpec] | None = None, frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """:func:`network_measurements` with predictions from the systems' profiles (``NETWORK_SYSTEMS`` by default):
    :func:`collective_time` at every measured size, on a node of the measured group's GPUs per node."""
    frame = (network_measurements(data_dir) if frame is None else frame).copy()
    profiles = profiles or {s: load_hardware(name) for s, name in NETWORK_SYSTEMS.items()}
    predicted = np.empty(len(frame))
    for (system, op, gpus, per_node), index in frame.groupby(["system", "op", "gpus", "gpus_per_node"]).groups.items():
        base = profiles[system]
        # the measured ring spans nodes of `per_node` GPUs each
        hardware = base.model_copy(update={"node": base.node.model_copy(update={"gpus_per_node": int(per_node)})})
        predicted[frame.index.get_indexer(index)] = [
            collective_time(hardware, op, int(gpus), size) for size in frame.loc[index, "bytes"].to_numpy(float)]
    frame["predicted_s"] = predicted
    frame["error"] = ape(frame["predicted_s"], frame["measured_s"])
    return frame
