"""A vision-language model's image encoder: :class:`VisionSpec`, a ViT read from a Hugging Face ``vision_config``
(Qwen2-VL and Qwen2.5-VL style), and what it weighs and computes per image.

The encoder, as vLLM and transformers run Qwen2-VL / Qwen2.5-VL:

- a patch embedding: a convolution (no bias) over patches of ``in_channels`` × ``temporal_patch_size`` ×
  ``patch_size``² pixels (a still image is repeated over the temporal patch) into width d;
- ``depth`` transformer blocks of width d: two norms, a fused QKV projection (d → 3d, bias) and an output projection
  (d → d, bias), bidirectional attention of ``num_heads`` heads over the image's patches — in every block (Qwen2-VL),
  or only in the blocks of ``fullatt_block_indexes`` and within windows of ``window_size`` pixels (``window_size`` /
  ``patch_size`` patches a side) in the others (Qwen2.5-VL) —, and an MLP of width I: gated (gate and up d → I, down
  I → d, biases: Qwen2.5-VL's ``intermediate_size``) or plain (fc1 d → I, fc2 I → d: Qwen2-VL's ``mlp_ratio`` × d);
- the merger (projector): a norm, then each ``spatial_merge_size``² neighbouring patches concatenated (width
  m²·d) through a linear m²d → m²d, GELU, and a linear m²d → D into the language model's width D
  (``out_hidden_size``; Qwen2-VL calls it ``hidden_size`` and the ViT's width ``embed_dim``).

One image of T tokens (its tokens in the language model's sequence) has P = m²·T patches. Its FLOPs:

    patch embedding   2·P·(C·t·p²)·d
    blocks            2·P·depth·(4d² + k·d·I)                       (k = 3 gated, 2 plain)
    attention         4·d·P·(F·P + (depth − F)·min(P, W))           (F full blocks, W = (window / p)² patches)
    merger            2·T·((m²d)² + m²d·D)

i.e. 2 · (the linear weights) · (the rows they multiply) plus attention's 2·(d_qk + d_v) = 4·d_head per query-key
pair and head (:mod:`simulator.cost.work`'s convention); norms, activations and biases count bytes only. The
weights (:attr:`VisionSpec.params`) add the biases and norm weights (a LayerNorm's bias left out: < 0.01%).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.loading import validate
from simulator.dtypes import bytes_per_element
from simulator.errors import LLMSimError

VISION_DTYPE = "bf16"  # vision towers are served unquantised, whatever the language model's format
MAX_WIDTH = 2**20  # a vision width or count far above any model's, so that products stay exact in floats


class VisionSpec(BaseModel):
    """A ViT image encoder and its projector into the language model (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    depth: int = Field(ge=1, le=1024)
    hidden_size: int = Field(ge=1, le=MAX_WIDTH, description="the ViT's width d")
    intermediate_size: int = Field(ge=1, le=MAX_WIDTH, description="the ViT MLP's width I")
    gated: bool = Field(description="gate, up and down projections (Qwen2.5-VL) or fc1 and fc2 (Qwen2-VL)")
    num_heads: int = Field(ge=1, le=MAX_WIDTH)
    patch_size: int = Field(ge=1, le=1024)
    temporal_patch_size: int = Field(default=1, ge=1, le=64)
    in_channels: int = Field(default=3, ge=1, le=64)
    spatial_merge_size: int = Field(default=1, ge=1, le=64, description="m: m² patches make one token")
    out_hidden_size: int = Field(ge=1, le=MAX_WIDTH, description="the language model's width D")
    full_attention_blocks: int | None = Field(
        default=None, ge=0, description="blocks attending over the whole image; the others within windows "
        "(None: every block)")
    window_patches: int | None = Field(default=None, ge=1, description="patches in a window (with windowed blocks)")

    @model_validator(mode="after")
    def _consistent(self) -> VisionSpec:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} does not divide hidden_size {self.hidden_size}")
        windowed = self.full_attention_blocks is not None and self.full_attention_blocks < self.depth
        if self.full_attention_blocks is not None and self.full_attention_blocks > self.depth:
            raise ValueError(f"{self.full_attention_blocks} full-attention blocks of {self.depth}")
        if windowed and self.window_patches is None:
            raise ValueError("windowed blocks need window_patches")
        return self

    @property
    def patch_inputs(self) -> int:
        """Pixels (times channels) one patch embeds: C·t·p²."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def merged_width(self) -> int:
        """m²·d: the width of a token's patches, concatenated, entering the merger."""
        return self.spatial_merge_size**2 * self.hidden_size

    @property
    def block_linear_params(self) -> int:
        """One block's GEMM weights (no biases): 4d² + k·d·I."""
        d, k = self.hidden_size, 3 if self.gated else 2
        return 4 * d * d + k * d * self.intermediate_size

    @property
    def params(self) -> int:
        """Every weight: patch embedding, blocks (biases and two norm weights each), merger (norm, two linears with
        biases)."""
        d, width, m2d = self.hidden_size, self.intermediate_size, self.merged_width
        biases = 3 * d + d + (2 * width + d if self.gated else width + d)
        block = self.block_linear_params + biases + 2 * d
        merger = d + m2d * m2d + m2d + m2d * self.out_hidden_size + self.out_hidden_size
        return self.patch_inputs * d + self.depth * block + merger

    def weight_bytes(self, tensor_parallel: int = 1) -> float:
        """The encoder's weights on one GPU of a tensor-parallel group, in :data:`VISION_DTYPE`."""
        return self.params * bytes_per_element(VISION_DTYPE) / tensor_parallel

    def patches(self, tokens: int) -> int:
        """Patches of an image that fills ``tokens`` tokens of the sequence: m²·T."""
        return self.spatial_merge_size**2 * tokens

    def image_flops(self, tokens: int) -> float:
        """FLOPs of encoding one image of ``tokens`` tokens (module docstring)."""
        d, P = self.hidden_size, self.patches(tokens)
        full = self.depth if self.full_attention_blocks is None else self.full_attention_blocks
        window = min(P, self.window_patches) if self.window_patches is not None else P
        linear = 2 * P * (self.patch_inputs * d + self.depth * self.block_linear_params)
        attention = 4 * d * P * (full * P + (self.depth - full) * window)
        merger = 2 * tokens * (self.merged_width**2 + self.merged_width * self.out_hidden_size)
        return float(linear + attention + merger)

    def image_activation_elements(self, tokens: int) -> float:
        """Elements the encoder's GEMMs read and write for one image: each GEMM's input and output rows."""
        d, width, P = self.hidden_size, self.intermediate_size, self.patches(tokens)
        k = 2 if self.gated else 1
        block = (d + 3 * d) + (d + d) + (d + k * width) + (width + d)
        merger = (self.merged_width + self.merged_width) + (self.merged_width + self.out_hidden_size)
        return float(P * (self.patch_inputs + d + self.depth * block) + tokens * merger)

    @property
    def kernels(self) -> int:
        """Kernels one encoder pass launches: per block two norms, QKV, attention, output projection, the MLP's
        up (gate and up fused), activation and down; the patch embedding, the merger's norm and two linears."""
        return 8 * self.depth + 4


def vision_from_hf(config: dict[str, Any], where: str) -> VisionSpec | None:
    """A Hugging Face config's ``vision_config`` as a :class:`VisionSpec` (None without one, or with one of another
    family's shape: a SigLIP or CLIP tower without ``spatial_merge_size``/``depth`` is not modelled, and a model
    carrying it serves text only here). Qwen2-VL: ``embed_dim`` is the ViT's width, ``hidden_size`` the language
    model's, ``mlp_ratio`` × ``embed_dim`` the plain MLP's; Qwen2.5-VL: ``hidden_size`` the ViT's,
    ``out_hidden_size`` the language model's, ``intermediate_size`` the gated MLP's, windowed attention but in
    ``fullatt_block_indexes``."""
    vision = config.get("vision_config")
    if vision is None:
        return None
    if not isinstance(vision, dict):
        raise LLMSimError(f"{where}: vision_config must be a mapping, got {type(vision).__name__}")
    if "depth" not in vision or "spatial_merge_size" not in vision:
        return None
    where = f"{where}: vision_config"
    fields: dict[str, Any] = {
        "depth": vision.get("depth"), "num_heads": vision.get("num_heads"), "patch_size": vision.get("patch_size"),
        "temporal_patch_size": vision.get("temporal_patch_size", 1),
        "in_channels": vision.get("in_channels", vision.get("in_chans", 3)),
        "spatial_merge_size": vision.get("spatial_merge_size"),
    }
    if "embed_dim" in vision:  # Qwen2-VL: the ViT's width, the LM's as hidden_size, a plain MLP of mlp_ratio
        width = vision["embed_dim"]
        ratio = vision.get("mlp_ratio", 4)
        fields.update(hidden_size=width, out_hidden_size=vision.get("hidden_size"), gated=False,
                      intermediate_size=int(ratio * width) if isinstance(width, int) and isinstance(ratio, int | float)
                      and not isinstance(ratio, bool) else ratio)
    else:  # Qwen2.5-VL: a gated MLP, windowed attention but in the full-attention blocks
        fields.update(hidden_size=vision.get("hidden_size"), intermediate_size=vision.get("intermediate_size"),
                      out_hidden_size=vision.get("out_hidden_size"), gated=True)
        full = vision.get("fullatt_block_indexes")
        if full is not None:
            if not isinstance(full, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in full):
                raise LLMSimError(f"{where}: fullatt_block_indexes must be a list of integers, got {full!r:.60}")
            depth = vision.get("depth")
            if isinstance(depth, int) and any(not 0 <= i < depth for i in full):
                raise LLMSimError(f"{where}: fullatt_block_indexes: {full!r:.60} names a block outside 0 … "
                                  f"{depth - 1} (depth {depth})")
            window, patch = vision.get("window_size"), vision.get("patch_size")
            fields["full_attention_blocks"] = len(set(full))
            if isinstance(window, int) and isinstance(patch, int) and patch > 0:
                fields["window_patches"] = max(1, window // patch) ** 2
            else:
                fields["window_patches"] = window  # (validation names the bad value)
    return validate(VisionSpec, fields, where)
