"""The simplest event loop for scenario (a) of bench_scale.py: the speed limit our engine is compared against.

One replica, a heapq of events, the same continuous-batching policy (prefill-first, FCFS, admission leaving the
decodes their next step and the watermark free, recompute preemption of the latest arrival), the same cost model
and the same paged KV allocator, the same closed-form decode runs cut at the first iteration boundary after an
admissible arrival — but no SimPy, no scheduler/replica classes and no metrics beyond first-token and finish times.
It should give the engine's results exactly (checked in tests/integration/test_reference.py).

    python benchmarks/reference_loop.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

import simulator
from simulator.config.deployment import resolve
from simulator.cost import IterationShape, build_cost_model
from simulator.kv import PagedAllocator
from simulator.workload import generate_requests

ARRIVAL, BOUNDARY = 0, 1


def reference_run(config) -> tuple[np.ndarray, np.ndarray]:
    """First-token and finish times per request (NaN if rejected) for a single-replica continuous experiment."""
    deployment = resolve(config)
    model, hardware = deployment.model, deployment.gpu()
    cost = build_cost_model(config, model, hardware, deployment.engine)
    from simulator.cluster.pool_setup import batch_limits
    from simulator.kv import kv_budget, kv_dtype

    max_len, budget_tokens = batch_limits(config, model.max_position_embeddings)
    kvc, sched = config.kv_cache, config.scheduler
    budget = kv_budget(
        model, hardware, tensor_parallel=config.cluster.tensor_parallel, weight_dtype=config.dtype,
        kv_dtype_name=kv_dtype(kvc.dtype, config.dtype), gpu_memory_utilization=kvc.gpu_memory_utilization,
        block_size=kvc.block_size, max_num_batched_tokens=budget_tokens, max_num_seqs=sched.max_num_seqs,
        max_model_len=max_len, num_blocks_override=kvc.num_gpu_blocks,
    )
    kv = PagedAllocator(budget.num_blocks, budget.block_size)
    workload = generate_requests(config.workload, np.random.SeedSequence(config.seed))
    arrivals, inputs, outputs = (column.tolist() for column in workload[:3])
    n = len(arrivals)
    first_token, finish = [math.nan] * n, [math.nan] * n
    generated = [0] * n
    finish_clock = [-1] * n
    gen_offset = [0] * n
    waiting: deque[int] = deque()
    decoding: dict[int, None] = {}
    finishes: list[tuple[int, int]] = []
    clock = 0
    events = [(arrivals[i], ARRIVAL, i) for i in range(n)]
    heapq.heapify(events)
    busy, token = False, 0  # token: id of the boundary event that is current
    run = None  # (start, a, c, B, S0, steps, prefills)

    watermark = int(sched.watermark * kv.num_blocks)

    def fits(tokens: int, running: bool) -> bool:
        """Room for the prompt beside the decodes' next step, leaving the watermark free while others run."""
        if running and kv.free_blocks - -(-tokens // kv.block_size) < watermark:
            return False
        return kv.can_allocate(tokens, reserve_growth=bool(decoding))

    def admissible(i: int) -> bool:
        tokens = inputs[i] + generated[i]
        return len(decoding) < sched.max_num_seqs and tokens <= budget_tokens and fits(tokens, bool(decoding))

    def begin(now: float) -> None:
        nonlocal busy, token, run
        prefills, budget_left = [], budget_tokens
        while waiting and len(decoding) + len(prefills) < sched.max_num_seqs:
            i = waiting[0]
            tokens = inputs[i] + generated[i]
            if tokens > budget_left or not fits(tokens, bool(decoding or prefills)):
                break
            waiting.popleft()
            kv.allocate(i, tokens)
            prefills.append(i)
            budget_left -= tokens
        token += 1
        if prefills:
            duration = cost.iteration_time(IterationShape(tuple((inputs[i] + generated[i], 0) for i in prefills)))
            run = (now, 0.0, 0.0, 0, 0, 1, prefills)
            heapq.heappush(events, (now + duration, BOUNDARY, token))
            return
        if not decoding:
            busy, run = False, None
            return
        while not kv.can_grow_one():
            victim = max(decoding, key=lambda j: (arrivals[j], j))
            generated[victim] = gen_offset[victim] + clock
            finish_clock[victim] = -1
            del decoding[victim]
            kv.free(victim)
            waiting.appendleft(victim)
        size, s0 = kv.num_growing, kv.growing_tokens + kv.num_growing
        a, c = cost.decode_step_coefficients(size)
        while finish_clock[finishes[0][1]] != finishes[0][0]:
            heapq.heappop(finishes)
        steps = kv.max_grow(finishes[0][0] - clock)
        run = (now, a, c, size, s0, steps, None)
        heapq.heappush(events, (now + steps * a + c * (steps * s0 + size * steps * (steps - 1) / 2), BOUNDARY, token))

    while events:
        now, kind, ident = heapq.heappop(events)
        if kind == ARRIVAL:
            i = ident
            if inputs[i] + outputs[i] > max_len or not kv.can_ever_fit(inputs[i] + outputs[i] - 1):
                continue
            waiting.append(i)
            if not busy:
                busy = True
                begin(now)
            elif run[6] is None and run[5] > 1 and admissible(waiting[0]):
                start, a, c, size, s0, steps, _ = run
                k = 1
                while k < steps and k * a + c * (k * s0 + size * k * (k - 1) / 2) < now - start:
                    k += 1
                if k < steps:
                    token += 1
                    run = (start, a, c, size, s0, k, None)
                    heapq.heappush(events, (start + k * a + c * (k * s0 + size * k * (k - 1) / 2), BOUNDARY, token))
            continue
        if ident != token:
            continue  # superseded by a cut
        start, a, c, size, s0, steps, prefills = run
        if prefills is None:
            kv.grow(steps)
            clock += steps
            while finishes and finishes[0][0] <= clock:
                fc, i = heapq.heappop(finishes)
                if finish_clock[i] == fc:
                    finish_clock[i] = -1
                    del decoding[i]
                    kv.free(i)
                    finish[i] = now
        else:
            for i in prefills:
                generated[i] += 1
                if generated[i] == 1:
                    first_token[i] = now
                if generated[i] == outputs[i]:
                    kv.free(i)
                    finish[i] = now
                else:
                    kv.start_growing(i)
                    gen_offset[i] = generated[i] - clock
                    finish_clock[i] = clock + outputs[i] - generated[i]
                    decoding[i] = None
                    heapq.heappush(finishes, (finish_clock[i], i))
        begin(now)
    return np.asarray(first_token), np.asarray(finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=None, help="requests/s (default: 80%% of capacity)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import LOAD, capacity, scenario

    rate = args.rate or LOAD * capacity()
    config = simulator.load(scenario(1, args.requests, rate))
    start = time.perf_counter()
    _, finish = reference_run(config)
    reference = time.perf_counter() - start
    start = time.perf_counter()
    result = simulator.run(config)
    engine = time.perf_counter() - start
    same = np.allclose(result.requests["finish_s"], finish, rtol=1e-9, equal_nan=True)
    print(f"scenario (a), {args.requests:,} requests at {rate:.2f} req/s")
    print(f"  reference loop: {reference:.2f} s ({args.requests / reference:,.0f} req/s)")
    print(f"  llmsim engine:  {engine:.2f} s ({args.requests / engine:,.0f} req/s), "
          f"{engine / reference:.2f}x the reference; same finish times: {same}")


if __name__ == "__main__":
    main()
