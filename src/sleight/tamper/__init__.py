"""Sleight of Word (``sleight tamper``): swap a word of the model's own reply while it writes.

Pure parts: :mod:`~sleight.tamper.trigger` (detection and surgery), :mod:`~sleight.tamper.signals`
(Δ surprisal/entropy), :mod:`~sleight.tamper.records` (table schemas). Decoding:
:mod:`~sleight.tamper.engine` (clean run + one forked lockstep batch per question) and
:mod:`~sleight.tamper.two_phase` (decide the tokens, then score them once). I/O and orchestration:
:mod:`~sleight.tamper.data`, :mod:`~sleight.tamper.store`, :mod:`~sleight.tamper.runner`,
:mod:`~sleight.tamper.sweep`. Inside: :mod:`~sleight.tamper.jury` (the judges) and
:mod:`~sleight.tamper.report` (tables, plots, site). :mod:`~sleight.tamper.reference` is the test
oracle (the naive generate-cut-splice loop).

May import: ``sleight.backends``, ``sleight.position``, ``sleight.jury``, ``sleight.rundir``,
``sleight.progress``, ``sleight.stats``, ``sleight.errors``. Never ``sleight.readout`` or ``sleight.cli``.
Imports stay lazy: ``import sleight.tamper`` loads no model code.
"""
