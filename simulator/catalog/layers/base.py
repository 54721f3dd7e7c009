"""What every layer kind answers, and the registries that turn a YAML ``kind:`` into its spec class.

One spec class per attention kind and per FFN kind, as vLLM v1 gives each attention layer one ``KVCacheSpec``
subclass (``vllm/v1/kv_cache_interface.py``): the class holds the kind's own fields and validation, and answers the
questions the rest of the simulator asks of a layer — so memory, KV sizing, the cost model and the parallelism
checks call these hooks and never branch on ``kind``.

An attention kind (:class:`AttentionSpec`) answers, per layer and with ``t``-way tensor parallelism:

- :meth:`~AttentionSpec.params`: its weights (hidden size ``D``);
- :meth:`~AttentionSpec.kv_bytes_per_token`: bytes one token stores on one GPU (0: a state instead), and
  :meth:`~AttentionSpec.state_elements` / :meth:`~AttentionSpec.state_element_bytes`: the fixed state one sequence
  keeps instead (0: KV per token);
- :attr:`~AttentionSpec.span` (most tokens a sequence keeps, 0 = the whole context) and
  :attr:`~AttentionSpec.attended` (most cached tokens a query attends to);
- :meth:`~AttentionSpec.shapes`: its GEMMs and the widths its kernels see (:class:`AttentionShapes`), which the cost
  model prices; :attr:`~AttentionSpec.kernel_fit`: which measured kernel fit prices its attention kernels —
  ``framework`` (the serving framework's own softmax-attention kernels), ``latent`` (its MLA kernels) or ``pooled``
  (the GPU generation's pooled fit; :class:`simulator.cost.roofline.RooflineCostModel` maps the name);
  :attr:`~AttentionSpec.indexer` (a sparse-attention indexer's shape) and
  :attr:`~AttentionSpec.cross_head_norm` (a query/key norm over all heads, all-reduced under tensor parallelism);
- :meth:`~AttentionSpec.tensor_parallel_problem`: why ``t`` does not split it as vLLM requires (None: it does).

An FFN kind (:class:`FFNSpec`) answers its weights (:meth:`~FFNSpec.params`, by quantisable part
:meth:`~FFNSpec.part_params`, those a token leaves idle :meth:`~FFNSpec.idle_params`), and describes itself in the
terms the cost model prices: a plain MLP of :attr:`~FFNSpec.dense_width` every token runs (its weights stored as
:attr:`~FFNSpec.dense_part`), with :attr:`~FFNSpec.up_matrices` up-projections (gate and up fused), and the routed
experts of :attr:`~FFNSpec.routing` (None: no experts).

A kind registers with :func:`attention_kind` or :func:`ffn_kind` (its ``kind`` field's one ``Literal`` value is its
YAML name; a name registered twice is an error). :data:`Attention` and :data:`FFN` are the field types of a layer
group: they validate a mapping as the registered class its ``kind`` names (``full`` and ``dense`` when left out) —
kinds registered later, from outside the package, included — so a problem reads ``layers[0].attention.window: ...``
and an unknown kind ``unknown kind 'x' (allowed: ...)``.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, SerializeAsAny, Tag, TypeAdapter, WrapValidator

from simulator.registry import Registry

KernelFit = Literal["framework", "latent", "pooled"]


class AttentionShapes(NamedTuple):
    """One attention layer on one GPU: query heads, its GEMMs as (n, k), and the widths the attention kernels see
    (:class:`simulator.cost.attention.AttentionModel`: ``widths`` = d_qk + d_v, ``kv`` = K/V elements per token;
    ``kv_blocks``: KV heads a decode kernel schedules per sequence); for state layers the state's elements per
    sequence and the recurrence's FLOPs per token; ``head_dim``: the query/key width a ``framework`` kernel's
    prefill runs (which decides whether it falls back)."""

    heads: float
    gemms: list[tuple[float, float]]
    prefill_widths: float
    prefill_kv: float
    decode_widths: float
    decode_kv: float
    kv_blocks: int
    state_elements: float = 0.0
    state_flops: float = 0.0
    head_dim: int = 0


class IndexerShape(NamedTuple):
    """A sparse-attention indexer (DeepSeek Sparse Attention's lightning indexer): its heads, their width, and the
    bytes of the key it caches per token."""

    heads: int
    head_dim: int
    key_bytes: int


class Routing(NamedTuple):
    """An FFN's routed experts: how many, how many each token is sent to, each one's width, and the width of the
    tokens they see (``hidden``: a latent MoE's latent width; 0: the model's hidden width)."""

    experts: int
    per_token: int
    width: int
    hidden: int = 0


class LayerSpec(BaseModel, ABC):
    """A block of a layer: frozen, every key its kind's own (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: str
    block: ClassVar[bool] = True  # a block with a norm before it (False: the layer has none of this family)

    @abstractmethod
    def params(self, hidden: int) -> int:
        """Its weights in one layer (norms excluded: :meth:`simulator.catalog.architecture.LayerGroup.params`)."""


class AttentionSpec(LayerSpec):
    """One layer's attention (or state mixer); the defaults are those of a layer that keeps KV of the whole
    context."""

    kernel_fit: ClassVar[KernelFit] = "pooled"

    @abstractmethod
    def shapes(self, hidden: int, tensor_parallel: int) -> AttentionShapes:
        """Its GEMMs and kernel widths on one of ``tensor_parallel`` GPUs."""

    def kv_elements_per_token(self, tensor_parallel: int = 1) -> int:
        """K and V elements one token stores in this layer on one GPU (0 for layers with a state instead)."""
        return 0

    def kv_bytes_per_token(self, bytes_per_element: float, tensor_parallel: int = 1) -> float:
        """Bytes one token stores in this layer on one GPU: its K and V elements at ``bytes_per_element``."""
        return bytes_per_element * self.kv_elements_per_token(tensor_parallel)

    def state_elements(self, tensor_parallel: int = 1) -> float:
        """Elements of the fixed state one sequence keeps in this layer on one GPU (0 for KV layers)."""
        return 0.0

    def state_element_bytes(self, kv_bytes: float) -> float:
        """Bytes per state element, the KV cache's ``kv_bytes`` unless the kind stores its state otherwise."""
        return kv_bytes

    @property
    def span(self) -> int:
        """Most tokens a sequence keeps in this layer (0: the whole context)."""
        return 0

    @property
    def attended(self) -> int:
        """Most cached tokens a query attends to (0: the whole context)."""
        return self.span

    @property
    def indexer(self) -> IndexerShape | None:
        """The sparse-attention indexer this layer runs of its own (None: none)."""
        return None

    @property
    def cross_head_norm(self) -> bool:
        """Are queries and keys normalised over all the layer's heads at once (one all-reduce under TP)?"""
        return False

    @property
    def label(self) -> str:
        """The kind as ``llmsim models`` shows it: ``sliding(4096)`` for a span, else the kind."""
        return f"{self.kind}({self.span})" if self.span else self.kind

    def tensor_parallel_problem(self, tensor_parallel: int, model: str) -> str | None:
        """Why ``tensor_parallel`` GPUs cannot split this layer of ``model`` (vLLM's rules), or None."""
        return None


class FFNSpec(LayerSpec):
    """One layer's feed-forward block."""

    dense_part: ClassVar[str] = "dense_ffn"  # the quantisable part its dense MLP's weights belong to

    def part_params(self, hidden: int) -> dict[str, int]:
        """Its weights by part (``dense_ffn``, ``experts``, ``other``: routers), summing to :meth:`params`."""
        return {}

    def idle_params(self, hidden: int) -> int:
        """Weights a token does not use (the routed experts it is not sent to)."""
        return 0

    @property
    def dense_width(self) -> int:
        """Width of the plain MLP every token runs (the shared experts' beside routed ones; 0: none)."""
        return 0

    @property
    def up_matrices(self) -> int:
        """Up-projections before the activation, fused in one GEMM (2 gated: gate and up; else 1)."""
        return 0

    @property
    def routing(self) -> Routing | None:
        """Its routed experts (None: a token runs every weight)."""
        return None

    @property
    def activation_width(self) -> int:
        """Intermediate activations one token produces: k·(I + S), k = :attr:`up_matrices`, I = the width of its
        MLP or of the routed experts it is sent to, S = the shared experts'."""
        return 0


Spec = TypeVar("Spec", bound=LayerSpec)

ATTENTION_KINDS: Registry[AttentionSpec] = Registry("attention")
FFN_KINDS: Registry[FFNSpec] = Registry("FFN")


def _registrar(registry: Registry[Spec]) -> Callable[[type[Spec]], type[Spec]]:
    def register(cls: type[Spec]) -> type[Spec]:
        (name,) = typing.get_args(cls.model_fields["kind"].annotation)
        return registry.register(name, config=cls)(cls)  # a layer kind is the schema of its own section

    return register


attention_kind = _registrar(ATTENTION_KINDS)
ffn_kind = _registrar(FFN_KINDS)


def _open_union(base: type[Spec], registry: Registry[Spec], default: str) -> Any:
    """The field type of one family: a mapping validated as the registered class its ``kind`` names (``default``
    when left out), through a tagged union of the kinds registered by then (a union error's path carries the tag,
    as pydantic's own tagged unions do, which :mod:`simulator.errors` reads); an instance passes as it is."""
    adapters: dict[tuple[str, ...], TypeAdapter[Any]] = {}

    def tag(value: Any) -> Any:
        return value.get("kind", default) if isinstance(value, dict) else getattr(value, "kind", None)

    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        if isinstance(value, base):
            return value
        kinds = tuple(registry.kinds())
        if kinds not in adapters:
            members = tuple(Annotated[registry.get(kind), Tag(kind)] for kind in kinds)
            union: Any = typing.Union[members]  # noqa: UP007 (a union of a tuple of types built at run time)
            adapters[kinds] = TypeAdapter(Annotated[union, Discriminator(tag)])
        return adapters[kinds].validate_python(value)

    return Annotated[base, SerializeAsAny(), WrapValidator(validate)]


if TYPE_CHECKING:  # to a type checker, the base classes
    Attention = AttentionSpec
    FFN = FFNSpec
else:
    Attention = _open_union(AttentionSpec, ATTENTION_KINDS, "full")
    FFN = _open_union(FFNSpec, FFN_KINDS, "dense")


def heads_problem(heads: int, tensor_parallel: int, model: str) -> str | None:
    """vLLM's rule for query heads: ``tensor_parallel`` divides them (the problem, or None)."""
    if not heads % tensor_parallel:
        return None
    allowed = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
    return f"{tensor_parallel} does not divide the {heads} attention heads of {model} (allowed: {allowed})"


def shared_problem(count: int, what: str, tensor_parallel: int, model: str) -> str | None:
    """vLLM's rule for heads that query heads share (KV heads, a Mamba mixer's B/C groups): each rank holds whole
    ones, or each one is replicated over a whole number of ranks (the problem, or None)."""
    t = tensor_parallel
    if not (count % t if count >= t else t % count):
        return None
    return (f"{t} and the {count} {what} of {model} do not split evenly (each rank needs whole {what}, or each one "
            "a whole number of ranks)")


def grouping_problem(heads: int, kv_heads: int) -> str | None:
    """Query heads share KV (key) heads in equal groups: ``heads`` a multiple of ``kv_heads`` (the problem, or None)."""
    return None if not heads % kv_heads else f"num_heads ({heads}) must be a multiple of num_kv_heads ({kv_heads})"


def grouped_heads_problem(heads: int, kv_heads: int, tensor_parallel: int, model: str) -> str | None:
    """vLLM's rules for query heads grouped over KV heads: :func:`heads_problem`, then :func:`shared_problem`."""
    return heads_problem(heads, tensor_parallel, model) or shared_problem(kv_heads, "KV heads", tensor_parallel,
                                                                         model)
