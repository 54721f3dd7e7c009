"""What things are: GPUs (hardware profiles and their generation fits), models (layer-group specs, Hugging Face
import) and serving-engine profiles; built-in entries with sources, or user files given by path."""

from simulator.catalog.engines import EngineProfile, load_engine
from simulator.catalog.hardware import HardwareSpec, hardware_names, load_hardware, resolve_hardware
from simulator.catalog.model_spec import ModelSpec
from simulator.catalog.models import load_model, model_names

__all__ = [
    "EngineProfile", "HardwareSpec", "ModelSpec", "hardware_names", "load_engine", "load_hardware", "load_model",
    "model_names", "resolve_hardware",
]
