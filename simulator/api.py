"""The Python API for notebooks and scripts: ``load``, ``run`` and the :class:`Result` they return.

``run`` is pure: it reads catalog and trace files named by the config but writes nothing; ``Result.save`` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simulator.cluster import simulate
from simulator.config import ExperimentConfig, load_experiment
from simulator.errors import LLMSimError
from simulator.kv.tiers import tier_summary
from simulator.results.bounds import IterationBounds
from simulator.results.energy import energy_summary
from simulator.results.metrics import add_latency_columns, replica_powered_seconds, speculative_summary, summarize
from simulator.results.observers import Observer
from simulator.results.token_log import TokenLog

if TYPE_CHECKING:
    import pandas as pd


def parquet_metadata(config: ExperimentConfig) -> dict[bytes, bytes]:
    """What every Parquet file of a run carries in its metadata, under the key ``llmsim``: the JSON of
    ``schema_version``, ``llmsim_version`` and ``about`` (as summary.json states them)."""
    about = {"schema_version": SUMMARY_SCHEMA_VERSION, "llmsim_version": __version__,
             "about": run_description(config)}
    return {b"llmsim": json.dumps(about, sort_keys=True).encode()}


def write_parquet(frame: pd.DataFrame, path: str | Path, config: ExperimentConfig) -> None:
    """``frame`` as Parquet with the run's metadata (:func:`parquet_metadata`) beside pandas'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **parquet_metadata(config)})
    pq.write_table(table, str(path))


def config_yaml(config: ExperimentConfig) -> str:
    """The resolved config as ``config.yaml`` holds it (a sweep reuses a point's results only when this matches)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


__version__ = "0.1.0"  # pyproject.toml's; summary.json and every Parquet file state it
SUMMARY_SCHEMA_VERSION = 1
ABOUT_KEYS = ("schema_version", "llmsim_version", "about")  # what summary.json says besides the metrics


def run_description(config: ExperimentConfig) -> dict[str, Any]:
    """What a summary describes: the experiment's name, model, GPU, engine, weights, deployment and load."""
    cluster, workload = config.cluster, config.workload
    return {
        "name": config.name, "seed": config.seed, "model": config.model, "hardware": config.hardware,
        "engine": config.engine, "dtype": config.dtype, "cluster": cluster.kind,
        "pools": [{"hardware": pool.hardware or config.hardware, "replicas": pool.replicas,
                   "tensor_parallel": pool.tensor_parallel, "pipeline_parallel": pool.pipeline_parallel,
                   "data_parallel": pool.data_parallel, "expert_parallel": pool.expert_parallel}
                  for pool in cluster.replica_pools()],  # disaggregated: prefill, then decode
        "scheduler": config.scheduler.kind, "kv_cache": config.kv_cache.kind,
        "arrival": workload.arrival.model_dump(mode="json") if workload.arrival is not None else None,
        "trace": workload.trace.path if workload.trace is not None else None,
        "preset": workload.preset,
        "dataset": workload.dataset.path if workload.dataset is not None else None,
        "sessions": workload.sessions.model_dump(mode="json") if workload.sessions is not None else None,
        "num_requests": workload.num_requests, "duration_s": workload.duration_s,
    }


SIGNIFICANT_DIGITS = 6  # of the numbers summary.json states (the in-memory summary keeps every digit)


def _meaningful(value: Any) -> Any:
    """A float to SIGNIFICANT_DIGITS digits (700.0000000000001 is 700.0), NaN and infinities as None."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(value) else None
    return value


def summary_json(summary: dict[str, Any], config: ExperimentConfig | None = None) -> str:
    """The summary as strict JSON, numbers to SIGNIFICANT_DIGITS significant digits: a metric without a value
    (NaN, e.g. no request completed) is ``null``; with the config, prefixed by ``schema_version``,
    ``llmsim_version`` and ``about`` (:func:`run_description`)."""
    clean = {key: _meaningful(value) for key, value in summary.items()}
    if config is not None:
        clean = {"schema_version": SUMMARY_SCHEMA_VERSION, "llmsim_version": __version__,
                 "about": run_description(config), **clean}
    return json.dumps(clean, indent=2, sort_keys=True, allow_nan=False)


@dataclass
class Result:
    """What a run produced: the resolved config, the summary dict and the per-request table (None when the rows
    were streamed to a file; built, with pandas, when first asked for)."""

    config: ExperimentConfig
    summary: dict[str, Any]
    table: Callable[[], pd.DataFrame | None] = field(repr=False)
    observer: Observer | None = field(default=None, repr=False)
    scaling_events: list[tuple] | None = field(default=None, repr=False)  # cluster.autoscaler's
    token_log: TokenLog | None = field(default=None, repr=False)  # run(..., tokens=True)
    bounds: IterationBounds | None = field(default=None, repr=False)  # metrics.iteration_bounds
    _requests: Any = field(default=False, init=False, repr=False, compare=False)  # False until built

    @property
    def requests(self) -> pd.DataFrame | None:
        """One row per request, sorted by id, with ``ttft_ms``, ``tpot_ms``, ``e2el_ms`` and ``slo_met``."""
        if self._requests is False:
            self._requests = self.table()
        return self._requests

    @property
    def timeline(self) -> pd.DataFrame | None:
        """Sampled replica state (``run(..., observe=True)``): time_s, replica, waiting, running, batch_tokens,
        kv_used."""
        return self.observer.timeline() if self.observer is not None else None

    @property
    def iterations(self) -> pd.DataFrame | None:
        """One row per iteration or closed-form decode run (``run(..., observe=True)``)."""
        return self.observer.iteration_table() if self.observer is not None else None

    def tokens(self, requests: pd.DataFrame | None = None) -> pd.DataFrame | None:
        """Every output token (``run(..., tokens=True)``): request_id, token (0 = first), time_s, replica — None
        otherwise. ``requests``: the request table when it was streamed to a file (its first_scheduled_s tells a
        lost attempt's tokens apart, its status the requests that finished)."""
        if self.token_log is None:
            return None
        table = self.requests if requests is None else requests
        if table is None:
            raise ValueError("the request table was streamed to a file: pass it as requests")
        finished = table[table["status"] == "finished"]
        return self.token_log.frame(dict(zip(finished["request_id"], finished["first_scheduled_s"], strict=True)))

    @property
    def roofline(self) -> pd.DataFrame | None:
        """A sample of the run's iterations with their FLOPs, HBM bytes, time split and bound, and their GPU's peaks
        (``metrics.iteration_bounds``; :mod:`simulator.results.bounds`) — None otherwise."""
        return self.bounds.points() if self.bounds is not None else None

    @property
    def scaling(self) -> pd.DataFrame | None:
        """An autoscaled run's replica changes: time_s, event (start, ready, cancel, drain, off), replica, ready and
        provisioned replicas after it (None without ``cluster.autoscaler``)."""
        if self.scaling_events is None:
            return None
        import pandas as pd

        return pd.DataFrame(self.scaling_events, columns=["time_s", "event", "replica", "ready", "provisioned"])

    def save(self, directory: str | Path) -> Path:
        """Write ``summary.json``, ``config.yaml`` (the resolved config), unless streamed already
        ``requests.parquet``, for an observed run ``timeline.parquet`` and ``iterations.parquet``, for an
        autoscaled one ``scaling.parquet``, with iteration bounds ``roofline.parquet``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(summary_json(self.summary, self.config) + "\n")
        if self.requests is not None:
            write_parquet(self.requests, out / "requests.parquet", self.config)
        if self.observer is not None:
            write_parquet(self.timeline, out / "timeline.parquet", self.config)
            write_parquet(self.iterations, out / "iterations.parquet", self.config)
        if self.scaling_events is not None:
            write_parquet(self.scaling, out / "scaling.parquet", self.config)
        if self.bounds is not None:
            write_parquet(self.roofline, out / "roofline.parquet", self.config)
        (out / "config.yaml").write_text(config_yaml(self.config))
        return out


def load(source: str | Path | dict | None = None, **overrides: Any) -> ExperimentConfig:
    """An experiment from a YAML path or dict (None = the quickstart), with ``dotted__key=value`` overrides
    (``scheduler__max_num_seqs=64``; or pass ``**{"scheduler.max_num_seqs": 64}``)."""
    texts = [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]
    return load_experiment(source, texts)


def run(
    config: ExperimentConfig | str | Path | dict | None = None, *, fast_forward: bool = True,
    requests_path: str | Path | None = None, observe: bool = False, tokens: bool = False, progress: bool = False,
) -> Result:
    """Simulate one experiment. Same config and seed, same result.

    ``requests_path``: stream the per-request rows to this Parquet file as requests complete (memory then stays
    bounded by the requests in flight plus a few numbers per request); ``Result.requests`` is then None.
    ``observe``: also collect ``Result.timeline`` and ``Result.iterations`` (memory grows with events);
    ``tokens``: also keep every output token's time, ``Result.tokens()`` (memory grows with the requests per work);
    ``progress``: a progress bar on a terminal for runs of 100,000 requests or more.
    """
    if not isinstance(config, ExperimentConfig):
        config = load(config)
    observer = Observer() if observe else None
    token_log = TokenLog() if tokens else None
    output = simulate(config, fast_forward=fast_forward, requests_path=requests_path, observer=observer,
                      tokens=token_log, progress=progress)
    recorder = output.recorder
    recorded = recorder.requests.num_rows
    if recorded != output.num_requests:  # every generated request ends completed, rejected, failed or cancelled
        raise LLMSimError(f"internal error: {output.num_requests:,} requests generated but {recorded:,} accounted for "
                          f"(completed, rejected, failed or cancelled); the run is not valid — please report this "
                          f"with the config")
    classes = config.workload.classes or []
    class_slos = [c.slo for c in classes] or None
    columns, run_totals = recorder.requests.summary_columns(), output.totals()
    summary = summarize(columns, recorder.itl, run_totals, config.slo,
                        class_names=[c.name for c in classes], class_slos=class_slos, metrics=config.metrics)
    budget = output.kv_budget  # the memory plan of one GPU (the decode pool's when disaggregated)
    summary.update({"weights_gib_per_gpu": budget.weight_bytes / 2**30,
                    "workspace_gib_per_gpu": budget.workspace_bytes / 2**30,
                    "kv_pool_gib_per_gpu": budget.num_blocks * budget.block_size * budget.kv_bytes_per_token / 2**30})
    if budget.draft_bytes:  # a speculative draft held on the GPUs: its share of the weights
        summary["draft_gib_per_gpu"] = budget.draft_bytes / 2**30
    if output.bounds is not None:
        summary.update(output.bounds.summary())
        output_tokens = int(columns["output_tokens"][columns["finished"]].sum())
        summary.update(energy_summary(output.bounds, replica_powered_seconds(columns, run_totals), output_tokens,
                                      config.energy))
    migs = [pool.mig for pool in config.cluster.replica_pools()]
    if any(migs):  # each pool's MIG profile, in pool order ("full": whole GPUs)
        summary["mig"] = ", ".join(mig or "full" for mig in migs)
    if config.cluster.faults or config.cluster.mtbf_h is not None:
        summary["replica_crashes"] = len(recorder.crashes)
    if config.lora is not None:
        totals = recorder.adapter_totals
        summary.update({"lora_gib_per_gpu": budget.adapter_bytes / 2**30, "adapter_loads": totals["loads"],
                        "adapter_storage_reads": totals["storage_reads"],
                        "adapter_load_time_s": float(totals["load_s"])})
    offload = getattr(config.kv_cache, "offload", None)
    if offload is not None:  # the KV tiers below HBM: hit rates, traffic, load time
        summary.update(tier_summary(offload, recorder.tier_totals, run_totals.prefix_hit_tokens
                                    + run_totals.prefill_tokens, config.kv_cache.block_size))
    if recorder.accepted_counts is not None:
        summary.update(speculative_summary(recorder.accepted_counts))
    if requests_path is not None:
        _add_latency_columns_to_file(Path(requests_path), config.slo, class_slos, parquet_metadata(config))

    def table():
        frame = recorder.requests.frame()
        return add_latency_columns(frame, config.slo, class_slos) if frame is not None else None

    return Result(config, summary, table, observer, output.scaling_events, token_log, output.bounds)


def _add_latency_columns_to_file(path: Path, slo, class_slos, metadata: dict[bytes, bytes]) -> None:
    """Rewrite a streamed request table with the latency columns the in-memory table has (``ttft_ms``,
    ``tpot_ms``, ``e2el_ms``, ``slo_met``) and the run's ``metadata``, a row group at a time so memory stays
    bounded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pq.ParquetFile(path)
    temporary = path.with_name(f".{path.name}.tmp")
    writer = None
    try:
        for index in range(source.num_row_groups):
            frame = add_latency_columns(source.read_row_group(index).to_pandas(), slo, class_slos)
            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
            if writer is None:
                writer = pq.ParquetWriter(str(temporary), table.schema, use_dictionary=["status", "reject_reason"])
            writer.write_table(table)
        if writer is None:  # no rows: the empty table with every column
            empty = pa.Table.from_pandas(add_latency_columns(source.read().to_pandas(), slo, class_slos),
                                         preserve_index=False)
            pq.write_table(empty.replace_schema_metadata({**(empty.schema.metadata or {}), **metadata}),
                           str(temporary))
    finally:
        if writer is not None:
            writer.close()
    temporary.replace(path)
