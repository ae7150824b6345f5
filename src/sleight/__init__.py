"""sleight: does what a language model registers match what an evaluation reads or the model says?

Two instruments over one model layer:

* :mod:`sleight.tamper` -- Sleight of Word, swapping a word of the model's own reply while it writes;
* :mod:`sleight.readout` -- the readout audit of constrained-option scores;

both built on :mod:`sleight.backends`, which reads a model's whole next-token distribution.
"""

import os

# torch's OpenMP workers spin while they wait, holding cores that a second job on the same machine
# needs; PASSIVE lets them sleep. What was measured with each policy, alone and beside a second job,
# is in docs/results.md ("Threads and the OpenMP wait policy"). libgomp reads this once, when torch
# loads, so it is set here, before any sleight module imports torch. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from sleight.errors import UserError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["UserError", "__version__"]
