"""A long run's progress bar (``llmsim run`` of 100,000 requests or more, on a terminal): a wakeup every 1/200 of
the arrivals' span of simulated time sets the bar to the requests ended so far; it changes nothing the run
computes (same events in the same order, plus these), and stops once every request has ended."""

from __future__ import annotations

import math

import simpy

from simulator.cluster.wakeup import Wakeup
from simulator.results.recorder import Recorder

LONG_RUN = 100_000  # requests from which ``llmsim run`` shows a bar


class ProgressTicks:
    def __init__(self, env: simpy.Environment, recorder: Recorder, total: int, span_s: float, bar) -> None:
        self.recorder, self.total, self.bar, self._shown = recorder, total, bar, 0
        self.interval = span_s / 200 if math.isfinite(span_s) and span_s > 0 else 1.0
        self._wakeup = Wakeup(env, self._tick)
        self._wakeup.schedule(self.interval)

    def _tick(self, _event) -> None:
        ended = self.recorder.requests.num_rows
        self.bar.update(ended - self._shown)
        self._shown = ended
        if ended < self.total:
            self._wakeup.schedule(self.interval)
        else:
            self.bar.close()
