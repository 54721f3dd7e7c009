"""Speculative draft heads that run on the target's GPUs: a model's multi-token-prediction (MTP) modules and EAGLE
heads (:func:`draft_head`).

A head's draft step runs one decoder layer over each sequence's newest token(s), fed by the target's hidden states,
and an LM head; the engines run it inside the target's iteration, its KV cache in the same block pool and its weights
beside the target's. Per method, with D the target's width:

- ``mtp`` (vLLM ``method: mtp``, SGLang ``NEXTN``, TensorRT-LLM ``decoding_type: MTP``): the checkpoint's n modules
  (:attr:`~simulator.catalog.ModelSpec.mtp`), each [norm(embedding of the next token); norm(hidden state)] → a
  2D → D projection → one decoder layer of the model's own shape → norm → the target's LM head (embeddings and head
  shared, as vLLM and SGLang load them). All n are held; draft step i runs module ((i − 1) mod n) + 1, so for k > n
  the engines reuse the modules autoregressively, each step feeding its own output back (vLLM's ``DeepSeekMTP``
  picks layer ``spec_step_idx % n``; SGLang runs NEXTN as an EAGLE draft of k steps over its one module). A model
  without modules cannot draft so: :func:`draft_head` says which model and field.
- ``eagle`` (EAGLE-1/2: vLLM ``eagle``, SGLang ``EAGLE``, TensorRT-LLM ``Eagle``): fc ([embedding; target hidden]:
  2D → D) → one Llama decoder layer of the target's width → the target's LM head. Its attention has the target's
  softmax attention shape (heads, KV heads, head width) where the target has one, else D / 128 heads of 128 over
  :data:`EAGLE_KV_HEADS` KV heads (the published heads of latent-attention and hybrid targets are Llama layers); its
  MLP is a dense SwiGLU of the target's dense width, or, for a mixture of experts without dense layers, of the width
  one token runs (its top-k experts' and the shared ones'; 4·D in a model of no FFN).
- ``eagle3`` (vLLM ``eagle3``, SGLang ``EAGLE3``, TensorRT-LLM ``Eagle3``): EAGLE-3 fuses three target layers' hidden
  states (low, mid, high) with fc (3D → D) once per verification, in the first draft pass, then runs such a layer
  whose query/key/value projection reads [embedding; hidden] (2D wide: one more D-deep GEMM of the QKV width) and its
  own LM head over a draft vocabulary of :data:`EAGLE3_DRAFT_VOCAB` tokens (mapped onto the target's; embeddings
  shared).

Weights (:meth:`DraftHead.part_params`): MTP modules are part of the checkpoint and stored in its format (its
quantised parts in the experiment's weight dtype, :attr:`DraftHead.model`'s quantization); EAGLE heads are separate
16-bit checkpoints. KV: each held layer keeps its attention's KV per token for the whole context, n MTP modules n
layers' worth, in the target's pool (:func:`simulator.kv.sizing.kv_budget`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.catalog.architecture import LayerGroup
from simulator.catalog.layers import DenseFFN, FullAttention
from simulator.catalog.layers.softmax import SoftmaxAttention
from simulator.catalog.model_spec import QUANTIZABLE_PARTS, ModelSpec, Quantization
from simulator.errors import LLMSimError

HEAD_METHODS = ("mtp", "eagle", "eagle3")  # the methods whose draft is a head on the target's GPUs
# EAGLE-3 heads predict over a draft vocabulary mapped onto the target's (draft_vocab_size 32000 in the published
# heads: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B, Tengyunw/qwen3_8b_eagle3)
EAGLE3_DRAFT_VOCAB = 32_000
EAGLE_HEAD_DIM, EAGLE_KV_HEADS = 128, 8  # an EAGLE layer's attention where the target has no softmax attention


@dataclass(frozen=True)
class DraftHead:
    """A draft head: ``model`` is one draft pass's network — ``layers`` one decoder layer, ``vocab_size`` the rows of
    the LM head it multiplies (tied: one table, and none of it held here unless ``own_head``), ``quantization``
    which parts run in the experiment's weight dtype; ``modules`` layers of that shape are held (MTP: the
    checkpoint's n; EAGLE: 1); ``step_gemms`` (output width, input width) of the projections every draft pass runs
    per token besides the layer (MTP and EAGLE: the 2D → D input projection; EAGLE-3: the second half of its 2D-wide
    QKV projection), ``first_pass_gemms`` those only the first pass of a step runs (EAGLE-3's 3D → D fusion);
    ``norms``: D-wide norms per module besides its layer's."""

    method: str
    model: ModelSpec
    modules: int
    step_gemms: tuple[tuple[int, int], ...]
    first_pass_gemms: tuple[tuple[int, int], ...] = ()
    norms: int = 1
    own_head: bool = False

    def part_params(self) -> dict[str, int]:
        """Weights held on the replica by part (as :meth:`ModelSpec.part_params`): ``modules`` layers, their
        projections and norms in ``other`` (16-bit), and an own LM head (EAGLE-3's) in ``other``."""
        m = self.model
        D, (layer,) = m.hidden_size, m.layers
        parts = dict.fromkeys(("attention", "dense_ffn", "experts", "other"), 0)
        parts["attention"] = self.modules * layer.attention.params(D)
        for part, n in layer.ffn.part_params(D).items():
            parts[part] += self.modules * n
        projections = sum(n * k for n, k in (*self.step_gemms, *self.first_pass_gemms))
        parts["other"] += self.modules * ((layer.attention.block + layer.ffn.block + self.norms) * D + projections)
        parts["other"] += m.vocab_size * D if self.own_head else 0
        return parts

    def part_bytes(self, block_bytes: float, embedding_bytes: float = 2.0) -> dict[str, float]:
        """Bytes of each part: the quantisable parts of ``model.quantization`` at ``block_bytes`` per parameter, the
        rest at ``embedding_bytes``."""
        quantized = self.model.quantization.parts if self.model.quantization else QUANTIZABLE_PARTS
        return {part: n * (block_bytes if part in quantized else embedding_bytes)
                for part, n in self.part_params().items()}

    def kv_bytes_per_token(self, bytes_per_element: float, tensor_parallel: int = 1) -> float:
        """KV bytes per token of the ``modules`` held layers on one GPU (each keeps the whole context)."""
        return self.modules * self.model.layers[0].attention.kv_bytes_per_token(bytes_per_element, tensor_parallel)


def draft_head(model: ModelSpec, method: str) -> DraftHead:
    """``model``'s draft head for ``method`` (one of :data:`HEAD_METHODS`; module docstring). Raises
    :class:`~simulator.errors.LLMSimError` (one line, naming the model and the field) for ``mtp`` on a model that
    ships no multi-token-prediction modules."""
    D = model.hidden_size
    if method == "mtp":
        if model.mtp is None:
            raise LLMSimError(
                f"scheduler.speculative.method: mtp needs the model's multi-token-prediction modules; {model.name} "
                "has none (its config.json has no num_nextn_predict_layers / mtp_num_hidden_layers): use eagle, "
                "eagle3, draft_model or ngram")
        layer = model.mtp.model_copy(update={"count": 1})
        step = _spec(model, f"{model.name} MTP", layer, model.vocab_size, model.quantization)
        return DraftHead("mtp", step, model.mtp.count, ((D, 2 * D),), norms=3)
    attention = next((g.attention for g in model.layers if isinstance(g.attention, SoftmaxAttention)), None)
    if attention is None:
        heads = max(1, D // EAGLE_HEAD_DIM)
        kv_heads = EAGLE_KV_HEADS if heads % EAGLE_KV_HEADS == 0 else heads
        attention = FullAttention(num_heads=heads, num_kv_heads=kv_heads, head_dim=EAGLE_HEAD_DIM)
    else:
        attention = FullAttention(num_heads=attention.num_heads, num_kv_heads=attention.num_kv_heads,
                                  head_dim=attention.head_dim)
    dense = [g.ffn.dense_width for g in model.layers if g.ffn.kind == "dense"]
    routed = [r.per_token * r.width + g.ffn.dense_width for g in model.layers if (r := g.ffn.routing)]
    width = max(dense or routed or [4 * D])
    layer = LayerGroup(count=1, attention=attention, ffn=DenseFFN(intermediate_size=width))
    sixteen_bit = Quantization(dtype="bf16", parts=())  # a separate 16-bit checkpoint
    if method == "eagle":
        step = _spec(model, f"{model.name} EAGLE", layer, model.vocab_size, sixteen_bit)
        return DraftHead("eagle", step, 1, ((D, 2 * D),))
    qkv = (attention.num_heads + 2 * attention.num_kv_heads) * attention.head_dim
    step = _spec(model, f"{model.name} EAGLE-3", layer, min(EAGLE3_DRAFT_VOCAB, model.vocab_size), sixteen_bit)
    return DraftHead("eagle3", step, 1, ((qkv, D),), first_pass_gemms=((D, 3 * D),), norms=2, own_head=True)


def _spec(target: ModelSpec, name: str, layer: LayerGroup, vocab: int, quantization: Quantization | None) -> ModelSpec:
    """One draft pass's network as a model the cost model prices: ``layer``, an LM head of ``vocab`` rows (tied to
    the embeddings, so the table is one), the target's width and positions."""
    return ModelSpec(name=name, hidden_size=target.hidden_size, vocab_size=vocab,
                     max_position_embeddings=target.max_position_embeddings, tie_word_embeddings=True,
                     layers=(layer,), quantization=quantization)
