"""Fidelity: predicted against measured, one module per data family, and the fitting that uses them.

- :mod:`.operators`: per-layer GEMM timings (``calibration/a100_ops``)
- :mod:`.network`: NCCL timings of A100 nodes (``network/``)
- :mod:`.splitwise`: whole-model iterations (``calibration/splitwise_a100_iterations.csv``)
- :mod:`.kernels`: the frameworks' per-kernel tables (``kernels/<system>/``: GEMM, attention, MLA, MoE, NCCL,
  custom all-reduce, DeepEP)
- :mod:`.silicon`: real end-to-end serving benchmarks (``silicon/``; ``llmsim validate --runs``); :mod:`.clients`
  the benchmark clients their rows may come from, :mod:`.split` their fit and held-out halves (copies of one run
  kept together)
- :mod:`.systems`: the data's system names (silicon rows, kernel folders) and the hardware profile of each
- :mod:`.errors`: the error measures every report uses
- :mod:`.report`: ``llmsim validate`` over all of them
- :mod:`.calibrate`: ``llmsim calibrate`` (fit a hardware profile's physical parameters); :mod:`.kernel_fit` the
  fits on the kernel tables (per generation, and each framework's own kernels; the attention kernels' in
  :mod:`.attention_fit`), :mod:`.engine_fit` an engine profile's fixed costs on its silicon rows
- :mod:`.steptime`: ``llmsim steptime`` (predicted iteration times per operator group)
"""
