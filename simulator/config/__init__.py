"""Experiment configuration: validated models, YAML loading and overrides."""

from simulator.config.experiment import ExperimentConfig
from simulator.config.loader import DEFAULT_EXPERIMENT, apply_overrides, load_experiment

__all__ = ["DEFAULT_EXPERIMENT", "ExperimentConfig", "apply_overrides", "load_experiment"]
