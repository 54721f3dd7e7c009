"""Fidelity: predicted against measured, one module per data family, and the fitting that uses them.

- :mod:`.operators`: per-layer GEMM timings (``calibration/a100_ops``)
- :mod:`.network`: NCCL timings of A100 nodes (``network/``)
- :mod:`.splitwise`: whole-model iterations (``calibration/splitwise_a100_iterations.csv``)
- :mod:`.report`: ``llmsim validate`` over all of them
- :mod:`.calibrate`: ``llmsim calibrate`` (fit a hardware profile's physical parameters)
- :mod:`.steptime`: ``llmsim steptime`` (predicted iteration times per operator group)
"""
