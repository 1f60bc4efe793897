"""simcoll: a discrete-event simulator of GPU collective communication.

Topologies are networkx graphs, collective algorithms are schedules (frozen data), and
a SimPy engine runs a schedule on a topology with max-min fair sharing of every link.

>>> import simcoll
>>> topo = simcoll.load_topology("topologies/dgx-h100.toml")
>>> schedule = simcoll.build_schedule("allreduce", "ring", n_ranks=8, size_bytes=2**30)
>>> result = simcoll.simulate(topo, schedule)
>>> # 14 steps of (1 us route latency + 2**30 / 8 B at 450 GB/s): busbw 448.5 GB/s
>>> round(result.busbw_bytes_per_s / 1e9, 1)
448.5
"""

from simcoll.algorithms import build_schedule
from simcoll.calibrate.measurements import (
    Measurement,
    MeasurementSet,
    MeasurementWriter,
)
from simcoll.calibrate.read import read_measurements
from simcoll.core.checks import check_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import (
    ConfigError,
    ScheduleError,
    SimcollError,
    SimulationError,
    TopologyError,
    UnitError,
)
from simcoll.core.schedule import Op, Schedule, ScheduleBuilder, Transfer
from simcoll.output.results import Row
from simcoll.prediction.pipeline import predict
from simcoll.scenarios.api import run_scenario
from simcoll.sim.engine import SimulationResult, simulate
from simcoll.topology import load as load_topology

__all__ = [
    "Collective",
    "ConfigError",
    "Measurement",
    "MeasurementSet",
    "MeasurementWriter",
    "Op",
    "Row",
    "Schedule",
    "ScheduleBuilder",
    "ScheduleError",
    "SimcollError",
    "SimulationError",
    "SimulationResult",
    "TopologyError",
    "Transfer",
    "UnitError",
    "build_schedule",
    "check_schedule",
    "load_topology",
    "predict",
    "read_measurements",
    "run_scenario",
    "simulate",
]
__version__ = "0.1.0"
