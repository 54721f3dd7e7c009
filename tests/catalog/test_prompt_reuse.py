"""Prompt reuse fitted from content ids (simulator.catalog.prompt_reuse): the Zipf fits against their defining
equations, and the parts and hash-block fits on small sources worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.catalog.prompt_reuse import (
    MAX_ZIPF,
    context_share,
    expected_distinct,
    fit_hash_blocks,
    fit_parts,
    part_statistics,
    pool_for,
    zipf_exponent,
    zipf_pool,
    zipf_probabilities,
)
from simulator.errors import LLMSimError


def test_the_zipf_exponent_is_the_maximum_likelihood_one():
    """Counts in exact proportion to Zipf(50, 1.3) give back 1.3 (the score vanishes there); counts 4 and 2 over
    two documents: the law's mean log-rank p₂·ln 2 equals the uses' (2·ln 2)/6 when p₂ = 1/3, i.e. 2^−s = 1/2,
    s = 1; even counts: 0; one document taking every use: the bound."""
    assert zipf_exponent(list(zipf_probabilities(50, 1.3) * 1e6), 50) == pytest.approx(1.3, abs=1e-3)
    assert zipf_exponent([4, 2], 2) == pytest.approx(1.0, abs=1e-4)
    assert zipf_exponent([5, 5, 5], 3) == 0.0
    assert zipf_exponent([9], 4) == MAX_ZIPF


def test_expected_distinct_documents_and_the_pool_that_shows_them():
    """Two equally likely documents drawn twice: both show with probability 1/2, one with 1/2: 1.5 expected. The
    pool for 1,000 distinct among 5,000 uniform draws: N with N·(1 − (1 − 1/N)^5000) = 1,000, i.e. N = 1,000 + a
    few (the first N whose expectation reaches 1,000)."""
    assert expected_distinct(2, 0.0, 2) == pytest.approx(1.5)
    pool = pool_for(1000, 5000, 0.0)
    assert expected_distinct(pool, 0.0, 5000) >= 1000 > expected_distinct(pool - 1, 0.0, 5000)
    assert 1000 <= pool < 1010


def test_a_zipf_pool_is_recovered_from_its_draws():
    """30,000 draws of Zipf(2,000, 0.8), of which some documents never show: the fitted pool and exponent are
    within 2% and 0.03 of the law's."""
    rng = np.random.default_rng(0)
    counts = np.bincount(rng.choice(2000, size=30_000, p=zipf_probabilities(2000, 0.8)))
    documents, exponent = zipf_pool(list(counts[counts > 0]))
    assert documents == pytest.approx(2000, rel=0.02) and exponent == pytest.approx(0.8, abs=0.03)


# six requests: a two-chunk template ``sys`` (10 tokens a chunk) and a list of documents ``docs`` (5 tokens each)
PARTS = [{"sys": (sys_ids, [10, 10]), "docs": (docs, [5] * len(docs))} for sys_ids, docs in (
    ([1, 7], [5, 6]), ([1, 7], [5]), ([1, 8], []), ([1, 9], [6, 7]), ([2, 7], [5, 6]), ([2, 7], [8]))]
INPUTS = np.array([10 + 10 + 5 * len(request["docs"][0]) + 3 for request in PARTS])  # 3 tokens of their own


def test_a_parts_source_by_hand():
    """``sys`` has two chunks in every request, so it is a template. Chunk 1: keys (1) ×4 and (2) ×2, both shared:
    2 documents, share 6/6, exponent 1 (counts 4 and 2, as above). Chunk 2: (1,7) ×2 and (2,7) ×2 shared, (1,8) and
    (1,9) not: 2 documents, share 4/6 of the requests shared through chunk 1, exponent 0. ``docs`` varies: 5 of 6
    requests have it, most often 2 documents (3 times, against 1 twice); its ids 5 and 6 are used thrice, 7 and 8
    once."""
    system_1, system_2, docs = fit_parts(PARTS, ["sys", "docs"])
    assert (system_1.name, system_1.documents, system_1.share) == ("sys.1", 2, 1.0)
    assert system_1.zipf == pytest.approx(1.0, abs=1e-4) and list(system_1.tokens) == [10] * 6
    assert (system_2.name, system_2.documents, system_2.share, system_2.zipf) == ("sys.2", 2, 0.6667, 0.0)
    assert (docs.name, docs.share, docs.count) == ("docs", 0.8333, 2)
    assert (docs.documents, docs.zipf) == zipf_pool([3, 3, 1, 1]) and list(docs.tokens) == [5] * 8
    assert docs.section(lambda sample: {"kind": "fixed", "value": int(sample[0])}) == {
        "name": "docs", "documents": docs.documents, "zipf": docs.zipf, "share": 0.8333, "count": 2,
        "tokens": {"kind": "fixed", "value": 5}}


def test_the_share_of_prompt_tokens_seen_before_by_hand():
    """In time order, the slots whose chain an earlier request held: r0 nothing; r1 (1)(1,7)(1,7,5) = 25 tokens; r2
    (1) = 10; r3 (1) = 10; r4 nothing (template 2 is new); r5 (2)(2,7) = 20: 65 of the 178 prompt tokens (each
    prompt its slots plus 3 of its own). ``docs`` repeats 4 of its 8 uses (1 − 4 distinct / 8)."""
    statistics = part_statistics(PARTS, ["sys", "docs"], INPUTS)
    assert INPUTS.sum() == 178
    assert statistics["prefix_reuse"] == {"seen_before_share": round(65 / 178, 4)}
    assert statistics["prompt_parts"]["docs"] == {"input_share": round(40 / 178, 4), "mean_tokens": 6.7,
                                                  "distinct": 4, "repeat_share": 0.5}
    assert statistics["prompt_parts"]["sys"] == {"input_share": round(120 / 178, 4), "mean_tokens": 20.0}


def test_own_content_at_the_end_is_left_out():
    """A question that no two requests share is own content; at the end of the prompt it adds nothing."""
    parts = [{**request, "question": ([100 + i], [4])} for i, request in enumerate(PARTS)]
    assert [segment.name for segment in fit_parts(parts, ["sys", "docs", "question"])] == ["sys.1", "sys.2", "docs"]
    head = fit_parts(parts, ["question", "sys", "docs"])[0]
    assert (head.name, head.documents) == ("question", None)


def test_a_hash_block_source_by_hand():
    """Four prompts of 512-token blocks: [0,1,2] (1,500 tokens), [0,1,3,4] (2,000), [0,5] (600), [0,1,2,6] (1,800).
    Block 0 is in all: the common segment (512 tokens). After it, block 1 is in three prompts and block 2 in two, so
    the contexts are [1,2] (512 + 476 tokens), [1] (512) and [1,2] (1,024), all starting at block 1: one document.
    Seen before, in order: 0, 2 (blocks 0 and 1), 1, 3 of 13 blocks; 7 distinct."""
    fit = fit_hash_blocks([[0, 1, 2], [0, 1, 3, 4], [0, 5], [0, 1, 2, 6]], np.array([1500, 2000, 600, 1800]))
    common, context = fit.segments
    assert (common.name, common.documents, list(common.tokens), fit.common_tokens) == ("common", 1, [512], 512)
    assert (context.name, context.documents, context.zipf, list(context.tokens)) == ("context", 1, 0.0,
                                                                                     [988, 512, 1024])
    assert fit.statistics == {"block_tokens": 512, "blocks": 13, "distinct_blocks": 7,
                              "seen_before_share": round(6 / 13, 4), "common_blocks": 1,
                              "context_requests_share": 0.75}


def test_the_context_share_that_gives_a_block_hit_share_by_hand():
    """2,048-token prompts (4 blocks), a 512-token common head (1 block hit) and 1,024-token contexts (then 3 blocks
    hit): a share q hits 1 + 2q of 4 blocks, so 50% needs q = 0.5; 25% needs none; 90% would need q = 1.3, capped
    at 1."""
    fixed = lambda tokens: ([tokens, tokens], [0.0, 1.0])  # noqa: E731
    assert context_share(0.5, 512, fixed(2048), fixed(1024)) == 0.5
    assert context_share(0.25, 512, fixed(2048), fixed(1024)) == 0.0
    assert context_share(0.9, 512, fixed(2048), fixed(1024)) == 1.0


def test_a_fit_keeps_to_the_bounds_of_a_prompt_before_fitting():
    """A template of 17 chunks would be 17 segments (a prompt takes 16); a list whose most common length is 65
    documents would not fit one segment (64): each is refused before any counting, naming what it found."""
    template = [{"t": (list(range(17)), [1] * 17)} for _ in range(3)]
    with pytest.raises(LLMSimError, match=r"these parts make 17 segments .* more than the 16 a prompt takes"):
        fit_parts(template, ["t"])
    documents = [{"d": (list(range(65)), [1] * 65)}, {"d": (list(range(65)), [1] * 65)}, {"d": ([1], [1])}]
    with pytest.raises(LLMSimError, match="part 'd': most requests that have it have 65 chunks, more than the 64"):
        fit_parts(documents, ["d"])
