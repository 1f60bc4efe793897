"""Figures (PNG). The only package that imports matplotlib, lazily, with the Agg backend.

- :mod:`~simcoll.output.plot.size`: bus bandwidth against message size, measured beside simulated;
- :mod:`~simcoll.output.plot.sweep`: scaling with the number of ranks, the algorithm crossover map;
- :mod:`~simcoll.output.plot.metric`: any result column against any sweep axis;
- :mod:`~simcoll.output.plot.breakdown`: where each point's training step went, stacked;
- :mod:`~simcoll.output.plot.timeline`: a workload's Gantt chart, link utilisation (total,
  over time);
- :mod:`~simcoll.output.plot.topology`: a cluster drawn in layers.

Every function writes a PNG at ``path`` (creating parent folders), returns the path, and
closes its figure. Bandwidths are in GB/s, 10^9 bytes per second, as nccl-tests prints
them; sizes have binary prefixes (KiB, MiB, GiB).
"""

from simcoll.output.plot._axes import PNG_MARK
from simcoll.output.plot.breakdown import BREAKDOWN_PARTS, plot_breakdown
from simcoll.output.plot.metric import plot_metric
from simcoll.output.plot.size import Y_VALUES, plot_busbw_vs_size, plot_comparison, plot_vs_size
from simcoll.output.plot.sweep import Crossover, fastest_by_cell, plot_crossover, plot_scaling
from simcoll.output.plot.timeline import plot_gantt, plot_link_heatmap, plot_link_utilisation
from simcoll.output.plot.topology import MAX_LABELLED_PER_LAYER, plot_topology

__all__ = [
    "BREAKDOWN_PARTS",
    "MAX_LABELLED_PER_LAYER",
    "PNG_MARK",
    "Y_VALUES",
    "Crossover",
    "fastest_by_cell",
    "plot_breakdown",
    "plot_busbw_vs_size",
    "plot_comparison",
    "plot_crossover",
    "plot_gantt",
    "plot_link_heatmap",
    "plot_link_utilisation",
    "plot_metric",
    "plot_scaling",
    "plot_topology",
    "plot_vs_size",
]
