"""The engines behind :func:`seqpart.solver.partition`: each proves or improves one plan.

* :mod:`~seqpart.solver.engines.cpsat`: the CP-SAT model of the capped split (OR-Tools).
* :mod:`~seqpart.solver.engines.lp_bound`: the Gilmore-Gomory LP bound by column generation.
* :mod:`~seqpart.solver.engines.count_lp` and :mod:`~seqpart.solver.engines.count_search`:
  the smallest count under a cap (``k=None``): the same LP over item types, waste-limited,
  as a proven bound, and an LP-guided dive with exact repacking of the last items.
* :mod:`~seqpart.solver.engines.branch_bound`: the exact branch-and-bound search and the dive.
* :mod:`~seqpart.solver.engines.prove`: the proof phase that runs them in order.
* :mod:`~seqpart.solver.engines.budget_costs`: what each step costs, so a work budget can be split.
* :mod:`~seqpart.solver.engines.interrupt`: a Ctrl-C stops a long CP-SAT solve at once.

Users call :func:`~seqpart.solver.partition`, which picks and runs these within its time limit.
"""
