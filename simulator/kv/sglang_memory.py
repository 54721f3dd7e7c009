"""SGLang's memory defaults: its share of GPU memory for weights and KV cache (``--mem-fraction-static``, left
unset) and the requests it runs at once from the pool that leaves (``--max-running-requests``, left unset).

SGLang (0.5.x, ``ServerArgs._handle_gpu_memory_settings``) reserves, in MB of a GPU of ``M`` MB,

    reserved = 512 + 1.5 × max(chunked_prefill_size, 2048) + 2 × cuda_graph_max_bs + 1024 × tp × pp / 8
               (+ 3 × cuda_graph_max_bs × dp with attention data parallelism, and 1.5 × that more above 300)
    reserved ≥ 10,240 on GPUs of more than 60 GB

for activations and CUDA graphs, and keeps mem_fraction_static = round((M − reserved) / M, 3) for the weights and
the KV pool together. Its CUDA graphs go up to ``cuda_graph_max_bs`` sequences: 256 below 4 tensor-parallel GPUs and
512 from 4 on a GPU of 60–160 GB (H100, H200), 512 above (B200), fewer on smaller GPUs (the table below). The pool is
then ``M × mem_fraction_static − weights`` (SGLang measures M as the memory free at start-up, after the CUDA
context; a speculative draft model's 2 GB reserve is not counted here).

Its request pool (``ModelRunner.init_memory_pool``) has min(max(pool tokens / context_len × 512, 2,048), 4,096)
slots, and its scheduler runs at most min(pool tokens / 2, those slots) requests (each attention-DP rank of its own
pool): 2,048 for a pool of under 4 contexts, 4,096 from 8 (in proportion between), and pool / 2 where that is fewer
(pools of a few thousand tokens).
"""

from __future__ import annotations

# (GPU memory below this many GB, CUDA-graph batch sizes up to: below 4 tensor-parallel GPUs, from 4 on)
CUDA_GRAPH_MAX_BS = ((20, 8, 8), (35, 24, 80), (60, 32, 160), (90, 256, 512), (160, 256, 512), (float("inf"), 512, 512))


def cuda_graph_max_bs(memory_gib: float, tensor_parallel: int) -> int:
    """SGLang's largest CUDA-graph batch on a GPU of ``memory_gib`` (its default ``--cuda-graph-max-bs``)."""
    below_4, from_4 = next((small, large) for limit, small, large in CUDA_GRAPH_MAX_BS if memory_gib < limit)
    return below_4 if tensor_parallel < 4 else from_4


def mem_fraction_static(memory_gib: float, chunked_prefill_size: int, tp_size: int, pipeline_parallel: int = 1,
                        data_parallel: int = 1) -> float:
    """SGLang's default ``--mem-fraction-static`` (module docstring) for a GPU of ``memory_gib``, its prefill chunk
    ``chunked_prefill_size`` (tokens) and the parallelism: ``tp_size`` as SGLang counts it (every GPU of a pipeline
    stage, with attention data parallelism its ``data_parallel`` ranks' together)."""
    memory_mb = memory_gib * 1024
    graphs = cuda_graph_max_bs(memory_gib, tp_size)
    reserved = 512 + 1.5 * max(chunked_prefill_size, 2048) + 2 * graphs + 1024 * tp_size * pipeline_parallel / 8
    if data_parallel > 1:
        reserved += 3 * graphs * data_parallel + (1.5 * graphs * data_parallel if graphs > 300 else 0.0)
    if memory_gib > 60:
        reserved = max(reserved, 10 * 1024)
    return round((memory_mb - reserved) / memory_mb, 3)


def max_running_requests(pool_tokens: int, context_len: int) -> int:
    """SGLang's default ``--max-running-requests`` on a rank whose KV pool holds ``pool_tokens`` tokens for requests
    of up to ``context_len`` (module docstring); at least 1."""
    slots = min(max(int(pool_tokens / context_len * 512), 2048), 4096)
    return max(1, min(pool_tokens // 2, slots))
