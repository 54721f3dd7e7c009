"""FFN kinds: ``dense``, ``moe`` and ``none``. With ``D`` = hidden and ``k`` = 3 matrices when gated (SwiGLU/GeGLU:
up, gate, down), else 2:

- ``dense``: an MLP of ``intermediate_size`` I: ``k·D·I`` weights.
- ``moe``: ``num_experts`` E routed experts of ``intermediate_size`` I each, ``experts_per_token`` per token, a
  router ``D·E``, and optionally shared experts that every token runs (one dense MLP of
  ``shared_intermediate_size`` S, the shared experts' sizes summed): ``E·k·D·I + k·D·S + D·E`` weights, of which a
  token leaves ``(E − top-k)·k·D·I`` idle. The experts' weights (routed and shared) are the ``experts`` part a
  checkpoint may quantise; the router stays 16-bit. A *latent* MoE (``latent_size`` L > 0: NVIDIA's LatentMoE,
  Nemotron-3-Super's ``moe_latent_size``) runs its routed experts at width L instead of D, between a down projection
  D → L and an up projection L → D that every token runs (shared by the experts, beside the router and the shared
  experts, which stay at D): ``E·k·L·I + 2·D·L`` in place of ``E·k·D·I``, a token leaving ``(E − top-k)·k·L·I``
  idle; the projections are part of ``experts``.
- ``none``: no FFN in this layer (a mixer-only layer of a hybrid stack).

The cost model (:mod:`simulator.cost.layers`) prices the dense MLP as two GEMMs (up, gate and up fused, and down,
widths split over tensor parallelism) and the routed experts as grouped GEMMs (:mod:`simulator.cost.moe`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from simulator.catalog.layers.base import FFNSpec, Routing, ffn_kind


class MLP(FFNSpec):
    """What the dense and mixture-of-experts kinds share: the width of an MLP and whether it is gated."""

    intermediate_size: int = Field(default=1, gt=0, description="dense: the MLP width; moe: each routed expert's")
    gated: bool = True

    @property
    def matrices(self) -> int:
        return 3 if self.gated else 2

    @property
    def up_matrices(self) -> int:
        return self.matrices - 1

    def expert_params(self, hidden: int) -> int:
        """One MLP of ``intermediate_size`` (a routed expert, or the dense MLP)."""
        return self.matrices * hidden * self.intermediate_size


@ffn_kind
class DenseFFN(MLP):
    """A dense MLP every token runs."""

    kind: Literal["dense"] = "dense"

    def params(self, hidden: int) -> int:
        return self.expert_params(hidden)

    def part_params(self, hidden: int) -> dict[str, int]:
        return {"dense_ffn": self.params(hidden)}

    @property
    def dense_width(self) -> int:
        return self.intermediate_size

    @property
    def activation_width(self) -> int:
        return self.up_matrices * self.intermediate_size


@ffn_kind
class MoEFFN(MLP):
    """Routed experts (and shared ones): the module docstring gives the formulas."""

    kind: Literal["moe"] = "moe"
    dense_part: ClassVar[str] = "experts"
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    shared_intermediate_size: int = Field(default=0, ge=0, description="the shared experts' widths summed")
    latent_size: int = Field(default=0, ge=0, description="the width the routed experts work at, between a D → L "
                             "and an L → D projection every token runs (LatentMoE); 0: the model's hidden width")

    @model_validator(mode="after")
    def _consistent(self) -> MoEFFN:
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token must be <= num_experts, got {self.experts_per_token} > "
                             f"{self.num_experts}")
        return self

    def expert_params(self, hidden: int) -> int:
        """One routed expert, at the latent width where there is one."""
        return self.matrices * (self.latent_size or hidden) * self.intermediate_size

    def shared_params(self, hidden: int) -> int:
        return self.matrices * hidden * self.shared_intermediate_size

    def latent_params(self, hidden: int) -> int:
        """The down and up projections around latent experts (0 without)."""
        return 2 * hidden * self.latent_size

    def router_params(self, hidden: int) -> int:
        return hidden * self.num_experts

    def params(self, hidden: int) -> int:
        return sum(self.part_params(hidden).values())

    def part_params(self, hidden: int) -> dict[str, int]:
        return {"experts": self.num_experts * self.expert_params(hidden) + self.shared_params(hidden)
                + self.latent_params(hidden), "other": self.router_params(hidden)}

    def idle_params(self, hidden: int) -> int:
        return (self.num_experts - self.experts_per_token) * self.expert_params(hidden)

    @property
    def dense_width(self) -> int:
        return self.shared_intermediate_size

    @property
    def routing(self) -> Routing:
        return Routing(self.num_experts, self.experts_per_token, self.intermediate_size, self.latent_size)

    @property
    def activation_width(self) -> int:
        return self.up_matrices * (self.experts_per_token * self.intermediate_size + self.shared_intermediate_size)


@ffn_kind
class NoFFN(FFNSpec):
    """No FFN in this layer."""

    kind: Literal["none"] = "none"
    block: ClassVar[bool] = False

    def params(self, hidden: int) -> int:
        return 0
