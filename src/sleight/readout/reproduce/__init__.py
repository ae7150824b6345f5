"""The paper's tables, one command each (``sleight readout reproduce TABLE``).

:mod:`.config` reads a table's shipped YAML (``src/sleight/data/tables/``: checkpoints, runs, columns,
averages, the paper's numbers where known); :mod:`.runner` runs every checkpoint's readout runs
(resuming), each through its kind (:mod:`.kinds`, one module a kind), and writes the table; :mod:`.aggregate`
computes its cells on bootstrap replicates shared by the checkpoints (pure); :mod:`.writers` renders
it as Markdown, CSV and LaTeX (pure).

May import what :mod:`sleight.readout` may.
"""

from sleight.readout.reproduce.config import TableConfig, load_table, shipped_tables
from sleight.readout.reproduce.runner import ModelCache, ReproduceResult, reproduce

__all__ = ["ModelCache", "ReproduceResult", "TableConfig", "load_table", "reproduce", "shipped_tables"]
