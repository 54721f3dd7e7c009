"""``llmsim validate``: every data family found under a data folder, the error tables and a predicted-vs-measured
plot.

Error = |predicted − measured| / measured; summaries give the median and p90 per dataset and operation.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.catalog import load_hardware
from simulator.catalog.hardware import with_generation
from simulator.fidelity.errors import overall, summarize_errors
from simulator.fidelity.kernels import (
    GPUS,
    attention_kernel_errors,
    custom_allreduce_kernel_errors,
    deepep_kernel_errors,
    gemm_kernel_errors,
    mla_kernel_errors,
    moe_kernel_errors,
    moe_routing_kernel_errors,
    nccl_kernel_errors,
    wide_ep_kernel_errors,
)
from simulator.fidelity.network import NETWORK_SYSTEMS, network_errors
from simulator.fidelity.operators import gemm_errors
from simulator.fidelity.splitwise import splitwise_errors


def validate_all(data_dir: Path, engine: str = "splitwise", generation: str | None = None) -> dict[str, pd.DataFrame]:
    """Per-row errors of every dataset found under ``data_dir``; with ``generation``, every measured GPU priced with
    that generation's fitted parameters instead of its own (:func:`simulator.catalog.hardware.with_generation`,
    the engine profiles' kernels of that generation too): how far the rule for a GPU without measurements — its
    spec sheet and another generation's fit — lands from measurements."""
    profiles = {gpu: load_hardware(name) for gpu, name in {**GPUS, **NETWORK_SYSTEMS}.items()}
    if generation is not None:
        profiles = {gpu: with_generation(spec, generation) for gpu, spec in profiles.items()}
    a100 = profiles["a100_sxm"]
    kernel_gpus = {gpu: profiles[gpu] for gpu in GPUS}
    results = {
        "a100_ops": gemm_errors(data_dir, a100),
        "network": network_errors(data_dir, {system: profiles[system] for system in NETWORK_SYSTEMS}),
        "splitwise": splitwise_errors(data_dir, a100, engine),
    }
    kernels = data_dir / "kernels"
    if kernels.is_dir():
        results["kernel_gemm"] = gemm_kernel_errors(kernels, kernel_gpus)
        results["kernel_nccl"] = nccl_kernel_errors(kernels, kernel_gpus)
        results["kernel_custom_allreduce"] = custom_allreduce_kernel_errors(kernels, kernel_gpus)
        results["kernel_deepep"] = deepep_kernel_errors(kernels, kernel_gpus)
        results["kernel_attention"] = attention_kernel_errors(kernels, kernel_gpus)
        results["kernel_moe"] = moe_kernel_errors(kernels, kernel_gpus)
        results["kernel_moe_ep"] = moe_routing_kernel_errors(kernels, kernel_gpus)
        results["kernel_moe_wide_ep"] = wide_ep_kernel_errors(kernels, kernel_gpus)
        results["kernel_mla"] = mla_kernel_errors(kernels, kernel_gpus)
    return results


def kernels_figure(results: dict[str, pd.DataFrame]):
    """Predicted against measured time per dataset (log-log), titled with its median and p90 error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, len(results))
    rows = -(-len(results) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.4 * rows), squeeze=False)
    for axis, (name, frame) in zip(axes.flat, results.items(), strict=False):  # (a last row may have spares)
        times = frame[["measured_s", "predicted_s"]].to_numpy() * 1e3
        axis.loglog(times[:, 0], times[:, 1], ".", markersize=2, alpha=0.4)
        low, high = times.min(), times.max()
        axis.plot([low, high], [low, high], "k--", linewidth=0.8)
        median, p90 = overall(frame)
        axis.set_title(f"{name}\nmedian {median:.1%}, p90 {p90:.1%}", fontsize="medium")
        axis.set(xlabel="measured (ms)", ylabel="predicted (ms)")
    for axis in list(axes.flat)[len(results):]:
        axis.set_visible(False)
    figure.tight_layout()
    return figure


def write_report(results: dict[str, pd.DataFrame], plot_path: Path | None = None) -> str:
    """The error tables as text; with ``plot_path``, a predicted-vs-measured log-log plot per dataset saved there."""
    groups = {"a100_ops": ["op"], "network": ["system", "op"], "splitwise": ["phase"],
              "kernel_gemm": ["gpu", "framework", "dtype"], "kernel_nccl": ["gpu", "op", "gpus"],
              "kernel_custom_allreduce": ["gpu", "framework", "gpus"],
              "kernel_deepep": ["gpu", "kernel"],
              "kernel_attention": ["gpu", "framework", "phase"], "kernel_moe": ["gpu", "framework", "dtype"],
              "kernel_moe_ep": ["gpu", "framework", "distribution", "moe_ep"],
              "kernel_moe_wide_ep": ["gpu", "distribution", "moe_ep"],
              "kernel_mla": ["gpu", "framework", "phase"]}
    lines = []
    for name, frame in results.items():
        lines.append(f"== {name} ==")
        lines.append(summarize_errors(frame, groups[name]).to_string())
        lines.append("")
    if plot_path is None:
        return "\n".join(lines).rstrip()
    import matplotlib.pyplot as plt

    figure = kernels_figure(results)
    figure.savefig(plot_path, dpi=120)
    plt.close(figure)
    lines.append(f"plot: {plot_path}")
    return "\n".join(lines)
