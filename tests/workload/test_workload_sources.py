"""Arrival processes against their laws, length distributions, every trace format, text datasets, and
convert-trace."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import simulator
from simulator.catalog.prompt_reuse import part_chains
from simulator.catalog.workloads import load_preset
from simulator.cli import main
from simulator.config import load_experiment
from simulator.config.workload import (
    DiurnalArrival,
    EmpiricalLength,
    GammaArrival,
    NormalLength,
    OnOffArrival,
    PiecewiseArrival,
    TraceConfig,
)
from simulator.errors import ConfigError, LLMSimError
from simulator.workload import arrival_times, read_trace, sample_lengths
from simulator.workload.trace import RAGPULSE_PART_ORDER
from tests.helpers import experiment


def _rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_cv2_one_over_burstiness(burstiness):
    times = arrival_times(GammaArrival(kind="gamma", rate=5.0, burstiness=burstiness), 200_000, _rng())
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.01)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.03)


def test_onoff_is_silent_when_off_and_poisson_when_on():
    config = OnOffArrival(kind="onoff", rate=10.0, on_s=2.0, off_s=3.0)
    times = arrival_times(config, 100_000, _rng())
    phase = np.mod(times, 5.0)
    assert (phase < 2.0).all()  # nothing in [2, 5) of each 5-second cycle
    cycles = times[-1] / 5.0
    assert len(times) / (cycles * 2.0) == pytest.approx(10.0, rel=0.02)


def test_piecewise_rate_counts_match_each_segment():
    """Rates 2/s on [0, 100) and 8/s on [100, 150), repeating every 150 s: Poisson counts within 4 sigma."""
    config = PiecewiseArrival(kind="piecewise", rates=[(0, 2.0), (100, 8.0)], period_s=150)
    times = arrival_times(config, 50_000, _rng())
    whole = times[times < 150 * int(times[-1] // 150)]
    periods = int(times[-1] // 150)
    phase = np.mod(whole, 150)
    for low, high, rate in ((0, 100, 2.0), (100, 150, 8.0)):
        expected = rate * (high - low) * periods
        assert abs(((phase >= low) & (phase < high)).sum() - expected) < 4 * np.sqrt(expected)


def test_diurnal_averages_to_its_mean_rate_and_peaks_at_peak_s():
    config = DiurnalArrival(kind="diurnal", mean_rate=4.0, amplitude=0.8, period_s=100.0, peak_s=25.0)
    times = arrival_times(config, 80_000, _rng())
    periods = int(times[-1] // 100)
    kept = times[times < periods * 100]
    assert len(kept) / (periods * 100) == pytest.approx(4.0, rel=0.02)
    counts = np.histogram(np.mod(kept, 100), bins=4, range=(0, 100))[0]
    assert counts.argmax() in (0, 1)  # the quarter holding t = 25 s or next to it is the busiest
    assert counts[[0, 1]].sum() > 2 * counts[[2, 3]].sum() * 0.9  # rate above mean around the peak


def test_truncated_normal_stays_in_bounds_and_is_not_clipped():
    values = sample_lengths(NormalLength(kind="normal", mean=100, std=50, min=60, max=300), 100_000, _rng())
    assert values.min() >= 60 and values.max() <= 300
    assert (values == 60).mean() < 0.02  # redrawn, not piled up at the bound


def test_empirical_lengths_resample_a_column(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,other\n10,x\n20,y\n30,z\n")
    values = sample_lengths(EmpiricalLength(kind="empirical", path=str(path), column="num_prefill_tokens", max=25),
                            1000, _rng())
    assert set(values) == {10, 20, 25}
    with pytest.raises(LLMSimError, match="no column 'nope'"):
        sample_lengths(EmpiricalLength(kind="empirical", path=str(path), column="nope"), 1, _rng())


FORMATS = {
    "processed.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n5.0,100,10\n5.5,200,20\n7.0,300,30\n",
    "azure.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0000000,100,10\n"
                 "2023-11-16 18:15:46.5000000,200,20\n2023-11-16 18:15:48.0000000,300,30\n",
    "burstgpt.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,100,10,110,Conversation log\n5.5,ChatGPT,200,20,220,Conversation log\n"
                    "7,GPT-4,300,30,330,API log\n",
    "mooncake.jsonl": "\n".join(json.dumps(r) for r in [
        {"timestamp": 5000, "input_length": 100, "output_length": 10, "hash_ids": [1]},
        {"timestamp": 5500, "input_length": 200, "output_length": 20, "hash_ids": [1, 2]},
        {"timestamp": 7000, "input_length": 300, "output_length": 30, "hash_ids": [3]}]) + "\n",
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_reads_to_the_same_requests(tmp_path, name):
    path = tmp_path / name
    path.write_text(FORMATS[name])
    trace = read_trace(path)
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5, 2.0])
    assert list(trace.input_tokens) == [100, 200, 300] and list(trace.output_tokens) == [10, 20, 30]
    if name.startswith("mooncake"):
        assert [p.ids for p in trace.prefixes] == [(1,), (1, 2), (3,)] and trace.prefixes[0].unit == 512


def test_generic_csv_with_a_column_mapping_and_a_time_unit(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("t_ms,prompt,completion\n1000,100,10\n1500,200,20\n")
    trace = read_trace(TraceConfig(path=str(path), format="csv", time_unit="ms",
                                   columns={"arrival": "t_ms", "input": "prompt", "output": "completion"}))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5])


def test_bad_rows_stop_with_file_and_line_or_are_skipped_and_counted(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(FORMATS["burstgpt.csv"] + "8,ChatGPT,50,0,50,Conversation log\n9,ChatGPT,abc,5,5,API log\n")
    with pytest.raises(LLMSimError, match=r"b.csv:5: column Response tokens: expected a positive integer, got '0'"):
        read_trace(path)
    trace = read_trace(TraceConfig(path=str(path), skip_bad=True))
    assert trace.skipped == 2 and len(trace.arrival_s) == 3
    bad_json = tmp_path / "m.jsonl"
    bad_json.write_text('{"timestamp": 1, "input_length": 5}\n')
    with pytest.raises(LLMSimError, match=r"m.jsonl:1: missing field\(s\) \['output_length'\]"):
        read_trace(bad_json)


def test_window_speedup_and_sampling(tmp_path):
    path = tmp_path / "p.csv"
    rows = "".join(f"{t},{10 + t},5\n" for t in range(100))
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows)
    trace = read_trace(TraceConfig(path=str(path), start_s=10, end_s=20, speedup=2.0))
    assert list(trace.input_tokens) == list(range(20, 30))
    np.testing.assert_allclose(trace.arrival_s, np.arange(10) / 2.0)
    sampled = read_trace(TraceConfig(path=str(path), sample=0.5), rng=_rng(3))
    again = read_trace(TraceConfig(path=str(path), sample=0.5), rng=_rng(3))
    assert 30 < len(sampled.arrival_s) < 70 and list(sampled.input_tokens) == list(again.input_tokens)


def test_convert_trace_writes_the_canonical_form_with_prefix_ids(tmp_path, capsys):
    source, target = tmp_path / "mooncake.jsonl", tmp_path / "out.csv"
    source.write_text(FORMATS["mooncake.jsonl"])
    assert main(["convert-trace", str(source), str(target)]) == 0
    assert target.read_text().splitlines()[:2] == [
        "arrived_at,num_prefill_tokens,num_decode_tokens,hash_ids", "0.0,100,10,1"]
    round_trip = read_trace(target)
    assert [p.ids for p in round_trip.prefixes] == [(1,), (1, 2), (3,)]
    assert "3 requests" in capsys.readouterr().err


def _sharegpt(tmp_path):
    records = [{"conversations": [{"from": "human", "value": "a" * (8 * (i + 1))},
                                  {"from": "gpt", "value": "b" * (40 + i)}, {"from": "human", "value": "then?"}]}
               for i in range(10)]
    records.append({"conversations": [{"from": "gpt", "value": "an answer without a question"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records))
    return path


def test_a_sharegpt_file_gives_its_first_exchange_in_tokens(tmp_path):
    """Each conversation's first human turn and the answer after it, at 4 characters per token (ceil): prompts of
    8·(i + 1) characters are 2·(i + 1) tokens, answers of 40 + i characters ceil((40 + i) / 4); the record without
    a human turn is skipped and counted. Ten draws of ten pairs take each pair once."""
    from simulator.config.workload import DatasetConfig
    from simulator.workload.dataset import dataset_lengths, sample_dataset

    config = DatasetConfig(path=str(_sharegpt(tmp_path)))
    inputs, outputs, skipped = dataset_lengths(config)
    assert inputs.tolist() == [2 * (i + 1) for i in range(10)]
    assert outputs.tolist() == [math.ceil((40 + i) / 4) for i in range(10)] and skipped == 1
    drawn, _, _ = sample_dataset(config, 10, np.random.default_rng(0))
    assert sorted(drawn.tolist()) == inputs.tolist()
    result = simulator.run(load_experiment(experiment(workload={
        "dataset": {"path": str(config.path), "chars_per_token": 2.0}, "num_requests": 25,
        "arrival": {"kind": "poisson", "rate": 5.0}})))
    assert result.summary["completed"] == 25  # at 2 characters per token the prompts are 4·(i + 1) tokens
    assert set(result.requests["input_tokens"]) <= {4 * (i + 1) for i in range(10)}


def test_json_lines_take_text_or_counts_and_name_what_is_missing(tmp_path):
    from simulator.config.workload import DatasetConfig
    from simulator.workload.dataset import dataset_lengths

    path = tmp_path / "d.jsonl"
    path.write_text('{"q": "abcdefgh", "a": 7}\n\n{"q": 12, "a": "xyz"}\n')
    inputs, outputs, _ = dataset_lengths(DatasetConfig(path=str(path), prompt_field="q", output_field="a"))
    assert inputs.tolist() == [2, 12] and outputs.tolist() == [7, 1]
    with pytest.raises(LLMSimError, match="record 1: no 'prompt'"):
        dataset_lengths(DatasetConfig(path=str(path)))
    path.write_text('{"prompt": "x", "output": "y"}\n{"prompt": \n')
    with pytest.raises(LLMSimError, match=r"d.jsonl:2: not JSON"):
        dataset_lengths(DatasetConfig(path=str(path)))
    assert dataset_lengths(DatasetConfig(path=str(path), skip_bad=True))[2] == 1  # the bad line, counted


def test_a_tokenizer_file_counts_the_tokens(tmp_path):
    """A word-level tokenizer.json (built here; nothing is downloaded): one token per word. Without the tokenizers
    package the error says how to get it."""
    from simulator.config.workload import DatasetConfig
    from simulator.workload.dataset import dataset_lengths

    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "the cat sat on the mat", "output": "yes it did"}\n')
    vocabulary = tmp_path / "tokenizer.json"
    config = DatasetConfig(path=str(path), tokenizer=str(vocabulary))
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        with pytest.raises(LLMSimError, match="pip install 'llmsim\\[tokenizers\\]'"):
            dataset_lengths(config)
        return
    words = {w: i for i, w in enumerate(["[UNK]", "the", "cat", "sat", "on", "mat", "yes", "it", "did"])}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(vocabulary))
    inputs, outputs, _ = dataset_lengths(config)
    assert (inputs.tolist(), outputs.tolist()) == ([6], [3])


def test_a_dataset_brings_its_own_lengths(tmp_path):
    with pytest.raises(ConfigError, match=r"a dataset gives the lengths; remove \['input_tokens'\]"):
        load_experiment(experiment(workload={"dataset": {"path": str(_sharegpt(tmp_path))}, "num_requests": 5,
                                             "arrival": {"kind": "poisson", "rate": 1.0},
                                             "input_tokens": {"kind": "fixed", "value": 5}}))


def test_sharegpt_conversations_become_sessions(tmp_path):
    """With workload.sessions a conversation is a session: its human turns followed by an answer are its turns (a
    trailing question without one is not). At 1 character per token: conversation A asks 10, answers 30, asks 5,
    answers 7 — turn 2 sends 10 + 30 + 5 = 45 — and B asks 4, answers 6; the record without a human turn is
    skipped and counted."""
    records = [{"conversations": [{"from": "human", "value": "q" * 10}, {"from": "gpt", "value": "a" * 30},
                                  {"from": "human", "value": "q" * 5}, {"from": "gpt", "value": "a" * 7},
                                  {"from": "human", "value": "unanswered"}]},
               {"conversations": [{"from": "human", "value": "q" * 4}, {"from": "gpt", "value": "a" * 6}]},
               {"conversations": [{"from": "gpt", "value": "an answer without a question"}]}]
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(records))
    config = experiment(workload={"dataset": {"path": str(path), "chars_per_token": 1.0}, "num_requests": 2,
                                  "arrival": {"kind": "constant", "rate": 1.0}, "sessions": {"think_ms": 100}})
    result = simulator.run(load_experiment(config))
    rows = result.requests.sort_values("request_id")
    by_session = {len(group): group for _, group in rows.groupby("session")}
    assert by_session[2]["input_tokens"].tolist() == [10, 45] and by_session[2]["output_tokens"].tolist() == [30, 7]
    assert by_session[1]["input_tokens"].tolist() == [4] and by_session[1]["output_tokens"].tolist() == [6]
    assert result.summary["trace_rows_skipped"] == 1 and result.summary["completed"] == 3
    with pytest.raises(ConfigError, match=r"remove \['sessions.turns'\]"):
        config["workload"]["sessions"]["turns"] = {"kind": "fixed", "value": 2}
        load_experiment(config)


def test_a_duration_bounds_the_arrivals_instead_of_a_count():
    """Constant arrivals at 4 req/s for 2.5 s are the 11 at 0, 0.25, …, 2.5 s; Poisson at 10 req/s for 50 s gives
    about 500 (a Poisson count: within 4 standard deviations, ±89), none later than 50 s, the same on a rerun;
    num_requests then caps them."""
    from simulator.workload import generate_requests

    def arrivals(**workload):
        config = load_experiment(experiment(workload={"input_tokens": {"kind": "fixed", "value": 10},
                                                      "output_tokens": {"kind": "fixed", "value": 2}, **workload}))
        return generate_requests(config.workload, np.random.SeedSequence(config.seed)).arrival_s

    constant = arrivals(arrival={"kind": "constant", "rate": 4.0}, duration_s=2.5)
    assert constant.tolist() == pytest.approx([0.25 * i for i in range(11)])
    poisson = arrivals(arrival={"kind": "poisson", "rate": 10.0}, duration_s=50.0)
    assert abs(len(poisson) - 500) <= 4 * math.sqrt(500) and poisson.max() <= 50.0
    assert np.array_equal(poisson, arrivals(arrival={"kind": "poisson", "rate": 10.0}, duration_s=50.0))
    capped = arrivals(arrival={"kind": "poisson", "rate": 10.0}, duration_s=50.0, num_requests=100)
    assert len(capped) == 100 and capped.max() <= 50.0
    result = simulator.run(load_experiment(experiment(workload={
        "arrival": {"kind": "constant", "rate": 4.0}, "duration_s": 2.5, "input_tokens": {"kind": "fixed",
                                                                                           "value": 10},
        "output_tokens": {"kind": "fixed", "value": 2}})))
    assert result.summary["num_requests"] == 11


@pytest.mark.parametrize("workload, message", [
    ({"arrival": {"kind": "closed_loop", "users": 2}, "duration_s": 5}, "arrival.kind: closed_loop"),
    ({"arrival": {"kind": "poisson", "rate": 1.0}, "duration_s": 5, "num_requests": 2,
      "sessions": {"turns": {"kind": "fixed", "value": 2}}}, "sessions"),
])
def test_a_duration_only_bounds_open_loop_arrivals(workload, message):
    config = experiment(workload={"input_tokens": {"kind": "fixed", "value": 10},
                                  "output_tokens": {"kind": "fixed", "value": 2}, **workload})
    with pytest.raises(ConfigError, match=message):
        load_experiment(config)


def test_a_piecewise_shape_rescaled_to_its_mean_rate():
    """Shape 1/s on [0, 100), 4/s on [100, 150), 0 on [150, 200), period 200 s: time-average (100 + 200 + 0) / 200
    = 1.5/s, so mean_rate 6 multiplies every rate by 4 (4, 16, 0; peak/mean 16/6 as the shape's 4/1.5). Over 300
    whole periods the count is Poisson with mean 6 × 200 × 300 = 360,000: within 4 σ = 4·√360,000 = 2,400."""
    config = PiecewiseArrival(kind="piecewise", rates=[(0, 1.0), (100, 4.0), (150, 0.0)], period_s=200, mean_rate=6)
    assert config.time_average() == 1.5 and config.scaled_rates() == [4.0, 16.0, 0.0]
    times = arrival_times(config, 370_000, _rng())
    assert times[-1] > 300 * 200
    assert abs((times < 300 * 200).sum() - 360_000) < 4 * np.sqrt(360_000)
    assert not (np.mod(times, 200) >= 150).any()  # the silent quarter stays silent


@pytest.mark.parametrize(("arrival", "message"), [
    ({"rates": [[0, 1.0]], "mean_rate": 2}, "mean_rate 2 is an average over one period of the pattern: give period_s"),
    ({"rates": [[0, 1.0], [10, 1e-9]], "period_s": 20, "mean_rate": 1e9}, "puts the peak rate above 1e+09"),
    ({"rates": [[i, 1.0] for i in range(100_001)]}, "at most 100000 items"),
])
def test_a_piecewise_mean_rate_it_cannot_keep_is_refused(arrival, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PiecewiseArrival(kind="piecewise", **arrival)


def _ragpulse(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _parts(sys_ids, sys_tokens, passage_ids=(), passage_tokens=(), question=3):
    return {"sys_prompt": {"ids": list(sys_ids), "tokens": list(sys_tokens)},
            "passages": {"ids": list(passage_ids), "tokens": list(passage_tokens)},
            "user_input": {"ids": [999], "tokens": [question]}}


def test_ragpulse_parts_become_a_prefix_shared_up_to_the_first_different_chunk(tmp_path):
    """Two prompts whose system prompts are the same chunks (512 + 100 tokens) and whose passages differ share every
    16-token unit that ends inside the system prompt: 612 // 16 = 38 units (608 tokens); unit 39 ends at token 623,
    in the passage, and differs. A third prompt with the same chunks in another order (100 first) shares nothing:
    a chunk's key is its content and every chunk before it."""
    path = _ragpulse(tmp_path / "r.jsonl", [
        {"timestamp_s": 0, "input_length": 1000, "output_length": 5, "parts": _parts([1, 2], [512, 100], [7], [300])},
        {"timestamp_s": 2, "input_length": 1000, "output_length": 5, "parts": _parts([1, 2], [512, 100], [8], [300])},
        {"timestamp_s": 3, "input_length": 1000, "output_length": 5, "parts": _parts([2, 1], [100, 512], [7], [300])},
    ])
    trace = read_trace(TraceConfig(path=path))  # auto: a .jsonl whose records have parts
    first, second, third = (prefix.block_keys(16, 1000) for prefix in trace.prefixes)
    assert len(first) == (512 + 100 + 300 + 3) // 16  # the parts' whole units; the 85 template tokens are no part
    shared = sum(1 for a, b in zip(first, second, strict=False) if a == b)
    assert shared == 38 and first[:38] == second[:38] and first[38] != second[38]
    assert not set(first) & set(third)
    assert list(trace.arrival_s) == [0, 2, 3] and list(trace.input_tokens) == [1000] * 3


@pytest.mark.parametrize("parts, message", [
    ({"sys_prompt": {"ids": [1], "tokens": [10]}, "footnotes": {"ids": [], "tokens": []}}, "unknown part"),
    ({"sys_prompt": {"ids": [1, 2], "tokens": [10]}}, "equal lengths"),
    ({"sys_prompt": {"ids": [1], "tokens": [0]}}, "positive integers"),
    ({"sys_prompt": {"ids": ["a"], "tokens": [10]}}, "integer ids"),
    ({"sys_prompt": {"ids": [1], "tokens": [2000]}}, "more than the prompt's 1,000 tokens"),
    ([1, 2], "an object of parts"),
])
def test_a_bad_ragpulse_row_names_its_line(tmp_path, parts, message):
    path = _ragpulse(tmp_path / "r.jsonl", [
        {"timestamp_s": 0, "input_length": 1000, "output_length": 5, "parts": _parts([1], [10])},
        {"timestamp_s": 1, "input_length": 1000, "output_length": 5, "parts": parts}])
    with pytest.raises(LLMSimError, match=rf"r.jsonl:2: column parts.*{re.escape(message)}"):
        read_trace(TraceConfig(path=path, format="ragpulse"))


def test_the_ragpulse_trace_replayed_hits_what_its_ids_allow_and_the_preset_does(shared_data):
    """RAGPulse replayed through a prefix cache that holds everything shared (Qwen2.5-7B, 16-token blocks, 4.2 M
    tokens of KV) finds the share of prompt tokens its content ids say an earlier prompt held (read chunk by chunk
    in the same part order: simulator.catalog.prompt_reuse, 31.4%) less the block rounding — within 1 point — and the
    rag-ragpulse preset through the same cache (its recorded share) lands within 5 points of the replay."""
    path = shared_data / "traces" / "ragpulse_rag_2025.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records.sort(key=lambda record: record["timestamp_s"])
    parts = [{name: (part["ids"], part["tokens"]) for name, part in record["parts"].items()} for record in records]
    implied = part_chains(parts, list(RAGPULSE_PART_ORDER)).seen_before().sum() / sum(
        record["input_length"] for record in records)
    kv = {"kind": "paged", "block_size": 16, "num_gpu_blocks": 262_144, "prefix_caching": True}
    replay = simulator.run(load_experiment(experiment(
        model="qwen2.5-7b", kv_cache=kv, scheduler={"kind": "continuous", "max_num_seqs": 64, "max_model_len": 16384},
        workload={"trace": {"path": str(path), "speedup": 100}}))).summary
    assert replay["completed"] == len(records)
    assert replay["prefix_cache_hit_rate"] == pytest.approx(implied, abs=0.01)
    share = load_preset("rag-ragpulse")["statistics"]["prefix_reuse"]["seen_before_share"]
    assert abs(share - replay["prefix_cache_hit_rate"]) < 0.05
