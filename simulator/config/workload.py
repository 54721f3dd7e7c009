"""The ``workload:`` section: arrivals, length distributions, traces, datasets, shared prefixes, request classes
and multi-turn sessions."""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from simulator.catalog.prompt_reuse import MAX_DOCUMENTS, MAX_SEGMENT_COUNT, MAX_SEGMENTS, MAX_ZIPF
from simulator.catalog.workloads import MAX_PIECES, load_preset, with_preset
from simulator.config.base import MAX_RATE, MAX_REQUESTS, MAX_TOKENS, MIN_RATE, Strict
from simulator.config.slo import SLOConfig
from simulator.errors import renamed


class PoissonArrival(Strict):
    kind: Literal["poisson"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second")


class ConstantArrival(Strict):
    kind: Literal["constant"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second, evenly spaced")


class GammaArrival(Strict):
    """Gamma-distributed gaps with mean 1/rate and shape ``burstiness`` (1 = Poisson; below 1 burstier), as vLLM's
    benchmark_serving draws them."""

    kind: Literal["gamma"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE)
    burstiness: float = Field(default=1.0, gt=0)


class OnOffArrival(Strict):
    """Bursts: Poisson at ``rate`` for ``on_s`` seconds, then silence for ``off_s``, repeated."""

    kind: Literal["onoff"]
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE, description="requests per second while on")
    on_s: float = Field(gt=0)
    off_s: float = Field(ge=0)


class PiecewiseArrival(Strict):
    """A Poisson process whose rate is piecewise constant: ``rates`` = [[start_s, rate], ...] from 0, repeated every
    ``period_s`` if given (drawn by thinning). With ``mean_rate``, the rates are a shape and the level is
    ``mean_rate``: each is multiplied by ``mean_rate`` / m, where m = Σ rate_i · (start_{i+1} − start_i) / period_s
    (start_{n+1} = period_s) is their time-average over one period — so the process sends ``mean_rate`` requests/s
    on average over every whole period, and its peak/mean is the shape's. ``mean_rate`` needs ``period_s``: without
    a period the last rate lasts for ever and is the long-run average, whatever the rest of the pattern says."""

    kind: Literal["piecewise"]
    rates: list[tuple[float, float]] = Field(min_length=1, max_length=MAX_PIECES)
    period_s: float | None = Field(default=None, gt=0)
    mean_rate: float | None = Field(
        default=None, ge=MIN_RATE, le=MAX_RATE,
        description="requests/s averaged over one period: the rates are rescaled to it (needs period_s)")

    @model_validator(mode="after")
    def _ordered(self) -> PiecewiseArrival:
        starts = [start for start, _ in self.rates]
        if starts[0] != 0 or starts != sorted(set(starts)):
            raise ValueError(f"rates must start at 0 s with increasing start times, got starts {starts}")
        if any(rate < 0 for _, rate in self.rates) or not any(rate > 0 for _, rate in self.rates):
            raise ValueError("rates must be >= 0 with at least one > 0")
        if self.period_s is not None and self.period_s <= starts[-1]:
            raise ValueError(f"period_s must exceed the last start {starts[-1]}, got {self.period_s}")
        if self.period_s is None and self.rates[-1][1] == 0:
            raise ValueError(f"the last rate (from {starts[-1]} s on) is 0 and nothing repeats the pattern, so the "
                             "requests would never all arrive: give period_s or a last rate > 0")
        if self.mean_rate is not None and self.period_s is None:
            raise ValueError(f"mean_rate {self.mean_rate:g} is an average over one period of the pattern: give "
                             "period_s (without one the last rate is the long-run average)")
        if self.mean_rate is not None and max(self.scaled_rates()) > MAX_RATE:
            raise ValueError(f"mean_rate {self.mean_rate:g} puts the peak rate above {MAX_RATE:g} requests/s")
        return self

    def time_average(self) -> float:
        """The rates' time-average over one period (``period_s``), Σ rate_i · width_i / period_s."""
        assert self.period_s is not None  # (only asked with a period: mean_rate needs one)
        ends = [start for start, _ in self.rates[1:]] + [self.period_s]
        return sum(rate * (end - start) for (start, rate), end in zip(self.rates, ends, strict=True)) / self.period_s

    def scaled_rates(self) -> list[float]:
        """The rates the process runs at: as given, or times ``mean_rate`` / :meth:`time_average`."""
        rates = [rate for _, rate in self.rates]
        if self.mean_rate is None:
            return rates
        factor = self.mean_rate / self.time_average()
        return [rate * factor for rate in rates]


class DiurnalArrival(Strict):
    """A Poisson process with rate mean_rate × (1 + amplitude × cos(2π (t − peak_s) / period_s)) (thinning)."""

    kind: Literal["diurnal"]
    mean_rate: float = Field(ge=MIN_RATE, le=MAX_RATE)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    period_s: float = Field(default=86400.0, gt=0)
    peak_s: float = Field(default=0.0, ge=0)


class ClosedLoopArrival(Strict):
    """``users`` clients, each sending a request, waiting for it to end, thinking ``think_ms`` (exponential with
    that mean, or fixed), and sending the next — load that backs off when the server slows down. With fixed
    lengths and no think time, clients that start together stay in lock-step (they prefill together and finish
    together); ``ramp_s`` starts user u at u/users × ramp_s, as a pool that has been running for a while is
    spread out (a benchmark's warm-up requests do that)."""

    kind: Literal["closed_loop"]
    users: int = Field(ge=1, le=MAX_REQUESTS)
    think_ms: float = Field(default=0.0, ge=0)
    think: Literal["exponential", "fixed"] = "exponential"
    ramp_s: float = Field(
        default=0.0, ge=0,
        description="the users' first requests go out evenly spread over this many seconds, not all at once",
    )


ArrivalConfig = Annotated[
    PoissonArrival | ConstantArrival | GammaArrival | OnOffArrival | PiecewiseArrival | DiurnalArrival
    | ClosedLoopArrival,
    Field(discriminator="kind"),
]


def offered_rate(arrival: ArrivalConfig | None) -> float | None:
    """The arrival rate (requests/s) an arrival process states: its ``rate`` (an on-off process's while on) or its
    ``mean_rate`` (diurnal; piecewise rates rescaled to one); None where it states none (closed-loop clients,
    piecewise rates as given)."""
    return getattr(arrival, "rate", None) or getattr(arrival, "mean_rate", None)


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLength(Strict):
    """Integers uniform on [min, max]."""

    kind: Literal["uniform"]
    min: int = Field(ge=1, le=MAX_TOKENS)
    max: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max must be >= min, got min={self.min}, max={self.max}")
        return self


class LognormalLength(Strict):
    """Lognormal with the given mean (not median) and log-space sigma, rounded and clipped to [min, max]."""

    kind: Literal["lognormal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(gt=0, le=10, description="log-space; 10 spans e^±20")
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)


class NormalLength(Strict):
    """Normal with the given mean and std, truncated to [min, max] (out-of-range draws are redrawn), rounded."""

    kind: Literal["normal"]
    mean: float = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    std: float = Field(gt=0, le=MAX_TOKENS)
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _reachable(self) -> NormalLength:
        upper = self.max if self.max is not None else math.inf
        if upper < self.min:
            raise ValueError(f"max must be >= min, got min={self.min}, max={self.max}")
        if self.mean + 6 * self.std < self.min - 0.5 or self.mean - 6 * self.std > upper + 0.5:
            raise ValueError(f"[{self.min}, {self.max}] is more than 6 std from the mean {self.mean}")
        return self


class EmpiricalLength(Strict):
    """Resample (with replacement) a column of a CSV file, e.g. a trace's ``num_prefill_tokens``; capped at max."""

    kind: Literal["empirical"]
    path: str
    column: str
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)


class QuantileLength(Strict):
    """A distribution given by its quantiles (a workload preset's fitted lengths): ``values[i]`` at cumulative
    probability ``probabilities[i]`` (default evenly spaced from 0 to 1); a uniform draw is mapped through them,
    linearly between neighbours, rounded, and capped at ``max``."""

    kind: Literal["quantiles"]
    values: list[int] = Field(min_length=2, max_length=10_001)
    probabilities: list[float] | None = Field(default=None, description="from 0 to 1, increasing; one per value")
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _increasing(self) -> QuantileLength:
        if self.values[0] < 1 or self.values[-1] > MAX_TOKENS:
            raise ValueError(f"values must lie in [1, {MAX_TOKENS}], got {self.values[0]} … {self.values[-1]}")
        if any(b < a for a, b in itertools.pairwise(self.values)):
            raise ValueError("values must not decrease (quantiles at increasing probabilities)")
        p = self.probabilities
        if p is not None and (len(p) != len(self.values) or p[0] != 0 or p[-1] != 1
                              or any(b <= a for a, b in itertools.pairwise(p))):
            raise ValueError("probabilities must rise from 0 to 1, one per value")
        return self


LengthConfig = Annotated[
    FixedLength | UniformLength | LognormalLength | NormalLength | EmpiricalLength | QuantileLength,
    Field(discriminator="kind"),
]


class GaussianCopula(Strict):
    """Input and output lengths drawn together with Spearman rank correlation ``spearman``: a pair of standard
    normals of Pearson correlation 2·sin(π·spearman/6), each mapped through Φ to a uniform and through its length
    law's inverse CDF, so each marginal stays exactly its law (:mod:`simulator.workload.copula`); 0 draws them
    independently, as without it."""

    kind: Literal["gaussian_copula"]
    spearman: float = Field(ge=-1, le=1, description="the input-output rank correlation, -1 to 1")


LengthCorrelation = Annotated[GaussianCopula, Field(discriminator="kind")]
MAX_IMAGES = 4096  # images in one request (vLLM's limit_mm_per_prompt is set per deployment; far above any)


class FixedCount(Strict):
    kind: Literal["fixed"]
    value: int = Field(ge=0, le=MAX_IMAGES)


class PMFCount(Strict):
    """A count drawn from its probability mass function: ``values[i]`` (distinct, increasing, from 0) with
    probability ``probabilities[i]`` (positive; they must sum to 1 within 0.001, and are normalised to exactly 1)."""

    kind: Literal["pmf"]
    values: list[int] = Field(min_length=1, max_length=MAX_IMAGES + 1)
    probabilities: list[float] = Field(min_length=1, max_length=MAX_IMAGES + 1)

    @model_validator(mode="after")
    def _a_pmf(self) -> PMFCount:
        if len(self.values) != len(self.probabilities):
            raise ValueError(f"{len(self.values)} values but {len(self.probabilities)} probabilities")
        if self.values[0] < 0 or self.values[-1] > MAX_IMAGES or any(
                b <= a for a, b in itertools.pairwise(self.values)):
            raise ValueError(f"values must increase within [0, {MAX_IMAGES}], got {self.values[0]} … "
                             f"{self.values[-1]}")
        if any(not 0 < p <= 1 for p in self.probabilities) or abs(sum(self.probabilities) - 1) > 1e-3:
            raise ValueError(f"probabilities must be in (0, 1] and sum to 1, got sum {sum(self.probabilities):.9g}")
        return self


CountConfig = Annotated[FixedCount | PMFCount, Field(discriminator="kind")]


class ImagesConfig(Strict):
    """Images in the prompts (vision-language models): each request carries ``per_request`` images (drawn per
    request), each of ``tokens_per_image`` tokens (drawn per image). An image's tokens join the prompt — they take
    prefill and KV like text, as vLLM and SGLang place an image's placeholder tokens in the sequence —, so a
    request's ``input_tokens`` are its text's plus its images'; the model's vision encoder is charged for each image
    in the iteration that starts the request's prefill (:mod:`simulator.cost.vision`). Needs a model with a
    ``vision_config``."""

    per_request: CountConfig = Field(description="images in a request: fixed, or a pmf (0 allowed)")
    tokens_per_image: LengthConfig = Field(description="an image's tokens in the sequence (after merging patches)")


class TraceConfig(Strict):
    """Replay a request trace. Formats (``auto`` picks by header or suffix): ``processed`` (``arrived_at`` s,
    ``num_prefill_tokens``, ``num_decode_tokens``, optional ``hash_ids``), ``azure`` (``TIMESTAMP`` datetime,
    ``ContextTokens``, ``GeneratedTokens``), ``burstgpt`` (``Timestamp`` s, ``Request tokens``, ``Response
    tokens``), ``mooncake`` (JSON lines: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of
    512-token blocks), ``ragpulse`` (JSON lines: ``timestamp_s``, ``input_length``, ``output_length``, ``parts`` of
    content ids, :mod:`simulator.workload.trace`), or ``csv`` with ``columns`` naming the arrival, input and output
    columns."""

    path: str
    format: Literal["auto", "processed", "azure", "burstgpt", "mooncake", "ragpulse", "csv"] = "auto"
    columns: dict[Literal["arrival", "input", "output"], str] | None = None
    time_unit: Literal["s", "ms", "us"] = Field(default="s", description="unit of a csv arrival column")
    speedup: float = Field(default=1.0, gt=0, description="replay this many times faster (timestamps divided by it)")
    start_s: float = Field(default=0.0, ge=0, description="keep arrivals at or after this offset (trace time)")
    end_s: float | None = Field(default=None, gt=0, description="and before this one")
    sample: float = Field(default=1.0, gt=0, le=1, description="keep each row with this probability (seeded)")
    skip_bad: bool = Field(default=False, description="skip and count malformed rows instead of stopping")

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, value: Any) -> Any:
        return renamed(value, "workload.trace", {"time_scale": "speedup"})

    @model_validator(mode="after")
    def _columns_for_csv(self) -> TraceConfig:
        if self.format == "csv" and (self.columns is None or len(self.columns) != 3):
            raise ValueError("format csv needs columns: {arrival: ..., input: ..., output: ...}")
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s must be > start_s, got {self.end_s} <= {self.start_s}")
        return self


class PrefixConfig(Strict):
    """Shared prompt prefixes (a system prompt, RAG templates): a ``fraction`` of requests start with one of
    ``groups`` prefixes of ``tokens`` tokens, chosen uniformly; their input length is ``tokens`` plus the sampled
    ``input_tokens`` (the user's part)."""

    tokens: int = Field(ge=1, le=MAX_TOKENS)
    fraction: float = Field(default=1.0, ge=0, le=1)
    groups: int = Field(default=1, ge=1, le=2**62)




class SegmentConfig(Strict):
    """One part of every prompt (a system prompt, retrieved passages, a shared conversation context): ``count``
    documents in a row. With ``documents``, a request draws them — with probability ``share``, else they are its own
    content — from a pool of that many reusable contents, document i (from 0) with probability ∝ (i + 1)^−``zipf``
    (Zipf's law; 0: uniform), independently for each of the ``count``; a pool document's length is drawn from
    ``tokens`` once (the same content has the same length wherever it is used). Without ``documents`` the segment
    is always the request's own content, ``tokens`` long. The prompt is the segments in order, then the request's
    own tokens, cut at its ``input_tokens`` (:mod:`simulator.workload.segments`)."""

    name: str = Field(min_length=1, max_length=64)
    tokens: LengthConfig = Field(description="each document's length (a pool document's is drawn once)")
    documents: int | None = Field(
        default=None, ge=1, le=MAX_DOCUMENTS,
        description="the pool of reusable contents (omitted: every request's content is its own)")
    zipf: float = Field(default=0.0, ge=0, le=MAX_ZIPF,
                        description="popularity exponent over the pool: P(document i) ∝ (i + 1)^−zipf; 0 = uniform")
    share: float = Field(default=1.0, ge=0, le=1,
                         description="probability that a request's documents come from the pool, not its own")
    count: int = Field(default=1, ge=1, le=MAX_SEGMENT_COUNT, description="documents in a row (retrieved passages)")

    @model_validator(mode="after")
    def _pool_fields_need_a_pool(self) -> SegmentConfig:
        given = [f"{name}: {getattr(self, name)}" for name in ("zipf", "share") if name in self.model_fields_set]
        if self.documents is None and given:
            raise ValueError(f"{', '.join(given)} describes a pool of documents: give documents (1 to "
                             f"{MAX_DOCUMENTS:,}), or leave it out for content of the request's own")
        return self



class RequestClass(Strict):
    """A tenant or SLO tier: its ``share`` of requests (weights, normalised), a ``priority`` (lower is served
    first, as vLLM's priority scheduling), and optionally its own lengths and SLO."""

    name: str = Field(min_length=1)
    share: float = Field(gt=0)
    priority: int = 0
    input_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    slo: SLOConfig | None = None


class DatasetConfig(Strict):
    """Prompts and answers as text, counted in tokens: ``sharegpt`` (a JSON list or JSON lines of
    ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}``: each conversation's first
    human turn and the answer after it, as vLLM bench reads ShareGPT) or ``jsonl`` (one object per line with
    ``prompt_field`` and ``output_field``, text or a token count). Tokens: a Hugging Face ``tokenizer.json`` the
    user has (the ``tokenizers`` package: ``pip install 'llmsim[tokenizers]'``), else characters /
    ``chars_per_token``. ``num_requests`` pairs are drawn (seeded: without replacement while there are enough)."""

    path: str
    format: Literal["auto", "sharegpt", "jsonl"] = Field(
        default="auto", description="auto: sharegpt if the records have conversations, else jsonl")
    tokenizer: str | None = Field(default=None, description="path to a tokenizer.json (nothing is downloaded)")
    chars_per_token: float = Field(default=4.0, gt=0, le=100,
                                   description="without a tokenizer: characters per token (about 4 for English)")
    prompt_field: str = "prompt"
    output_field: str = "output"
    skip_bad: bool = Field(default=False, description="skip and count malformed lines and records instead of stopping")


class SessionsConfig(Strict):
    """Multi-turn sessions (chat, agents): ``num_requests`` sessions start at the arrival process's times; a
    session has ``turns`` turns; turn 1 sends ``input_tokens``, every later turn the conversation so far (every
    earlier turn's input and output) plus ``new_input_tokens`` (default ``input_tokens``); each turn answers
    ``output_tokens``. Turn n + 1 is sent ``think_ms`` (exponential, that mean) after turn n ends — closed within a
    session, open across sessions. A turn's prompt is its session's content, so prefix caching serves the part of
    the conversation still cached (an earlier turn's prompt; its output is recomputed, as prompt tokens). A turn
    that is rejected ends its session: the turns after it are rejected with that reason. With a sharegpt
    ``dataset``, each session is a conversation drawn from it: its turns are the conversation's human turns (the new
    input) and the answers after them (the output). Agents: a turn may fan out
    into ``fan_out`` sub-requests sent together, each the shared context plus its own ``branch_tokens``; the next
    turn is sent a think time after the last of them ends, and its context adds all their answers
    (:mod:`simulator.workload.sessions`)."""

    turns: LengthConfig | None = Field(default=None, description="turns per session (required unless a sharegpt "
                                       "dataset's conversations are the sessions)")
    think_ms: float = Field(default=0.0, ge=0, description="mean pause between a turn's end and the next's send "
                            "(an agent's tool call)")
    think: Literal["exponential", "fixed"] = Field(default="exponential", description="the pause's law")
    new_input_tokens: LengthConfig | None = None
    fan_out: LengthConfig | None = Field(
        default=None, description="agents: sub-requests a turn sends at once (default 1); the next turn waits for "
        "all of them and its context holds every one's answer")
    branch_tokens: LengthConfig | None = Field(
        default=None, description="fan_out: each sub-request's own prompt tokens after the shared context "
        "(default none: identical prompts, as parallel sampling)")


def _tokens_or_length(value: Any) -> Any:
    """A whole number of tokens in [1, MAX_TOKENS], read as ``{kind: fixed, value: N}``, or a length distribution's
    mapping (validated as one); anything else one error naming both."""
    if isinstance(value, dict):
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and (isinstance(value, int) or value.is_integer()) and 1 <= value <= MAX_TOKENS:
        return {"kind": "fixed", "value": int(value)}
    raise ValueError(f"must be a whole number of tokens from 1 to {MAX_TOKENS:,} or a length distribution "
                     f"({{kind: fixed | uniform | lognormal | normal | empirical | quantiles, ...}}), got {value!r}")


class CancelConfig(Strict):
    """Clients that give up: each request is chosen with probability ``fraction`` (one draw per request, in request
    order, from the experiment's seed) and its client cancels it ``after_s`` seconds after sending it, or once it
    has received ``after_tokens`` output tokens (a reader who stops, a client-side stop condition), whichever comes
    first, unless it ended before. A request cancelled after ``after_s`` leaves its replica's queue at once, or its
    batch at the end of the iteration in progress (its KV freed then), and ends with status ``cancelled``, reason
    ``client cancel``; one cancelled after N tokens ends when its N-th token is emitted, its KV freed there, with
    reason ``client stop`` (N output tokens wasted); a request of at most N output tokens completes."""

    fraction: float = Field(ge=0, le=1, description="share of the requests whose clients cancel them, 0 to 1")
    after_s: float | None = Field(default=None, gt=0, le=1e9,
                                  description="seconds from a chosen request's send to its cancellation")
    after_tokens: Annotated[LengthConfig, BeforeValidator(_tokens_or_length)] | None = Field(
        default=None, description="output tokens a chosen request's client receives before it cancels: a whole "
        "number (read as {kind: fixed, value: N}) or a length distribution drawn per request (requests of no more "
        "tokens complete)")

    @model_validator(mode="after")
    def _when(self) -> CancelConfig:
        if self.after_s is None and self.after_tokens is None:
            raise ValueError("give after_s (seconds after the send), after_tokens (output tokens received) or both")
        return self


class WorkloadConfig(Strict):
    """Either synthetic (arrival + lengths + num_requests) or a trace (optionally cut to num_requests);
    ``classes`` splits the requests into tenants / tiers."""

    preset: str | None = Field(
        default=None, description="a named workload (llmsim workloads): its fields, then this section's over them")
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(
        default=None, gt=0, le=1e9, description="open-loop arrivals: every request the arrival process sends "
        "within this many seconds (GuideLLM's --max-seconds); num_requests, if given, caps them")
    prefix: PrefixConfig | None = None
    segments: list[SegmentConfig] | None = Field(
        default=None, min_length=1, max_length=MAX_SEGMENTS,
        description="the prompt's parts in order, each a pool of reusable documents or the request's own content, "
        "cut at input_tokens (which prefix caching reuses where they are shared)")
    arrival: ArrivalConfig | None = None
    input_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    length_correlation: LengthCorrelation | None = Field(
        default=None, description="how input_tokens and output_tokens are drawn together (a gaussian_copula of a "
        "Spearman rank correlation); none: independently")
    trace: TraceConfig | None = None
    classes: list[RequestClass] | None = Field(default=None, min_length=1)
    max_concurrency: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="open-loop arrivals: at most this many requests outstanding; the others wait at the client and "
        "are sent when one ends (vLLM bench's --max-concurrency: latencies count from the send)")
    client_connections: int | None = Field(
        default=None, ge=1, le=MAX_REQUESTS,
        description="the client's connection pool: at most this many requests on the wire; the others wait for a "
        "connection, their latencies counted from their send, the wait included (aiohttp's default session: 100)")
    sessions: SessionsConfig | None = Field(
        default=None, description="multi-turn sessions: num_requests counts sessions, the arrival their starts")
    dataset: DatasetConfig | None = Field(
        default=None, description="prompts and answers from a text dataset (ShareGPT, JSON lines), in tokens")
    cancel: CancelConfig | None = Field(
        default=None, description="a fraction of the requests cancelled by their clients after_s seconds after "
        "they were sent (status cancelled, reason client cancel) or after_tokens output tokens (reason client stop)")
    client_timeout_s: float | None = Field(
        default=None, gt=0, le=1e9, description="every request still unfinished this many seconds after its "
        "client sent it is abandoned (status cancelled, reason client timeout; a streaming client's read timeout)")
    images: ImagesConfig | None = Field(
        default=None, description="images per request and tokens per image, joining the prompt (a vision model's "
        "encoder charged for them)")

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, value: Any) -> Any:
        return with_preset(value)

    @model_validator(mode="after")
    def _sessions_fit(self) -> WorkloadConfig:
        if self.sessions is None:
            return self
        clashes = [name for name, given in (
            ("trace", self.trace is not None), ("classes", self.classes is not None),
            ("prefix", self.prefix is not None), ("segments", self.segments is not None),
            ("max_concurrency", self.max_concurrency is not None),
            ("arrival.kind: closed_loop", self.arrival is not None and self.arrival.kind == "closed_loop"))
            if given]
        if clashes:
            raise ValueError(f"sessions start at an open-loop arrival process and carry their own prompts; they do "
                             f"not combine with {', '.join(clashes)} yet")
        if self.dataset is None and self.sessions.turns is None:
            raise ValueError("sessions.turns: required (unless a sharegpt dataset's conversations are the sessions)")
        if self.dataset is not None and self.dataset.format == "jsonl":
            raise ValueError("sessions from a dataset: its conversations are the sessions, so it must be sharegpt "
                             "(format jsonl has single prompt/answer pairs)")
        return self

    @model_validator(mode="after")
    def _segments_fit(self) -> WorkloadConfig:
        if self.segments is None:
            return self
        names = [segment.name for segment in self.segments]
        if len(set(names)) != len(names):
            raise ValueError(f"segments: names must be unique, got {names}")
        clashes = [name for name, given in (("trace (its prompts are its own)", self.trace is not None),
                                            ("prefix (a second description of the prompt's head)",
                                             self.prefix is not None)) if given]
        if clashes:
            raise ValueError(f"segments describe the content of generated prompts; not with {', '.join(clashes)}")
        return self

    @model_validator(mode="after")
    def _correlation_fits(self) -> WorkloadConfig:
        if self.length_correlation is None:
            return self
        clashes = [name for name, given in (("trace", self.trace is not None), ("dataset", self.dataset is not None),
                                            ("sessions", self.sessions is not None)) if given]
        clashes += [f"no {key}" for key in ("input_tokens", "output_tokens") if getattr(self, key) is None]
        clashes += [f"classes[{k}] (its own lengths, drawn independently)" for k, request_class in
                    enumerate(self.classes or []) if request_class.input_tokens or request_class.output_tokens]
        if clashes:
            raise ValueError(f"length_correlation pairs the section's input_tokens and output_tokens draws; not "
                             f"with {', '.join(clashes)} (length_correlation: null draws them independently)")
        return self

    @model_validator(mode="after")
    def _images_fit(self) -> WorkloadConfig:
        if self.images is None:
            return self
        clashes = [name for name in ("trace", "dataset", "sessions") if getattr(self, name) is not None]
        if clashes:
            raise ValueError(f"images are drawn for generated requests; not with {', '.join(clashes)} yet")
        return self

    @model_validator(mode="after")
    def _duration_fits(self) -> WorkloadConfig:
        if self.duration_s is None:
            return self
        clashes = [name for name, given in (
            ("trace (its start_s / end_s cut it)", self.trace is not None), ("sessions", self.sessions is not None),
            ("arrival.kind: closed_loop", self.arrival is not None and self.arrival.kind == "closed_loop"))
            if given]
        if clashes:
            raise ValueError(f"duration_s bounds an open-loop arrival process; not with {', '.join(clashes)}")
        return self

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if self.max_concurrency is not None and self.arrival is not None and self.arrival.kind == "closed_loop":
            raise ValueError("max_concurrency caps open-loop arrivals; a closed loop's users already are the cap")
        classes = self.classes or []
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes: names must be unique, got {names}")
        synthetic = {"arrival": self.arrival, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.dataset is not None:
            given = [k for k in ("input_tokens", "output_tokens", "trace", "classes", "prefix")
                     if getattr(self, k) is not None]
            if self.sessions is not None:  # the conversations are the sessions: their turns and lengths
                given += [f"sessions.{k}" for k in ("turns", "new_input_tokens", "fan_out", "branch_tokens")
                          if getattr(self.sessions, k) is not None]
            if given:
                raise ValueError(f"a dataset gives the lengths{' and the turns' if self.sessions else ''}; "
                                 f"remove {given}")
            synthetic = {"arrival": self.arrival}
        for key in ("input_tokens", "output_tokens"):
            if classes and all(getattr(c, key) is not None for c in classes):
                synthetic.pop(key)  # every class brings its own
        if self.trace is not None:
            given = [k for k, v in synthetic.items() if v is not None]
            given += [f"classes.{c.name}.{k}" for c in classes for k in ("input_tokens", "output_tokens")
                      if getattr(c, k) is not None]
            if given:
                raise ValueError(f"a trace workload takes arrivals and lengths from the trace; remove {given}")
        else:
            missing = [k for k, v in synthetic.items() if v is None]
            if self.num_requests is None and self.duration_s is None:
                missing.insert(0, "num_requests (or duration_s)")
            if missing:
                gives = (f"; preset {self.preset!r} gives {sorted(load_preset(self.preset)['workload'])}"
                         if self.preset is not None else "")
                raise ValueError(f"a synthetic workload needs {missing} (or give trace: {{path: ...}}){gives}")
        return self
