"""The ``energy:`` section: what the GPUs' energy (:mod:`simulator.results.energy`) is scaled and priced by."""

from __future__ import annotations

from pydantic import Field

from simulator.config.base import Strict


class EnergyConfig(Strict):
    """The facility around the GPUs: ``pue`` (power usage effectiveness: the facility's energy over its IT
    equipment's; 1.0, the default, counts the GPUs alone) multiplies every energy figure, and ``usd_per_kwh``, when
    given, prices it (``energy_usd``)."""

    pue: float = Field(default=1.0, ge=1, le=5, description="power usage effectiveness: facility energy / GPU "
                       "energy, dimensionless (1.0: the GPUs alone; hyperscale data centres report 1.1-1.2)")
    usd_per_kwh: float | None = Field(default=None, ge=0, description="electricity price, US dollars per "
                                      "kilowatt-hour; unset: no energy_usd")
