"""``llmsim workloads --compare PRESET TRACE``: a preset's drawn requests beside a trace's, each statistic with its
relative difference; the trace's side checked by hand on small traces written here, and on the real traces of
../shared/data against the figures the data README states."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from simulator.cli import main
from simulator.config.workload import TraceConfig
from simulator.errors import LLMSimError
from simulator.request import Prefix
from simulator.workload.compare import SEEN_BEFORE, blocks_seen_before, compare, statistics
from simulator.workload.segments import SegmentIds

# inputs 100…500, outputs 10, 30, 20, 50, 40: by hand, numpy's linear percentiles at position q·(n − 1) = q·4
SMALL = [(0.0, 100, 10), (1.0, 200, 30), (2.0, 300, 20), (3.5, 400, 50), (4.0, 500, 40)]
SMALL_STATISTICS = {
    "requests": 5,
    "input mean (tokens)": 300, "input p50 (tokens)": 300,
    "input p90 (tokens)": 460,  # position 3.6: 400 + 0.6·100
    "input p99 (tokens)": 496,  # position 3.96
    "output mean (tokens)": 30, "output p50 (tokens)": 30, "output p90 (tokens)": 46, "output p99 (tokens)": 49.6,
    # ranks 1…5 against 1, 3, 2, 5, 4: Σd² = 4, ρ_s = 1 − 6·4/(5·24) = 0.8
    "input-output Spearman": 0.8,
}


def _small_trace(tmp_path):
    path = tmp_path / "small.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{t},{i},{o}\n" for t, i, o in SMALL))
    return path


def test_a_small_traces_statistics_by_hand(tmp_path):
    comparison = compare("azure-conv", TraceConfig(path=str(_small_trace(tmp_path))), requests=2000)
    assert {row.statistic: row.trace for row in comparison.rows} == pytest.approx(SMALL_STATISTICS)
    assert comparison.rows[0].preset == 2000 and comparison.trace_format == "processed"
    for row in comparison.rows:
        assert row.relative_difference == pytest.approx((row.preset - row.trace) / abs(row.trace))
    assert SEEN_BEFORE not in {row.statistic for row in comparison.rows}  # neither side has prefix ids


def test_a_lengths_only_source_is_read_as_fit_reads_it(tmp_path):
    """A CSV of lengths without arrival times (MLPerf's summaries, named input_length, output_length), which replay
    does not read: the same statistics by hand, format ``lengths``; a CSV with neither stays replay's error."""
    path = tmp_path / "lengths.csv"
    path.write_text("input_length,output_length\n" + "".join(f"{i},{o}\n" for _, i, o in SMALL))
    comparison = compare("mlperf-mixtral-8x7b", TraceConfig(path=str(path)), requests=1000)
    assert comparison.trace_format == "lengths"
    assert {row.statistic: row.trace for row in comparison.rows} == pytest.approx(SMALL_STATISTICS)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(LLMSimError, match="unrecognised trace header"):
        compare("azure-conv", TraceConfig(path=str(tmp_path / "other.csv")))


def test_the_command_names_both_sides_and_writes_csv(tmp_path, capsys):
    """The table names the preset (its file, the requests drawn, the seed) and the trace file; ``--output`` writes
    the same rows as CSV, the trace's column as computed by hand, the difference (preset − trace) / |trace|."""
    path, out = _small_trace(tmp_path), tmp_path / "rows.csv"
    code = main(["workloads", "--compare", "azure-conv", str(path), "--requests", "2000", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert text.splitlines()[0] == (f"preset azure-conv (workloads/azure-conv.yaml: 2,000 requests drawn, seed 0) "
                                    f"against trace {path} (format processed)")
    assert "input p90 (tokens)" in text and "460.0" in text and "input-output Spearman" in text
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["statistic"]: float(row["trace"]) for row in rows} == pytest.approx(SMALL_STATISTICS)
    for row in rows:
        preset, trace = float(row["preset"]), float(row["trace"])
        assert float(row["relative_difference"]) == pytest.approx((preset - trace) / abs(trace))
        assert (row["preset_name"], row["trace_path"]) == ("azure-conv", str(path))


def test_the_same_seed_draws_the_same_preset_side(tmp_path, capsys):
    path = _small_trace(tmp_path)
    first = compare("azure-conv", TraceConfig(path=str(path)), requests=500)
    assert compare("azure-conv", TraceConfig(path=str(path)), requests=500) == first


def _objects(values) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def test_blocks_seen_before_by_hand(tmp_path):
    """Mooncake-style ids, one per 512-token block (the last partial): prompts of 1,024 [1, 2], 1,000 [1, 3], 600
    [1, 4] and 1,000 [1, 3] tokens hold 2 + 2 + 2 + 2 = 8 blocks; block [1] repeats three times and the partial
    [3] of 488 tokens once: 4 of 8 seen before. A shared prefix of 700 tokens (unit 700) in two 1,000-token
    prompts: only its first 512-token block lies inside it (the second ends at 1,000 > 700): 1 of 4. A segment
    chain (unit 1) ending at 512 in both of two 600-token prompts and a 100-token prompt without one: 1 of 5."""
    blocks = [[1, 2], [1, 3], [1, 4], [1, 3]]
    inputs = np.array([1024, 1000, 600, 1000])
    prefixes = _objects([Prefix(tuple(ids), 512) for ids in blocks])
    assert blocks_seen_before(prefixes, inputs) == 4 / 8
    shared = Prefix((7,), 700)
    assert blocks_seen_before(_objects([shared, shared]), np.array([1000, 1000])) == 1 / 4
    segment = Prefix(SegmentIds((200, 512), (0, 1)), 1)
    assert blocks_seen_before(_objects([segment, segment, None]), np.array([600, 600, 100])) == 1 / 5
    path = tmp_path / "hashes.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * k, "input_length": int(n), "output_length": 5 + k,
                                        "hash_ids": ids}) + "\n"
                            for k, (n, ids) in enumerate(zip(inputs, blocks, strict=True))))
    comparison = compare("chat-mooncake", TraceConfig(path=str(path)), requests=1000)
    assert {row.statistic: row.trace for row in comparison.rows}[SEEN_BEFORE] == 0.5
    # ties (two prompts of 1,000) share their average rank: 600 → 1, 1,000 → 2.5, 1,024 → 4
    ranks_in, ranks_out = np.array([4, 2.5, 1, 2.5]), np.array([1, 2, 3, 4])
    assert statistics(inputs, np.array([5, 6, 7, 8]), None)["input-output Spearman"] == pytest.approx(
        np.corrcoef(ranks_in, ranks_out)[0, 1])


@pytest.mark.parametrize(("argv", "message"), [
    (["workloads", "--compare", "chat", "TRACE"], "unknown preset 'chat' (allowed: arxiv-summarization"),
    (["workloads", "--compare", "azure-conv", "missing.csv"], "trace missing.csv: no such file"),
    (["workloads", "--compare", "azure-conv", "TRACE", "--trace-format", "nope"], "--compare: trace format:"),
    (["workloads", "--compare", "servegen-language-large", "TRACE"],
     "preset 'servegen-language-large' gives no input_tokens or output_tokens"),
    (["workloads", "--trace-format", "processed"], "--trace-format is for --compare PRESET TRACE"),
    (["workloads", "--compare", "azure-conv", "TRACE", "--json"], "--compare does not combine with --json"),
    (["workloads", "--compare", "azure-conv", "BINARY"], "binary.csv: not UTF-8 text"),
])
def test_a_bad_comparison_is_one_line_and_status_2(argv, message, tmp_path, capsys):
    path = _small_trace(tmp_path)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81arrived_at\n\x9c\n")
    files = {"TRACE": str(path), "BINARY": str(binary)}
    assert main([files.get(arg, arg) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_rag_ragpulse_against_its_trace(shared_data):
    """RAGPulse's CSV (no prefix ids, so no reuse row): the trace's side is the data README's statistics (input
    mean/p50/p90/p99 2,944 / 3,140 / 3,959 / 5,438, output 283 / 234 / 563 / 891, Spearman 0.42, 7,106 requests);
    the preset's 20,000 draws are within 2% of each length statistic and within 3/√n of the Spearman (its copula's
    target, the trace's own)."""
    comparison = compare("rag-ragpulse", TraceConfig(path=str(shared_data / "traces" / "ragpulse_rag_2025.csv")))
    rows = {row.statistic: row for row in comparison.rows}
    readme = {"requests": 7106, "input mean (tokens)": 2944, "input p50 (tokens)": 3140, "input p90 (tokens)": 3959,
              "input p99 (tokens)": 5438, "output mean (tokens)": 283, "output p50 (tokens)": 234,
              "output p90 (tokens)": 563, "output p99 (tokens)": 891, "input-output Spearman": 0.42}
    assert {key: rows[key].trace for key in readme} == pytest.approx(readme, abs=0.51)
    assert comparison.requests == 20_000 and SEEN_BEFORE not in rows
    for key, row in rows.items():
        if "tokens" in key:
            assert row.relative_difference == pytest.approx(0, abs=0.02), key
    assert rows["input-output Spearman"].preset == pytest.approx(rows["input-output Spearman"].trace,
                                                                 abs=3 / np.sqrt(20_000))


def test_chat_mooncake_against_its_trace(shared_data):
    """Mooncake's conversation trace has hash ids: 105,710 of its 288,500 blocks seen before (36.6%, derived in
    test_workload_presets), its 12,031 requests; the preset's pool of contexts warms as requests come, so at 20,000
    draws it reuses less (between a quarter and the trace's share), and its lengths are within 2% at the mean and
    p90 (its p50 and p99 within 3%)."""
    trace = shared_data / "traces" / "mooncake_conversation_fast25.jsonl"
    comparison = compare("chat-mooncake", TraceConfig(path=str(trace)))
    rows = {row.statistic: row for row in comparison.rows}
    assert rows["requests"].trace == 12_031 and rows[SEEN_BEFORE].trace == 105_710 / 288_500
    assert 0.25 < rows[SEEN_BEFORE].preset < rows[SEEN_BEFORE].trace
    for key, row in rows.items():
        if "tokens" in key:
            assert row.relative_difference == pytest.approx(0, abs=0.03), key
