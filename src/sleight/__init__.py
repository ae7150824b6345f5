"""sleight: does what a language model registers match what an evaluation reads or the model says?

Two instruments over one model layer:

* :mod:`sleight.tamper` -- Sleight of Word, swapping a word of the model's own reply while it writes;
* :mod:`sleight.readout` -- the readout audit of constrained-option scores;

both built on :mod:`sleight.backends`, which reads a model's whole next-token distribution.
"""

from sleight.errors import UserError

__version__ = "0.1.0"

__all__ = ["UserError", "__version__"]
