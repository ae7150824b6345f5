"""Time the bootstrap: B = 20,000 replicates of AUROC over 500 items.

Run:  python benchmarks/stats.py [--B 20000] [--n 500] [--repeats 5]

Prints the best wall time of a few repeats for each case, so a slow first call
(imports, allocator warm-up) or a busy machine does not inflate the figure.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from sleight.stats import auroc, bootstrap_ci, gathered, paired_bootstrap, prr


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--B", type=int, default=20000)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--clusters", type=int, default=100, help="number of clusters (unequal sizes)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    n, B = args.n, args.B
    labels = rng.integers(0, 2, n)
    scores_a = labels * 0.8 + rng.normal(size=n)
    scores_b = scores_a + rng.normal(0.0, 0.5, n)
    # unequal cluster sizes: Dirichlet shares of the n items
    clusters = rng.choice(args.clusters, size=n, p=rng.dirichlet(np.ones(args.clusters)))
    quality = rng.random(n)

    cases: list[tuple[str, Callable[[], object]]] = [
        ("bootstrap_ci(auroc), items", lambda: bootstrap_ci(auroc, scores_a, labels, B=B)),
        ("bootstrap_ci(auroc), clusters", lambda: bootstrap_ci(auroc, scores_a, labels, B=B, clusters=clusters)),
        ("paired_bootstrap(auroc), items", lambda: paired_bootstrap(auroc, (scores_a, labels), (scores_b, labels), B=B)),
        (
            "paired_bootstrap(auroc), clusters",
            lambda: paired_bootstrap(auroc, (scores_a, labels), (scores_b, labels), B=B, clusters=clusters),
        ),
        ("bootstrap_ci(prr), items", lambda: bootstrap_ci(prr, scores_a, quality, B=B)),
        ("bootstrap_ci(gathered(auroc)), items [argsort path]", lambda: bootstrap_ci(gathered(auroc), scores_a, labels, B=B)),
    ]
    n_groups = np.unique(clusters).size
    print(f"B = {B} replicates, n = {n} items, {n_groups} clusters (largest {np.bincount(clusters).max()} items), best of {args.repeats}")
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    for name, fn in cases:
        print(f"  {name:<55s} {best_of(fn, args.repeats) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
