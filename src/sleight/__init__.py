"""sleight: does what a language model registers match what an evaluation reads or the model says?

Two instruments over one model layer:

* :mod:`sleight.tamper` -- Sleight of Word, swapping a word of the model's own reply while it writes;
* :mod:`sleight.readout` -- the readout audit of constrained-option scores;

both built on :mod:`sleight.backends`, which reads a model's whole next-token distribution.
"""

import os
from collections.abc import MutableMapping

# torch's OpenMP workers (libgomp) spin while they wait, holding cores that a second job on the same
# machine needs; PASSIVE lets them sleep. A worker that sleeps at once, though, is woken again for
# each of the hundreds of small parallel regions of a decode step (~0.1 ms a wake-up on 2 cores), so
# under PASSIVE sleight keeps a bounded spin (GOMP_SPINCOUNT, which libgomp honours over the policy):
# awake across the gaps between one op and the next, asleep across another job's turn. Both measured,
# alone and beside a second job, in docs/results.md ("Threads and the OpenMP wait policy"). libgomp
# reads these once, when torch loads, so they are set here, before any sleight module imports torch.
# A user's own settings win (a policy of theirs gets no spin count of ours).
OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}


def set_openmp_env(environ: MutableMapping[str, str]) -> None:
    """Fill ``environ`` with :data:`OPENMP_ENV` where the user left it unset (the spin count only
    under a passive policy)."""
    environ.setdefault("OMP_WAIT_POLICY", OPENMP_ENV["OMP_WAIT_POLICY"])
    if environ["OMP_WAIT_POLICY"].upper() == "PASSIVE":
        environ.setdefault("GOMP_SPINCOUNT", OPENMP_ENV["GOMP_SPINCOUNT"])


set_openmp_env(os.environ)

from sleight.errors import UserError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["OPENMP_ENV", "UserError", "__version__", "set_openmp_env"]
