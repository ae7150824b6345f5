"""Sleight of Word (``sleight tamper``): swap a word of the model's own reply while it writes.

Modules: :mod:`~sleight.tamper.data` (questions, substitutes), :mod:`~sleight.tamper.trigger`
(detection and surgery), :mod:`~sleight.tamper.engine` (clean run + forked batch),
:mod:`~sleight.tamper.signals` (Δ surprisal/entropy), :mod:`~sleight.tamper.records` (table schema),
:mod:`~sleight.tamper.store` (run directory; ``load_trials``/``load_clean``),
:mod:`~sleight.tamper.runner` (``run_tamper``, the CLI's sweep). Imports stay lazy: ``import
sleight.tamper`` loads no model code.
"""
