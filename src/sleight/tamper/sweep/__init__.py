"""``sleight tamper sweep``: many models (and shards of each) as typed jobs, on Ray or one after another,
then the jury and the report. One job a module:

- :mod:`~sleight.tamper.sweep.config`: the sweep file checked into typed values (a ``ModelSpec`` per model);
- :mod:`~sleight.tamper.sweep.plan`: one :class:`~sleight.tamper.job.TamperJob` per (subject, shard);
- :mod:`~sleight.tamper.sweep.memory`: the dry run's memory plan and cost model;
- :mod:`~sleight.tamper.sweep.execute`: running the tasks (in process or on Ray), progress read from disk;
- :mod:`~sleight.tamper.sweep.judging`: the file's jury over the subjects' runs.
"""
