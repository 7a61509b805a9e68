"""The one table of seqpart's tuned shares and rates.

Every ``*_SHARE``, ``*_RATE``, ``*_PER_SECOND`` and ``*_SECONDS_PER_*`` constant of the package
is defined here and nowhere else (``tests/solver/test_tuning.py`` fails otherwise); the modules
that use them import them from here. Grouped by the part that uses them, each with what it is,
how it was measured and on which machine.

What the figures do:

- They decide how a time limit is split: a *share* is the part of the limit (or of a work
  budget) one phase may take; a *rate* (``*_PER_SECOND``) turns seconds into counted work
  (candidates, nodes, LP cells); a wall-time estimate (``*_SECONDS_PER_*``) says what a piece of
  work costs, so that it is begun only when it fits.
- They were measured on the 2-core benchmark machine (idle or at the load each comment quotes).
  Most sit near the slow end of what was measured (a charge near a step's 90th percentile, a
  conservative rate), so that a call ends within its limit rather than past it.
- Repeatable plans (``SolverOptions(deterministic=True)``) depend on them, never on the clock:
  given the input and the time limit, the rates turn the limit into counted work, partition's
  per-item charges say what each step costs of it and the shares split it, so the same call
  gives the same plan on any machine. Step planning's wall-time figures only decide what the
  clock allows in clock timing and never reach a repeatable plan. So a changed figure can change
  repeatable plans: compare the plans before and after, as CONTRIBUTING.md says.

To re-measure, run the benchmark a comment names, from the repository root, and quote the load
(``uptime``) with the figure: ``python benchmarks/bench_budget.py`` times each step of
``partition`` against its charge; ``python benchmarks/bench_scale.py --calibrate`` prints the
per-item costs of the fallbacks; ``python benchmarks/bench_binpack.py`` runs the count search's
instances; ``python benchmarks/bench_cpsat.py`` and ``bench_cpsat_sweep.py`` time CP-SAT's
limits; ``bench_step.py`` and ``bench_step_cluster.py`` plan_step's, ``bench_dynamic_cp.py``
plan_cp_step's.

This module imports nothing from seqpart: it sits below every other solver module.
"""

from __future__ import annotations

from typing import Final

# --- partition's budget: estimated seconds per step, per item (engines/budget_costs.py) -------

#: Costs used to split the budget, in seconds per item. They are meant for an idle 2-core
#: machine and were measured inside ``partition`` on bench_cpsat's online batches, tokens and
#: attention cost, each step timed against its charge (``python benchmarks/bench_budget.py``).
#: A charge is set near the step's 90th percentile, not its median: a step that runs over its
#: charge pushes the wall clock past the budget, and the safety net's cut makes the plan
#: unrepeatable. KK (its loop sped up ~40% since): 3.0 us/item p50, 4.3 p90 alone (n=1024-2048,
#: k=20-736, CPU time); in partition the p90 of real/charged was 0.92-1.06 at this figure.
KK_SECONDS_PER_ITEM: Final[float] = 4.3e-6
#: Karmarkar-Karp's lone merges copy a state of up to k subsets: at large n its cost per item
#: grows with k (measured at load ~1: 30 us/item at n=10^5, k=2483; 12 at k=300; 7-8.5 at
#: n=2048, k=64-512, where the term is damped). It once took 3.2 s under a 1 s limit.
KK_SECONDS_PER_ITEM_BIN: Final[float] = 8e-9
#: Karmarkar-Karp is planned only when its estimate is under this share of the limit (set by
#: hand).
KK_SHARE: Final[float] = 0.75
#: LPT: a heap of k bins, so log2(k) per item on top of a fixed per-item cost (measured in
#: partition at n=2048: 3 ms at k=40, 4-5 ms at k=700; it was charged 3 ms flat). p90 of
#: real/charged 1.1-1.4 at n=256-2048 with 0.9 us; hence 1.05.
LPT_SECONDS_PER_ITEM: Final[float] = 1.05e-6
#: LPT's cost per item and per bit of k (the heap's log2(k)), measured with the figure above.
LPT_SECONDS_PER_ITEM_LOG_BIN: Final[float] = 0.09e-6
#: LPT and the capped balancer with a cost that is not the token count keep two totals per
#: bin (cost balanced, tokens capped): measured 1.8-2.5x their token-only cost inside
#: partition (attention cost, n=1024-2048, k=246-492).
TWO_TOTALS_FACTOR: Final[float] = 2.0
#: The bin-packing load bound: a binary search over [lo, hi], one Martello-Toth L2 per step,
#: each 35-95 us of numpy calls plus ~0.11 us per item (measured at n=64..10^4); the fixed
#: part is set at its p90 inside partition. Charged per item alone, it cost 10x its charge on
#: small batches with attention costs (wide ranges, many steps).
PACKING_BOUND_SECONDS_PER_STEP: Final[float] = 120e-6
#: The packing bound's cost per item of each L2 step (measured with the figure above).
PACKING_BOUND_SECONDS_PER_ITEM_STEP: Final[float] = 0.08e-6
#: The packing bound's sort, per item, before its first step (measured with the figures above).
PACKING_BOUND_SORT_SECONDS_PER_ITEM: Final[float] = 0.1e-6
#: The capped balancer (best fit, first fit, repair; LPT comes from step 1) on the tight-cap
#: batch: 1.3 us/item with LPT's plan given, 2.4 with its own LPT (bench_scale
#: --calibrate, CPU, best of 3, load ~2; 2.0 and 3.1-5.1 before best fit's loop was written
#: out; 7-8 us/item before best fit was grouped).
CAPPED_BALANCE_SECONDS_PER_ITEM: Final[float] = 2e-6
#: Best fit decreasing into k bins and refilling empty ones: the fallback above
#: CAPPED_BALANCE_UP_TO items, where the capped balancer's first fit and repair are too slow.
#: Measured 0.34-0.46 us/item at n=10^5, 0.44-0.81 at 10^4, 0.64-0.94 at 2048 (load ~2; it
#: was 0.46-0.52 at 10^5 and twice this at 10^6 before its loop was written out).
PACK_SECONDS_PER_ITEM: Final[float] = 1.0e-6
#: First fit decreasing with the max-tree: 0.66-1.70 us/item at n=2048-10^5 (bench_scale
#: --calibrate, load ~2.8; 0.79-1.84 at load ~2 before its tree updates stopped at the first
#: unchanged ancestor, which halved it at n=10^5-10^6).
FFD_SECONDS_PER_ITEM: Final[float] = 1.5e-6
#: Building local search's state (arrays, item types) before its first step (set by hand).
SEARCH_SETUP_SECONDS_PER_ITEM: Final[float] = 1.5e-6
#: Checking the input, merging items, the bounds, and checking and assembling the plan:
#: 0.23-0.53 us/item measured at n=2048-10^5 (load ~2; 0.30-0.42 before the plan's assembly
#: was vectorised), kept above for the offers' checks and the count bound.
FIXED_SECONDS_PER_ITEM: Final[float] = 0.75e-6

# --- partition's heuristic phase (engines/heuristic_phase.py, engines/resplit.py) -------------

#: Most of the time limit the exchanges may take (measured: ~0.25 s to converge on a
#: 500-sequence attention batch at its smallest count).
EXCHANGE_SHARE: Final[float] = 0.3
#: The subset-sum dive's share of the time limit in the heuristics, before local search (set by
#: hand; ``DIVE_PROOF_SHARE`` is its share in the proof phase).
HEURISTIC_DIVE_SHARE: Final[float] = 0.25
#: Subsets scored per second (measured 2-6M on a loaded 2-core machine), for budgets by time.
SUBSETS_PER_SECOND: Final[int] = 4_000_000
#: Candidate exchanges scored per second (numpy, about ten array passes per candidate).
EXCHANGES_PER_SECOND: Final[int] = 40_000_000
#: Most of the time limit one call of ``improve_by_groups`` may take (3-8 ms on the
#: adversarial batches of 24-32 sequences, where it ends within 0.03% of the optimum).
GROUP_SHARE: Final[float] = 0.25

# --- the proof phase (engines/prove.py, engines/lp_bound.py, engines/load_search.py) ----------

#: Measured throughput on a 2-core machine: LP work units (pricing table cells, plus a fixed
#: charge per LP solve) per second.
LP_WORK_PER_SECOND: Final[int] = 250_000_000
#: Measured throughput on a 2-core machine: exact-search nodes per second.
EXACT_NODES_PER_SECOND: Final[int] = 250_000
#: In clock timing the LP's work is capped at twice the counted rate, the clock deciding within
#: that (the fastest measured is about 1e9 a second: 165 million units in 166 ms on a
#: 32-sequence adversarial batch, idle). At 1e9 an LP that cannot converge in its share took
#: all of it from CP-SAT: a 64-sequence study batch at 1 s ended at 22,394, not 22,246.
FAST_LP_WORK_PER_SECOND: Final[int] = 500_000_000
#: In clock timing the exact search's nodes are capped at the fastest rate measured (800-850k a
#: second on few-per-bin batches of 24-32 sequences, idle): the clock, not the count, stops it.
FAST_EXACT_NODES_PER_SECOND: Final[int] = 1_000_000
#: In clock timing a pricing knapsack's nodes are capped at this rate of the seconds left (about
#: 4 us a node; one pricing call, which is not interrupted, once ran 70 ms over without it).
KNAPSACK_NODES_PER_SECOND: Final[int] = 250_000
#: Bitset words shifted per second by the dive, its Python counted in words too (exact.py):
#: ~190M/s on long-CoT batches at n=256 inside partition, idle (300M ran it 1.6x over); 150M
#: with the per-item stand-ins at 60 and 12 keeps its p90 near its charge (bench_budget.py).
DIVE_WORDS_PER_SECOND: Final[int] = 150_000_000
#: Shares of the time limit for each phase (the rest is CP-SAT's): the Gilmore-Gomory LP's.
LP_SHARE: Final[float] = 0.35
#: The fluid LP (non-token costs under a cap): a few small LPs, so a small share.
FLUID_SHARE: Final[float] = 0.4
#: The exact search's share of the time limit in the proof phase (set by hand).
PROVE_EXACT_SHARE: Final[float] = 0.3
#: The subset-sum dive's share of the time limit in the proof phase (set by hand).
DIVE_PROOF_SHARE: Final[float] = 0.4
#: The load search (waste-limited LP and LP dive at each load; token costs, few per bin).
LOAD_SEARCH_SHARE: Final[float] = 0.5
#: Each load the load search tries gets at most this share of what the search has left: an
#: unknown load spends all of its allowance, and the loads after it need some (set by hand).
LOAD_SEARCH_PER_LOAD_SHARE: Final[float] = 3 / 4
#: The fluid LP: seconds per column built and solved (GLOP, 2 cores: 7-11 us measured at
#: 500-2048 items); ``FLUID_LP_WORK`` (engines/lp_bound.py) counts the set-up in columns.
FLUID_SECONDS_PER_VARIABLE: Final[float] = 10e-6
#: The share of the load search's allowance the root-LP bisection may use. Past it, loads are
#: decided one at a time from the bound up. adversarial/16's proof is the bisection (12 root
#: LPs from 46,962 to 47,017, 0.45 s): at 0.3 of 0.85 s it stopped at 46,998, at 0.6 it proved
#: the optimum in 0.51 s (adversarial/20 and /23 alike at both).
BISECT_SHARE: Final[float] = 0.6
#: The share of a load's work the load search's LP dive gets before the exhaustive search takes
#: over (and at most ``DIVE_MOST_WORK``: the dive spends what it is given and seldom finds late).
LOAD_SEARCH_DIVE_SHARE: Final[float] = 0.3
#: In clock timing, the rate that decides whether a root LP fits (idle, 2 cores: 1.2-1.3e9
#: work units a second on adversarial/16's root LPs; the counted rate is 220M).
CLOCK_WORK_PER_SECOND: Final[int] = 800_000_000

# --- the count search (engines/count_search.py; its rate is the load search's too) ------------

#: Work units per second (LP cells, solves, fills, exact nodes as counted above), measured
#: on Falkenauer's t120-t501 and u500 instances (benchmarks/bench_binpack.py) on a 2-core
#: machine at load ~7: 235 million per second at the 10th percentile, 272 median, 361 at
#: the 90th. Near the slow end, so the charge stays at or above the time taken.
WORK_PER_SECOND: Final[int] = 220_000_000
#: Share of the call's time limit the count search may spend (the rest balances the loads
#: at the count it found). The count comes first: one micro-batch fewer is one forward and
#: backward less for every rank.
COUNT_SHARE: Final[float] = 0.85
#: The count search's smaller share: above ``COUNT_FEW_PER_BIN`` sequences per micro-batch, when
#: the pricing needs the branch and bound, or below ``COUNT_SMALL_LIMIT`` seconds. There local
#: search at a fixed count, which runs after it, often finds the count (Scholl's classes with
#: 5-9 items per bin, and his hard set), and the LP dive seldom does.
COUNT_MANY_PER_BIN_SHARE: Final[float] = 0.35

# --- CP-SAT (engines/cpsat.py) ------------------------------------------------------------------

#: Measured on a 2-core machine with ortools 9.15: ~2.7 us per variable to build (variables and
#: constraints). Used to decide whether a model fits the budget; the clock checks in the build
#: catch a wrong guess.
BUILD_SECONDS_PER_VAR: Final[float] = 20e-6
#: CP-SAT reads the model before its own clock starts, and freeing a model costs time too:
#: measured ~0.85 us and ~0.5 us per variable (145k variables: 120 ms and 58 ms). The build
#: stops, and a solve only starts, while that much is left. This is the reading.
LOAD_SECONDS_PER_VAR: Final[float] = 1.3e-6
#: Freeing a model, per variable (measured with the reading, above).
FREE_SECONDS_PER_VAR: Final[float] = 0.6e-6
#: CP-SAT's deterministic time for a solve of s wall seconds (one worker, or interleaved
#: workers), on the reference machine (2 cores, ortools 9.15): about 0.12 units per second
#: once loading and presolve (~10 ms, which count for little) are done. Measured on the
#: adversarial bench instances at 0.05-1.5 s: 0.0015 units at 50 ms, 0.02-0.04 at 0.3 s,
#: 0.16-0.19 at 1.5 s, on a loaded machine (so idle it ends before the wall time would).
DETERMINISTIC_PER_SECOND: Final[float] = 0.12
#: "clock" timing, two workers: the stop latency grows with the solve, as the LNS tasks do (one
#: took 1.6 s of wall time for 0.1 deterministic units): 4 ms median and 10 ms max at 3 s, 16 ms
#: at 10 s. At 10 s, in one of three runs of the 125 bench batches with the attention cost,
#: three solves answered 120-200 ms after their limit (none when run again alone): the margin
#: keeps growing with the solve, to 0.3 s at 10 s. This is its growth, a share of the solve's
#: seconds (see ``STOP_LATENCY_SECONDS`` in engines/cpsat.py for the rest of the margin).
STOP_LATENCY_WORKERS_SHARE: Final[float] = 0.03

# --- step planning (step/budget.py, makespan.py, search.py, starts/, count_portfolio.py) -------

#: The two constructions at one count, in candidate evaluations per sequence (measured 10-20 us
#: per sequence for both at n=4096, dp=64 under loads of 3-5).
BUILD_WORK_PER_SEQUENCE: Final[int] = 400
#: Share of the work budget spent on starts at several counts before the first search.
BUILD_SHARE: Final[float] = 0.4
#: Share of the work budget the trainers' open-ended parts may take before the search: their set-ups
#: are cheap; the open-ended parts (prime-rl's refinement, verl's retry) stop there and resume
#: with what the search leaves.
TRAINER_SHARE: Final[float] = 0.25
#: The wall time of one count's constructions per sequence (measured on an idle machine:
#: 2.9 us at n=65,536, dp=1,024, 3.8 us at n=262,144): the trainers' starts leave it on the clock.
OWN_BUILD_SECONDS_PER_SEQUENCE: Final[float] = 4e-6
#: The wall time of the first construction that usually gives a valid start (the room-keeping
#: balance at pp = 1: 1.9 us per sequence at n=262,144 on an idle machine), per sequence: until
#: one of seqpart's constructions gave a start, a count is begun when this much time is left
#: (its later constructions each check the clock).
FIRST_BUILD_SECONDS_PER_SEQUENCE: Final[float] = 2.2e-6
#: With pp > 1, until one of seqpart's constructions gave a start, a count is begun when this
#: much time per sequence is left before the exact makespan's own deadline: enough for
#: Karmarkar-Karp on the ranks (1.1-1.6 us at n=65,536-262,144 on an idle machine), the
#: cheapest; the bubble-aware one first checks its own time. A plan of seqpart's own is worth
#: part of the exact phase's share (which then still scores the candidates' cheap orders).
FIRST_BUILD_SECONDS_PER_SEQUENCE_PP: Final[float] = 1.8e-6
#: The most of the limit the count bounds' rank-maxima refinement may take (pp > 1): it orders
#: the counts well (left out at n=65,536, dp=1,024 in 1 s, the chat batch's plan at pp = 4 was
#: 0.998x the best trainer instead of 0.961x), but at n=262,144 it takes 0.42-0.47 s.
RANK_MAXIMA_SHARE: Final[float] = 0.25
#: With pp > 1, the share of the time for the exact makespan: evaluating the best schedules
#: and the trainers' exactly, and the order search on the slowest rank (the trainers' and
#: given schedules' searches run in full, even past it).
STEP_EXACT_SHARE: Final[float] = 0.25
#: rank_first's split of its shared ranks into one more count, with the start's scoring: wall
#: time per sequence (measured 0.3-0.45 us at n = 262,144, dp = 1,024-2,048, pp = 4 on an idle
#: machine) and work (candidate evaluations) in repeatable mode.
SPLIT_SECONDS_PER_SEQUENCE: Final[float] = 0.5e-6
#: rank_first's split in repeatable mode, in candidate evaluations per sequence (the work beside
#: the wall time above; set by hand).
SPLIT_WORK_PER_SEQUENCE: Final[int] = 8
#: Operations of the exact evaluation per second (one op: one micro-batch's forward or backward
#: on one chunk, for one rank or candidate order). Measured 40-170 million on the 2-core machine
#: under a load of 2-3 (vectorised over 256 orders); a conservative figure turns a time budget
#: into a deterministic work budget.
OPS_PER_SECOND: Final[int] = 50_000_000
#: Candidates scored per second on the 2-core machine (numpy, n=4096; measured 8-30 million
#: under loads of 3-5, so a conservative figure): turns a time
#: budget into a deterministic work budget.
CANDIDATES_PER_SECOND: Final[int] = 15_000_000
#: Wall time of one move scored in a step of many (measured 2e-8 s, 256 x 26,624, idle): with
#: the clock, a step begins only when one as long as the last (at first, this estimate) fits.
STEP_SECONDS_PER_MOVE: Final[float] = 2e-8
#: ``micro_first``'s wall time per sequence (measured 1.65 us at n = 262,144, dp = 1,024 on
#: an idle machine).
MICRO_FIRST_SECONDS_PER_SEQUENCE: Final[float] = 2e-6
#: ``rank_first_bubble``'s wall time per sequence (measured 2.5-3.0 us at n = 262,144 on an
#: idle machine).
BUBBLE_SECONDS_PER_SEQUENCE: Final[float] = 3e-6
#: ``rank_first_packed``'s packing of the ranks: the measured cost per sequence per bisection
#: step (first fit, loaded 2-core machine).
RANK_PACK_SECONDS_PER_SEQUENCE: Final[float] = 4e-6
#: Karmarkar-Karp over ranks, measured ~80 ms at n=4096, dp=16 on the loaded 2-core machine.
KK_SECONDS_PER_SEQUENCE_RANK: Final[float] = 1.5e-6
#: The count portfolio (pp > 1, step/phases/by_count.py): the first part's share of the limit,
#: where the whole search runs, up to ``BASE_SECONDS`` (so that every limit from
#: ``BASE_SECONDS / BASE_SHARE`` on runs the same first part: a longer limit only adds counts).
BASE_SHARE: Final[float] = 0.4
#: The count portfolio: one count's search, in seconds per sequence of the batch (0.02 s at
#: n = 512).
QUANTUM_SECONDS_PER_SEQUENCE: Final[float] = 40e-6
#: The count portfolio: the exact makespan's share of a count's search (its moves between and
#: within ranks find what the formula's search misses: on the bench_step_pp batches 0.6 gave
#: plans up to 4% faster than the whole search's 0.25, ``STEP_EXACT_SHARE``).
COUNT_EXACT_SHARE: Final[float] = 0.6
#: The count search: the share of a count's exact work kept from the choice's order search for
#: the moves between ranks (the choice spends all it is given on the best one's orders). On
#: bench_step_pp's code/n256/dp4/pp8, count 14's 0.08 s search left none and made no move;
#: with half kept its 9 moves lowered the step 0.56% (repeatable mode, 2-core Intel Xeon).
COUNT_REFINE_SHARE: Final[float] = 0.5
#: The count search: the first part's most seconds (its share is ``BASE_SHARE``): every limit
#: from 0.5 s on runs the same first part (where it is 0.2 s). At pp = 8 its plan was up to 3.8%
#: behind a count's first 0.03 s search (code/n256/dp4/pp8); 0.2 s instead of 0.4 s leaves the
#: counts 0.8 s of 1 s (bench_step_pp at 1 s, with the refine share, orders cache and explore
#: figures below: 0 of 16 batches above the best forced run, was 3; math/n256/dp8/pp4 0.3%
#: slower). Where one count's first search (``QUANTUM_SECONDS_PER_SEQUENCE * n``) is longer, the
#: first part takes that: at n = 16,384, dp = 64, pp = 4 (bench_step_cluster, clock) 0.2 s left
#: the trainers' schedulers unrun and the plan 0.960x the best trainer at 5 s and 0.948x at
#: 15 s, against 0.860x and 0.825x with 0.66 s (0.919x from the whole search alone at 2 s).
COUNT_BASE_SECONDS: Final[float] = 0.2
#: The count search: the shortest first search of a count. Shorter ones rank the counts by
#: noise: on bench_step_pp's 16 batches at 1 s (repeatable), 0.02 s against 0.005 s gave 3
#: plans 0.2-1.3% faster and 1 0.6% slower (2-core Intel Xeon, loaded by other runs).
COUNT_QUANTUM_FLOOR_SECONDS: Final[float] = 0.02
#: The count search runs where this many first searches of a count fit in what the first part
#: leaves. With 8, n = 4,096 at 1 s never ran it (8 x 0.16 s > 0.8 s). With 4, on bench_step's 50
#: batches with pp > 1 (repeatable mode, 2-core Intel Xeon): at 1 s 13 plans changed (all at
#: n = 4,096), 11 faster by up to 2.8%, 2 slower by at most 0.001%; at 0.5 s 12 changed (all at
#: n = 1,024), 7 faster by up to 2.7%, 5 slower by up to 0.54%, 0.06% faster on average.
COUNT_MIN_QUANTA: Final[int] = 4
#: The count search: a count searched ``level`` times is searched again ahead of a first
#: search beside a plan only when its plan is faster by more than this fraction per level
#: (set by hand: 0 kept deepening one count on bench_step_pp's sft batches, 1.05% behind;
#: 0.01 walked through every count within 1% of the best, never searching one twice:
#: rl/n512/dp4/pp8 at 1 s, 16 first searches, 0.16% behind the run forced to multiples of 8).
COUNT_EXPLORE_PER_LEVEL: Final[float] = 0.0025
#: The count search: what a count loses in promise per search of it, from its third on, that did
#: not improve its plan (set by hand: without it code/n256/dp4/pp8 at 1 s searched count 14 at
#: 0.32 s in vain and never count 15 again, 0.16% behind; counting the second search too left
#: rl/n256/dp4/pp4's count 28 at 0.08 s, 0.07% behind).
COUNT_EXPLORE_PER_MISS: Final[float] = 0.01
#: The count search: each search of a count after its first is this many times as long. In the
#: repeatable mode the count search ends at the first search that does not fit in what is left;
#: with 4 that left 0.25 s of 1 s unused on average on bench_step_pp's two sets of 16 batches,
#: with 2 0.09 s (0.13 s once a longer search also starts from the count's best plan). With 2
#: (against 4), at 1 s: 0.05% and 0.01% closer to the same forced runs' best on average on the
#: `--seed 7` set and bench_step's 50 batches, 0.02% further on the 16 batches the other
#: figures were tuned on (2 batches above it, by up to 0.10%); 3 was worse than both.
COUNT_ROUND_GROWTH: Final[int] = 2

# --- dynamic CP (dynamic_cp/_planner.py; the study's fixed_cp baseline) ------------------------

#: Counted work (candidate evaluations and groups scanned) per second of the repeatable mode's
#: budget. Measured in clock timing at 1 s on the 32 benchmark batches' shapes (every third,
#: 2-core Intel Xeon, idle): 0.6-4.0 million units per second of the whole call. Two calls at
#: once on the 2 cores (as ``seqpart cp-study`` runs them) ran about 1.45x slower per unit: at
#: 500,000 a 1 s call on 512 sequences took 1.05 s there; this rate leaves room for that.
EVALS_PER_SECOND: Final[int] = 420_000
#: Share of the budget given to seqpart's fixed-CP plans (split among the degrees); the study's
#: ``fixed_cp`` baseline gets the same, so it is the planner's own start (set by hand).
CP_FIXED_SHARE: Final[float] = 0.35
#: The starts after the greedy, the first construction and the fixed-CP plans are built only
#: while less than this share of the budget is spent: the rest is the search's.
MORE_STARTS_SHARE: Final[float] = 0.5
#: Share of the budget for the exact CP-SAT model where the instance is small enough for it
#: (``exact_fits``); the starts and the search take the rest first.
CP_EXACT_SHARE: Final[float] = 0.5
#: Clock timing: the search and the exact model end at this share of the limit; validating and
#: timing every schedule found takes the rest (set by hand).
CP_SEARCH_END_SHARE: Final[float] = 0.8
#: Repeatable ("work") timing: the clock's safety net, at this share of the limit, stops a search
#: whose counted work has not run out (a loaded machine).
CP_SAFETY_NET_SHARE: Final[float] = 0.9

# --- measurement (measure/pipeline_replay.py) -----------------------------------------------------

#: Units of the pipeline evaluator per second: integer nanoseconds (a unit, not a measurement).
NS_PER_SECOND: Final[int] = 10**9
