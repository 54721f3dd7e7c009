"""What a vision-language model's image encoder costs an iteration (:mod:`simulator.catalog.vision` for its shape).

vLLM v1 (and SGLang) encode a request's images in the step that first schedules its prompt, before the language
model's forward pass, and keep the encoder's output until the prompt has taken it in; so the iteration in which a
request's prefill starts pays the encoder for its images. Here an iteration encoding images of T_1 … T_n tokens
pays, on each GPU of the tensor-parallel group (vLLM shards the ViT's linear layers over it, as the language
model's):

    FLOPs   = Σ_i image_flops(T_i) / tp
    bytes   = (params · w + Σ_i activation_elements(T_i) · a) / tp    (the weights read once per iteration)
    time    = smooth roofline of the two (:meth:`simulator.cost.gemm.GemmModel.combine`)
              + (kernels − 1) · kernel overhead                         (combine adds the first)

in 16-bit (vision towers are served unquantised). Not modelled: the encoder's all-reduces under tensor
parallelism, the image preprocessing on the host, and each kernel's own roofline (the encoder's GEMMs on an image's
hundreds to thousands of patch rows are compute-bound, where one roofline of the totals is close).
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.catalog import HardwareSpec
from simulator.catalog.vision import VISION_DTYPE, VisionSpec
from simulator.cost.gemm import GemmModel
from simulator.cost.work import Work, smooth_max_work
from simulator.dtypes import bytes_per_element


class VisionCost:
    """The encoder's formulas (module docstring) for one model, GPU and tensor-parallel degree."""

    def __init__(self, vision: VisionSpec, hardware: HardwareSpec, tensor_parallel: int = 1,
                 compute_scale: float = 1.0, memory_scale: float = 1.0) -> None:
        """``compute_scale``/``memory_scale``: the serving engine's kernel efficiencies (as for the base GEMMs)."""
        self.vision = vision
        self.tensor_parallel = tensor_parallel
        self.gemm = GemmModel(hardware, VISION_DTYPE, compute_scale, memory_scale)
        self.w = bytes_per_element(VISION_DTYPE)
        self.bytes_per_gpu = vision.weight_bytes(tensor_parallel)  # the encoder's weights on one GPU
        self._image: dict[int, tuple[float, float]] = {}

    def image(self, tokens: int) -> tuple[float, float]:
        """(FLOPs, activation bytes) of one image of ``tokens`` tokens on one GPU."""
        cached = self._image.get(tokens)
        if cached is None:
            v, t = self.vision, self.tensor_parallel
            cached = (v.image_flops(tokens) / t, v.image_activation_elements(tokens) * self.w / t)
            if len(self._image) < 65536:
                self._image[tokens] = cached
        return cached

    def flops_and_bytes(self, images: Sequence[int]) -> tuple[float, float]:
        """FLOPs and HBM bytes on one GPU of an iteration encoding ``images`` (tokens of each)."""
        flops, nbytes = 0.0, self.bytes_per_gpu
        for tokens in images:
            f, b = self.image(tokens)
            flops += f
            nbytes += b
        return flops, nbytes

    def work(self, images: Sequence[int]) -> Work:
        """Encoding ``images`` (tokens of each) in one iteration as :class:`~simulator.cost.work.Work`: its FLOPs and
        bytes, the roofline of the two split by Euler's rule, the kernels' overheads fixed (module docstring); its
        ``seconds`` is what the iteration pays, and its parts what the iteration's bounds and energy count."""
        if not images:
            return Work()
        g = self.gemm
        flops, nbytes = self.flops_and_bytes(images)
        return smooth_max_work(g.p, flops / g.flops, nbytes / g.bandwidth, flops=flops, hbm_bytes=nbytes,
                               fixed_s=self.vision.kernels * g.overhead)
