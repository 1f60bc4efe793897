"""A training step on a cluster design: the model, its parallel layout, and the step.

Pure layers, each a short module: :mod:`~simcoll.training.spec` (what the user describes:
a transformer, its training and its parallelism), :mod:`~simcoll.training.flops` and
:mod:`~simcoll.training.compute` (each kernel's FLOPs, bytes and shape, and its time on
the topology's GPU from measured throughput: :mod:`~simcoll.training.gemm`,
:mod:`~simcoll.training.attention`), :mod:`~simcoll.training.search` (the layouts to try),
:mod:`~simcoll.training.hf_config` (a Hugging Face ``config.json`` read as a model),
:mod:`~simcoll.training.memory` (memory per GPU),
:mod:`~simcoll.training.layout` (the parallel groups and pipeline orders), and
:mod:`~simcoll.training.step`, which records the step in one
:class:`~simcoll.prediction.session.Session`: every collective on the one path ``predict``
runs. :mod:`~simcoll.training.trace` replays a recorded PyTorch step instead.
"""

from simcoll.training.compute import Efficiency
from simcoll.training.flops import matmul_params, model_flops_per_token, n_params
from simcoll.training.hf_config import read_hf_config
from simcoll.training.memory import MemoryPerGpu, memory_per_gpu, zero_model_state_bytes
from simcoll.training.spec import Parallelism, Training, Transformer, read_model_file
from simcoll.training.step import StepResult, StepTimes, training_step
from simcoll.training.trace import (
    ExecutionTrace,
    KinetoTrace,
    ReplayResult,
    read_execution_trace,
    read_kineto_durations,
    replay,
)

__all__ = [
    "Efficiency",
    "ExecutionTrace",
    "KinetoTrace",
    "MemoryPerGpu",
    "Parallelism",
    "ReplayResult",
    "StepResult",
    "StepTimes",
    "Training",
    "Transformer",
    "matmul_params",
    "memory_per_gpu",
    "model_flops_per_token",
    "n_params",
    "read_execution_trace",
    "read_hf_config",
    "read_kineto_durations",
    "read_model_file",
    "replay",
    "training_step",
    "zero_model_state_bytes",
]
