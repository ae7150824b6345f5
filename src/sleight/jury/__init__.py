"""The jury machinery every instrument shares (SPEC §3.4, §4.2).

What a juror fills in (:mod:`~sleight.jury.ballot`), how it is asked -- label slots on a local
model, a JSON-schema ``response_format`` or free text on a server (:mod:`~sleight.jury.cast`,
:mod:`~sleight.jury.slots`) --, keyed resumable storage of the votes (:mod:`~sleight.jury.store`),
and majority and agreement (:mod:`~sleight.jury.verdict`). The tamper jury and the readout judge
both use it; neither instrument imports the other.

May import: ``sleight.backends``, ``sleight.position``, ``sleight.rundir``, ``sleight.progress``,
``sleight.stats``, ``sleight.errors``. Never an instrument or ``sleight.cli``.
"""
