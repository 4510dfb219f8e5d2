"""Executors: where a sweep's cells run — here one after another, or spread over a cluster.

``local`` is the runner as it always was: each cell a fresh worker process on
this machine, one after another.  ``ray`` submits each cell as a task to a
Ray cluster and ``slurm`` as a job through submitit; on the node, the task
or job starts the very same worker process (:func:`.node.run_cell_on_node`),
with the same timeout, statuses and containment.  In every executor the host
that planned the sweep is the only writer of ``results.jsonl``: it appends
each result as it comes back, and ``--resume`` skips the finished cells the
sweep decided to keep before any ran (:func:`amp_suite.sweep.fingerprint.kept_results`).

Nothing here imports Ray or submitit until that executor runs.  Which executor
runs a sweep is chosen by :mod:`.select` (``run_cells``); the local one is
:func:`amp_suite.sweep.runner.iter_sweep`, the cluster ones share
:mod:`.remote` over a scheduler each (:mod:`.ray_scheduler`, :mod:`.slurm_scheduler`).
"""
