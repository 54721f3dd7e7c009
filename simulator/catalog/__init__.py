"""Catalogs of hardware and models: built-in entries with sources, or user files given by path."""

from simulator.catalog.hardware import HardwareSpec, hardware_names, load_hardware, resolve_hardware
from simulator.catalog.models import ModelSpec, load_model, model_names

__all__ = [
    "HardwareSpec", "ModelSpec", "hardware_names", "load_hardware", "load_model", "model_names", "resolve_hardware",
]
