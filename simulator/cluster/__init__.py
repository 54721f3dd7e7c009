"""The SimPy side: replicas, routers, and the simulation that wires them to a workload."""

from simulator.cluster.simulation import SimulationOutput, simulate

__all__ = ["SimulationOutput", "simulate"]
