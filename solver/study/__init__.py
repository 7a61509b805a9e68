"""Offline studies: I/O and tooling around the solver (never imported by it).

* :mod:`~seqpart.solver.study.runner`: the resumable, parallel task engine (``results.jsonl``).
  :mod:`~seqpart.solver.study.ray_executor`: its executor on a Ray cluster (the ``ray`` extra).
* :mod:`~seqpart.solver.study.methods`: the method study (``seqpart study``).
* :mod:`~seqpart.solver.study.step_study`: the step study (``seqpart step``);
  :mod:`~seqpart.solver.study.step_data`: the step on a user's lengths (``seqpart step --data``);
  :mod:`~seqpart.solver.study.step_cli`: their command line.
* :mod:`~seqpart.solver.study.datasets`: the bundled real lengths and generated RL batches.
* :mod:`~seqpart.solver.study.readers`: reading a user's lengths from any file (JSON, JSONL,
  CSV, parquet, saved Hugging Face datasets), one entry point for every command.
* :mod:`~seqpart.solver.study.plots`: the studies' figures (matplotlib, the ``plot`` extra).
* :mod:`~seqpart.solver.study.repro`: the trainers' failures, reproduced (``seqpart repro``).
"""
