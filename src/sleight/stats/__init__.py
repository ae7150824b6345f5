"""Statistics for comparing readouts: discrimination, calibration, rejection,
agreement, and (cluster, paired) bootstrap intervals.

Pure numpy functions; nothing here holds state or prints.  Every metric takes
an optional ``weights`` count matrix so the bootstrap can evaluate thousands
of replicates in one vectorised call (see :mod:`sleight.stats.bootstrap`).

May import: nothing of sleight outside ``sleight.stats``.
"""

from sleight.stats.bootstrap import (
    BatchedStat,
    BootstrapCI,
    PairedBootstrap,
    Resample,
    bootstrap_ci,
    gathered,
    paired_bootstrap,
    resample,
)
from sleight.stats.metrics import (
    auroc,
    average_ranks,
    brier,
    cohen_kappa,
    fleiss_kappa,
    mean,
    prr,
)

__all__ = [
    "BatchedStat",
    "BootstrapCI",
    "PairedBootstrap",
    "Resample",
    "auroc",
    "average_ranks",
    "bootstrap_ci",
    "brier",
    "cohen_kappa",
    "fleiss_kappa",
    "gathered",
    "mean",
    "paired_bootstrap",
    "prr",
    "resample",
]
