"""Prompts made of segments (workload.segments): the layout, the cut at the prompt's length, the chained content ids
the prefix cache matches, the popularity law, and the one-line errors of a bad pool."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cli import main
from simulator.config.workload import WorkloadConfig
from simulator.kv import PrefixCachingAllocator
from simulator.request import Prefix
from simulator.workload import generate_requests
from simulator.workload.segments import OWN, SegmentIds, draw_segments, segment_prefixes

FIXED = {"kind": "fixed", "value": 10}


def _segments(*specs: dict) -> list:
    return WorkloadConfig(num_requests=1, arrival={"kind": "poisson", "rate": 1}, input_tokens=FIXED,
                          output_tokens=FIXED, segments=list(specs)).segments


def test_a_prompt_is_its_pool_slots_then_its_own_content():
    """A 100-token document shared by all, 20 tokens of the request's own, then two passages: the prefix covers the
    first 100 tokens only (the passages follow content no other prompt has), all of them one chain id."""
    segments = _segments({"name": "system", "documents": 1, "tokens": {"kind": "fixed", "value": 100}},
                         {"name": "own", "tokens": {"kind": "fixed", "value": 20}},
                         {"name": "passages", "documents": 2, "count": 2, "tokens": {"kind": "fixed", "value": 30}})
    prefixes = segment_prefixes(segments, np.full(5, 500), np.random.SeedSequence(1))
    for prefix in prefixes:
        assert prefix.unit == 1 and prefix.ids.ends == (100,) and prefix.ids.ids == (0,)
        assert len(prefix.ids) == 100 and prefix.ids[0] == prefix.ids[99] == 0 and list(prefix.ids) == [0] * 100
        with pytest.raises(IndexError):
            prefix.ids[100]


def test_slots_are_cut_where_the_prompt_ends():
    """Three 10-token pool documents: a 25-token prompt holds 10 + 10 + the first 5 of the third; a 20-token prompt
    ends where the third would start (it is dropped); a 15-token prompt cuts the second."""
    segments = _segments(*({"name": name, "documents": 1, "tokens": FIXED} for name in "abc"))
    prefixes = segment_prefixes(segments, np.array([25, 20, 15]), np.random.SeedSequence(2))
    assert [p.ids.ends for p in prefixes] == [(10, 20, 25), (10, 20), (10, 15)]
    assert prefixes[0].ids.ids == (0, 1, 2)  # one document per column: the chain ids count up column by column


def test_a_slots_id_names_everything_before_it():
    """Two pools of 2 and 3 documents: the id of a token in the second slot is the same in two prompts exactly
    when both drew the same pair (the chain), not when they only share the second document."""
    segments = _segments({"name": "a", "documents": 2, "tokens": FIXED}, {"name": "b", "documents": 3, "tokens": FIXED})
    n = 2000
    draws = draw_segments(segments, n, np.random.SeedSequence(3))
    prefixes = segment_prefixes(segments, np.full(n, 50), np.random.SeedSequence(3))
    pairs = [tuple(row) for row in draws.documents.tolist()]
    second = [p.ids[15] for p in prefixes]
    by_pair: dict[tuple, set] = {}
    for pair, id_ in zip(pairs, second, strict=True):
        by_pair.setdefault(pair, set()).add(id_)
    assert len(by_pair) == 6 and all(len(ids) == 1 for ids in by_pair.values())  # each pair one id
    assert len({ids.pop() for ids in by_pair.values()}) == 6  # and no two pairs share it
    assert {p.ids[5] for p in prefixes} == {0, 1}  # the first column: one id per document


def test_the_popularity_law_share_and_pool_lengths():
    """Document i of 4 at Zipf exponent 1 is drawn with probability (1/(i+1)) / (1 + 1/2 + 1/3 + 1/4) = 0.48, 0.24,
    0.16, 0.12; ``share`` 0.3 of the requests draw from the pool (a binomial share, sd 0.0032 at 20,000); a pool
    document has one length wherever it is used."""
    segments = _segments({"name": "s", "documents": 4, "zipf": 1.0, "share": 0.3,
                          "tokens": {"kind": "uniform", "min": 1, "max": 10_000}})
    draws = draw_segments(segments, 20_000, np.random.SeedSequence(4))
    pooled = draws.documents[:, 0] != OWN
    assert pooled.mean() == pytest.approx(0.3, abs=0.01)
    frequencies = np.bincount(draws.documents[pooled, 0], minlength=4) / pooled.sum()
    assert frequencies == pytest.approx(np.array([12, 6, 4, 3]) / 25, abs=0.015)
    for document in range(4):
        assert len(set(draws.lengths[pooled & (draws.documents[:, 0] == document), 0])) == 1
    assert len(set(draws.lengths[~pooled, 0])) > 1000  # the requests' own content: a length each


def test_the_prefix_cache_reuses_shared_slots_in_whole_blocks():
    """16-token blocks. Two prompts whose first slot (100 tokens) is the same content: the second finds
    ⌊100 / 16⌋ = 6 blocks (96 tokens) cached; block 6 ends in the second slot (token 111), whose content differs,
    so it is not. A prompt that shares only the second slot's document after a different first slot finds
    nothing."""
    kv = PrefixCachingAllocator(num_blocks=100, block_size=16)
    first = Prefix(SegmentIds((100, 200), (0, 5)), 1)
    kv.allocate(1, 300, prefix=first)
    assert kv.cached_prefix_tokens(Prefix(SegmentIds((100, 200), (0, 6)), 1), 300) == 96
    assert kv.cached_prefix_tokens(first, 300) == 192  # the same two slots: ⌊200 / 16⌋ = 12 blocks
    assert kv.cached_prefix_tokens(Prefix(SegmentIds((100, 200), (1, 5)), 1), 300) == 0


def test_segments_change_no_other_draw_and_repeat_with_the_seed():
    """The segments' random stream is spawned after the others: arrivals and lengths are those of the workload
    without segments; the same seed gives the same prompts."""
    base = {"num_requests": 300, "arrival": {"kind": "poisson", "rate": 2},
            "input_tokens": {"kind": "uniform", "min": 50, "max": 500}, "output_tokens": FIXED}
    segments = [{"name": "s", "documents": 7, "zipf": 0.5, "tokens": {"kind": "uniform", "min": 5, "max": 300}},
                {"name": "p", "documents": 50, "count": 3, "tokens": {"kind": "uniform", "min": 5, "max": 80}}]
    plain = generate_requests(WorkloadConfig(**base), np.random.SeedSequence(6))
    config = WorkloadConfig(**base, segments=segments)
    first, again = (generate_requests(config, np.random.SeedSequence(6)) for _ in range(2))
    for field in ("arrival_s", "input_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(plain, field), getattr(first, field))
    assert [(p.ids.ends, p.ids.ids) for p in first.prefixes] == [(p.ids.ends, p.ids.ids) for p in again.prefixes]
    assert all(p.ids.ends[-1] <= tokens for p, tokens in zip(first.prefixes, first.input_tokens, strict=True))


@pytest.mark.parametrize(("segments", "message"), [
    ("[{name: s, documents: 0, tokens: {kind: fixed, value: 5}}]", "segments[0].documents: must be >= 1, got 0"),
    ("[{name: s, documents: 2000000, tokens: {kind: fixed, value: 5}}]",
     "segments[0].documents: must be <= 1000000, got 2000000"),
    ("[{name: s, documents: 3, zipf: -1, tokens: {kind: fixed, value: 5}}]",
     "segments[0].zipf: must be >= 0.0, got -1"),
    ("[{name: s, documents: 3, zipf: 11, tokens: {kind: fixed, value: 5}}]",
     "segments[0].zipf: must be <= 10.0, got 11"),
    ("[{name: s, documents: 3, share: 1.5, tokens: {kind: fixed, value: 5}}]",
     "segments[0].share: must be <= 1.0, got 1.5"),
    ("[{name: s, documents: 3, count: 65, tokens: {kind: fixed, value: 5}}]",
     "segments[0].count: must be <= 64, got 65"),
    ("[{name: s, zipf: 1, tokens: {kind: fixed, value: 5}}]",
     "segments[0]: zipf: 1.0 describes a pool of documents: give documents (1 to 1,000,000)"),
    ("[" + ", ".join(f"{{name: s{i}, tokens: {{kind: fixed, value: 5}}}}" for i in range(17)) + "]",
     "workload.segments: list should have at most 16 items after validation, not 17"),
    ("[{name: s, tokens: {kind: fixed, value: 5}}, {name: s, tokens: {kind: fixed, value: 5}}]",
     "segments: names must be unique, got ['s', 's']"),
])
def test_a_bad_segment_is_one_line(segments, message, capsys):
    assert main(["run", "--set", f"workload.segments={segments}"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_segments_do_not_combine_with_a_prefix_a_trace_or_sessions(capsys):
    segment = "[{name: s, tokens: {kind: fixed, value: 5}}]"
    for other, named in (("workload.prefix={tokens: 5}", "not with prefix"),
                         ("workload.sessions={turns: {kind: fixed, value: 2}}", "do not combine with segments")):
        assert main(["run", "--set", f"workload.segments={segment}", "--set", other]) == 2
        err = capsys.readouterr().err
        assert named in err and err.count("\n") == 1, err
