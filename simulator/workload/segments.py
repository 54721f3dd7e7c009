"""Prompts made of segments (``workload.segments``): which content each prompt holds, so that prefix caching reuses
what requests share.

Each segment puts ``count`` documents in a row (:class:`~simulator.config.workload.SegmentConfig`). A request draws
a segment's documents from its pool with probability ``share`` (one draw per request and segment), each document
independently with probability p_i = (i + 1)^−zipf / Σ_j (j + 1)^−zipf (:func:`zipf_probabilities`), with
replacement; otherwise — and always in a segment without a pool — they are its own content, each of a length drawn
from ``tokens``. A pool document's length is drawn from ``tokens`` once for the run, so the same content has the
same length wherever it appears.

A request's prompt is its segments' documents in order, then its own tokens, cut at its ``input_tokens``: a slot
(one document in one prompt) that starts at or after the prompt's end is dropped, one that crosses it is cut — its
tokens are still the first tokens of that content. So the prompt length stays exactly the drawn ``input_tokens``.

Prefix caching (:class:`~simulator.request.Prefix`) sees the prompt as a chain: slot k's id names the content of
every token up to the end of slot k — the pair (id of slot k − 1, document of slot k), numbered densely in order of
first appearance per column (``np.unique``). Two prompts therefore share a cached block only when everything before
it is the same (as vLLM's and SGLang's block hashes chain their parents): a popular passage after a system prompt
that differs is not reused. A request's :class:`SegmentIds` covers its leading run of pool slots; its own content,
and everything after it, is never shared.

Work: a segment draws its pool's lengths once (bounded by ``MAX_DOCUMENTS``) and O(n × count) values; the chain
takes one ``np.unique`` per slot column (at most ``MAX_SEGMENTS`` × ``MAX_SEGMENT_COUNT`` columns); each distinct
prefix (its slots' ends and ids) is one Python object, shared by the requests that have it. Nothing grows with
tokens.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from simulator.catalog.prompt_reuse import zipf_probabilities
from simulator.config.workload import SegmentConfig
from simulator.request import Prefix
from simulator.workload.lengths import sample_lengths

OWN = -1  # the document index of a slot that is the request's own content


class SegmentIds:
    """The ids of a prompt's shared slots, one per token (``unit`` 1): token t's id is the chain id of the slot
    holding it, the slots ending at ``ends`` (increasing, in tokens from the prompt's start). O(slots) memory; an
    id is found by bisection."""

    __slots__ = ("ends", "ids")

    def __init__(self, ends: tuple[int, ...], ids: tuple[int, ...]) -> None:
        self.ends, self.ids = ends, ids

    def __len__(self) -> int:
        return self.ends[-1]

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.ends[-1]:
            raise IndexError(f"token {index} is not in the shared slots (0 … {self.ends[-1] - 1})")
        return self.ids[bisect_right(self.ends, index)]

    def __iter__(self) -> Iterator[int]:
        starts = (0, *self.ends[:-1])
        return itertools.chain.from_iterable(
            itertools.repeat(id_, end - start) for start, end, id_ in zip(starts, self.ends, self.ids, strict=True))


class SegmentDraws(NamedTuple):
    """Every prompt's slots, one column per document of each segment in order: the document drawn (``OWN`` for the
    request's own content) and its length in tokens, uncut; ``segment`` names each column's segment (its index)."""

    documents: np.ndarray  # int64, requests × columns
    lengths: np.ndarray  # int64, requests × columns
    segment: np.ndarray  # int64, one per column


def draw_segments(segments: list[SegmentConfig], n: int, seed: np.random.SeedSequence) -> SegmentDraws:
    """The slots of ``n`` prompts (module docstring): one random stream per segment, so changing one segment leaves
    the others' draws unchanged."""
    documents, lengths = [], []
    for segment, stream in zip(segments, seed.spawn(len(segments)), strict=True):
        rng = np.random.default_rng(stream)
        if segment.documents is None:
            documents.append(np.full((n, segment.count), OWN, dtype=np.int64))
            lengths.append(sample_lengths(segment.tokens, n * segment.count, rng).reshape(n, segment.count))
            continue
        pool_lengths = sample_lengths(segment.tokens, segment.documents, rng)
        pooled = rng.random(n) < segment.share
        drawn = rng.choice(segment.documents, size=(n, segment.count),
                           p=zipf_probabilities(segment.documents, segment.zipf)).astype(np.int64)
        drawn[~pooled] = OWN
        length = pool_lengths[drawn]
        length[~pooled] = sample_lengths(segment.tokens, int((~pooled).sum()) * segment.count, rng).reshape(
            -1, segment.count)  # the requests' own content
        documents.append(drawn)
        lengths.append(length)
    column_segment = np.repeat(np.arange(len(segments)), [segment.count for segment in segments])
    return SegmentDraws(np.concatenate(documents, axis=1), np.concatenate(lengths, axis=1), column_segment)


def segment_prefixes(segments: list[SegmentConfig], input_tokens: np.ndarray,
                     seed: np.random.SeedSequence) -> np.ndarray:
    """Each request's :class:`~simulator.request.Prefix` (None when its first slot is its own content): the chain
    ids of its leading run of pool slots that start inside its ``input_tokens``-token prompt, cut at its end."""
    n = len(input_tokens)
    draws = draw_segments(segments, n, seed)
    ends = np.cumsum(draws.lengths, axis=1)
    inside = ends - draws.lengths < input_tokens[:, None]  # the slot starts before the prompt's end
    lead = np.cumprod((draws.documents != OWN) & inside, axis=1).sum(axis=1)  # leading shared slots
    chain = np.zeros_like(draws.documents)
    parent = np.zeros(n, dtype=np.int64)  # within the previous column: the dense index of the chain so far
    offset = 0
    for column in range(draws.documents.shape[1]):
        rows = np.flatnonzero(lead > column)
        if not rows.size:
            break
        pool = segments[int(draws.segment[column])].documents
        assert pool is not None  # a leading shared slot is a pool document
        keys, local = np.unique(parent[rows] * pool + draws.documents[rows, column], return_inverse=True)
        parent[rows] = local
        chain[rows, column] = offset + local
        offset += keys.size
    width = int(lead.max()) if n else 0  # the columns any prefix reaches
    cut = np.minimum(ends[:, :width], input_tokens[:, None]).tolist()
    made: dict[tuple[tuple[int, ...], tuple[int, ...]], Prefix] = {}  # one object per distinct prefix
    prefixes = np.empty(n, dtype=object)
    for r, (e, c, k) in enumerate(zip(cut, chain[:, :width].tolist(), lead.tolist(), strict=True)):
        if k:
            key = (tuple(e[:k]), tuple(c[:k]))
            prefix = made.get(key)
            if prefix is None:
                prefix = made[key] = Prefix(SegmentIds(*key), 1)
            prefixes[r] = prefix
    return prefixes
