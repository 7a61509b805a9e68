"""The two counterexamples behind seqpart, as pure functions plus a text renderer.

1. Balancing breaks the cap: with the micro-batch count a capped packer proves sufficient,
   Karmarkar-Karp (what ``get_seqlen_balanced_partitions`` runs) still overfills a micro-batch.
   :func:`cap_counterexample` shows the issue's case, :func:`smallest_cap_counterexample` finds
   the smallest one by exhaustive search, :func:`search_real_data` finds them in real lengths.
2. Packing leaves micro-batches empty: after the micro-batch count is all-reduced (MAX) across
   data-parallel ranks, a rank that needed fewer packs first-fit into more bins than it fills,
   and the trainer's ``torch.cat([])`` fails (:func:`dp_empty_counterexample`).

Nothing here reads files: callers pass the lengths (see ``seqpart.solver.study.datasets``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...heuristics import first_fit, karmarkar_karp
from .._partition import partition
from ..plan import find_violations

#: The issue's example.
ISSUE_LENGTHS = (8, 7, 6, 5, 4)
ISSUE_CAP = 15


@dataclass(frozen=True)
class MethodResult:
    """One method's split of one batch, and which hard constraints it breaks."""

    method: str
    bins: list[list[int]]
    tokens: list[int]
    over_cap_bins: int
    empty_bins: int
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.over_cap_bins == 0 and self.empty_bins == 0


def _result(
    method: str, bins: list[list[int]], lengths: Sequence[int], k: int, cap: int, note: str = ""
) -> MethodResult:
    found = find_violations(bins, lengths, k, cap)
    return MethodResult(
        method=method,
        bins=[list(b) for b in bins],
        tokens=[sum(lengths[i] for i in b) for b in bins],
        over_cap_bins=found.over_cap_bins,
        empty_bins=found.empty_bins,
        note=note,
    )


def _seqpart(lengths: Sequence[int], k: int, cap: int) -> MethodResult:
    plan = partition(list(lengths), k, cap, time_limit=1.0)
    note = f"{plan.status}, lower bound {plan.lower_bound}"
    return _result("seqpart", plan.bins, lengths, k, cap, note)


@dataclass(frozen=True)
class CapCase:
    """Counterexample 1 on one batch: k from first-fit, then each method with that k."""

    lengths: list[int]
    cap: int
    k: int
    first_fit: MethodResult
    karmarkar_karp: MethodResult
    seqpart: MethodResult


def cap_case(lengths: Sequence[int], cap: int) -> CapCase:
    """First-fit (arrival order, the trainer's micro-batch count) gives k; KK and seqpart use it."""
    lengths = [int(x) for x in lengths]
    ff = first_fit(lengths, None, cap)
    k = len(ff)
    return CapCase(
        lengths=lengths,
        cap=cap,
        k=k,
        first_fit=_result("first_fit", ff, lengths, k, cap, "counts the micro-batches"),
        karmarkar_karp=_result("karmarkar_karp", karmarkar_karp(lengths, k), lengths, k, cap),
        seqpart=_seqpart(lengths, k, cap),
    )


def cap_counterexample() -> CapCase:
    """The issue's case: lengths [8, 7, 6, 5, 4], cap 15."""
    return cap_case(ISSUE_LENGTHS, ISSUE_CAP)


def _set_partitions(n: int) -> Iterator[list[int]]:
    """Every partition of range(n) as a restricted growth string (block id per item)."""
    labels = [0] * n

    def rec(i: int, blocks: int) -> Iterator[list[int]]:
        if i == n:
            yield labels
            return
        for b in range(blocks + 1):
            labels[i] = b
            yield from rec(i + 1, max(blocks, b + 1))

    if n:
        labels[0] = 0
        yield from rec(1, 1)


def _optimal_max_by_k(lengths: Sequence[int], partitions: list[list[int]]) -> list[int]:
    """opt[k] = the smallest possible largest micro-batch over all splits into exactly k."""
    return _optimal_max_by_k_table(lengths, _PartitionTable.of(partitions))


@dataclass(frozen=True)
class _PartitionTable:
    """Every set partition of n items as arrays, so the exhaustive search is a few numpy ops per
    multiset instead of a Python loop over ~200 partitions."""

    one_hot: np.ndarray  # (partitions, n items, n blocks): 1 where the item is in the block
    blocks: np.ndarray  # (partitions,): how many blocks (= k) each partition has

    @staticmethod
    def of(partitions: list[list[int]]) -> _PartitionTable:
        labels = np.asarray(partitions, dtype=np.int64)
        n = labels.shape[1]
        one_hot = (labels[:, :, None] == np.arange(n)[None, None, :]).astype(np.int64)
        return _PartitionTable(one_hot, labels.max(axis=1) + 1)


def _optimal_max_by_k_table(lengths: Sequence[int], table: _PartitionTable) -> list[int]:
    n = len(lengths)
    largest = np.einsum("pib,i->pb", table.one_hot, np.asarray(lengths, dtype=np.int64)).max(1)
    opt = np.full(n + 1, sum(lengths), dtype=np.int64)
    np.minimum.at(opt, table.blocks, largest)
    opt[0] = 0
    return [int(x) for x in opt]


@dataclass(frozen=True)
class SmallestSearch:
    """The result of the exhaustive search for counterexample 1."""

    max_items: int
    max_length: int
    multisets_checked: int
    found: CapCase | None
    #: How many (multiset, cap) counterexamples exist per item count, within the bounds.
    counts_by_n: dict[int, int] = field(default_factory=dict)


def smallest_cap_counterexample(max_items: int = 6, max_length: int = 8) -> SmallestSearch:
    """Exhaustive search over multisets of ``<= max_items`` lengths in ``1..max_length``.

    A counterexample is a multiset and a cap where k = the smallest number of micro-batches any
    capped split needs (computed exactly over all set partitions) and Karmarkar-Karp with that k
    puts more than ``cap`` tokens in some micro-batch. "Smallest" means fewest sequences, then
    the smallest cap, then the smallest total, then the lexicographically smallest lengths
    (listed longest first). Every cap from the longest sequence to the total is tried, so
    within the bounds the answer is exact; with caps below ``max_length`` it is the smallest
    overall for that item count.
    """
    best: tuple[int, int, int, tuple[int, ...]] | None = None
    best_case: tuple[tuple[int, ...], int] | None = None
    counts: dict[int, int] = {}
    checked = 0
    for n in range(1, max_items + 1):
        table = _PartitionTable.of([list(p) for p in _set_partitions(n)])
        found_here = 0
        for combo in itertools.combinations_with_replacement(range(max_length, 0, -1), n):
            checked += 1
            lengths = list(combo)  # descending
            opt = _optimal_max_by_k_table(lengths, table)
            total = sum(lengths)
            # The k a cap gets is the first with opt[k] <= cap; opt does not increase with k, so
            # only the k where it drops are ever chosen, and k=1 (cap = total) cannot fail.
            chosen = [k for k in range(2, n + 1) if opt[k] < opt[k - 1]]
            kk_max = {k: max(sum(lengths[i] for i in b) for b in karmarkar_karp(lengths, k))
                      for k in chosen}
            kk_max[1] = total
            for cap in range(lengths[0], total + 1):
                k = next(k for k in range(1, n + 1) if opt[k] <= cap)
                if kk_max[k] > cap:
                    found_here += 1
                    key = (n, cap, total, combo)
                    if best is None or key < best:
                        best, best_case = key, (combo, cap)
        counts[n] = found_here
    found = cap_case(best_case[0], best_case[1]) if best_case else None
    return SmallestSearch(max_items, max_length, checked, found, counts)


@dataclass(frozen=True)
class RealSearch:
    """Counterexample 1 hunted in real length files."""

    trials: int
    hits: int
    hits_by_dataset: dict[str, tuple[int, int]]  # name -> (hits, trials)
    example: CapCase | None
    example_dataset: str | None


def search_real_data(
    datasets: Mapping[str, Sequence[int]],
    *,
    batch_sizes: Sequence[int] = (8, 16, 32, 64),
    cap_multiples: Sequence[float] = (1.25, 1.5, 2.0, 3.0),
    trials_per_setting: int = 25,
    seed: int = 0,
) -> RealSearch:
    """Sample batches from each dataset, set the cap to a multiple of the longest sequence in
    the batch, take k from first-fit (the trainer's count) and check Karmarkar-Karp with that k
    against the cap. Returns the hit counts and the first hit with the fewest sequences."""
    rng = np.random.default_rng(seed)
    trials = hits = 0
    by_dataset: dict[str, tuple[int, int]] = {}
    example: tuple[int, str, list[int], int] | None = None
    for name in sorted(datasets):
        pool = np.asarray(datasets[name], dtype=np.int64)
        d_hits = d_trials = 0
        for n in batch_sizes:
            for multiple in cap_multiples:
                for _ in range(trials_per_setting):
                    batch = [int(x) for x in pool[rng.choice(len(pool), n, replace=n > len(pool))]]
                    cap = int(max(batch) * multiple)
                    k = len(first_fit(batch, None, cap))
                    d_trials += 1
                    kk = karmarkar_karp(batch, k)
                    if max(sum(batch[i] for i in b) for b in kk) > cap:
                        d_hits += 1
                        if example is None or n < example[0]:
                            example = (n, name, batch, cap)
        by_dataset[name] = (d_hits, d_trials)
        trials += d_trials
        hits += d_hits
    case = cap_case(example[2], example[3]) if example else None
    return RealSearch(trials, hits, by_dataset, case, example[1] if example else None)


@dataclass(frozen=True)
class DPCase:
    """Counterexample 2: per-rank micro-batch counts, the all-reduced count, rank 0's plans."""

    cap: int
    rank_lengths: list[list[int]]
    rank_counts: list[int]
    k: int
    rank: int
    first_fit: MethodResult
    karmarkar_karp: MethodResult
    seqpart: MethodResult


#: Rank 0: a few completed samples and aborted short ones; rank 1: four long completions.
DP_CAP = 16384
DP_RANK_LENGTHS = (
    (9200, 6100, 2300, 310, 220, 150),
    (15800, 14900, 13700, 12400, 1200, 900),
)


def dp_empty_counterexample(
    rank_lengths: Sequence[Sequence[int]] = DP_RANK_LENGTHS, cap: int = DP_CAP
) -> DPCase:
    """Each rank counts its micro-batches with first-fit, the count is all-reduced with MAX,
    and the rank that needed fewest packs into the larger count: capped first-fit (the
    reverted fallback), Karmarkar-Karp (balanced, never empty, cap ignored) and seqpart."""
    ranks = [[int(x) for x in r] for r in rank_lengths]
    counts = [len(first_fit(r, None, cap)) for r in ranks]
    k = max(counts)
    rank = counts.index(min(counts))
    lengths = ranks[rank]
    ff = first_fit(lengths, k, cap)
    return DPCase(
        cap=cap,
        rank_lengths=ranks,
        rank_counts=counts,
        k=k,
        rank=rank,
        first_fit=_result("first_fit (capped fallback)", ff, lengths, k, cap),
        karmarkar_karp=_result("karmarkar_karp (balanced)", karmarkar_karp(lengths, k), lengths, k,
                               cap),
        seqpart=_seqpart(lengths, k, cap),
    )


def _fmt_bins(result: MethodResult, lengths: Sequence[int], cap: int) -> str:
    parts = []
    for b, tokens in zip(result.bins, result.tokens, strict=True):
        members = "{" + ",".join(str(lengths[i]) for i in b) + "}"
        mark = " OVER CAP" if tokens > cap else (" EMPTY" if not b else "")
        parts.append(f"{members}={tokens}{mark}")
    return "  ".join(parts)


def _verdict(result: MethodResult, cap: int) -> str:
    if result.ok:
        return "ok"
    broken = []
    if result.over_cap_bins:
        broken.append(f"{result.over_cap_bins} micro-batch(es) over the cap {cap}")
    if result.empty_bins:
        broken.append(f"{result.empty_bins} empty micro-batch(es): torch.cat([]) fails")
    return "BREAKS: " + ", ".join(broken)


def _method_lines(
    case_lengths: Sequence[int], cap: int, results: Sequence[MethodResult]
) -> list[str]:
    width = max(len(r.method) for r in results)
    lines = []
    for r in results:
        note = f" ({r.note})" if r.note else ""
        lines.append(f"  {r.method:<{width}}  {_fmt_bins(r, case_lengths, cap)}")
        lines.append(f"  {'':<{width}}  -> {_verdict(r, cap)}{note}")
    return lines


def render_cap_case(case: CapCase) -> list[str]:
    lines = [f"  lengths {case.lengths}, cap {case.cap}: first-fit needs k={case.k} micro-batches"]
    lines += _method_lines(
        case.lengths, case.cap, [case.first_fit, case.karmarkar_karp, case.seqpart]
    )
    return lines


def render(
    issue: CapCase,
    smallest: SmallestSearch,
    real: RealSearch | None,
    dp: DPCase,
) -> str:
    """The short readable account ``seqpart repro`` prints."""
    out = [
        "Counterexample 1: balancing with a sufficient micro-batch count still breaks the cap",
        "",
    ]
    out.append("The issue's example:")
    out += render_cap_case(issue)
    out.append("")
    out.append(
        f"Exhaustive search, multisets of <= {smallest.max_items} lengths in "
        f"1..{smallest.max_length}, every cap ({smallest.multisets_checked} multisets; k = "
        "the exact smallest count; smallest = fewest sequences, then cap, then total):"
    )
    counts = ", ".join(f"n={n}: {c}" for n, c in smallest.counts_by_n.items())
    out.append(f"  (multiset, cap) pairs where Karmarkar-Karp breaks the cap: {counts}")
    if smallest.found is None:
        out.append("  none found within these bounds")
    else:
        out.append("  smallest found:")
        out += render_cap_case(smallest.found)
    if real is not None:
        out.append("")
        out.append(
            "In real length data (random batches, cap = 1.25-3x the batch's longest sequence, "
            "k from first-fit):"
        )
        for name, (hits, trials) in real.hits_by_dataset.items():
            out.append(f"  {name}: {hits}/{trials} batches where Karmarkar-Karp breaks the cap")
        if real.example is not None:
            out.append(f"  smallest such batch found ({real.example_dataset}):")
            out += render_cap_case(real.example)
    out += ["", "Counterexample 2: the all-reduced count leaves capped first-fit bins empty", ""]
    for r, (lengths, count) in enumerate(zip(dp.rank_lengths, dp.rank_counts, strict=True)):
        out.append(f"  rank {r}: lengths {lengths} -> first-fit needs {count} under cap {dp.cap}")
    out.append(f"  all_reduce(MAX) -> every rank runs k={dp.k}; rank {dp.rank} packs into {dp.k}:")
    out += _method_lines(
        dp.rank_lengths[dp.rank], dp.cap, [dp.first_fit, dp.karmarkar_karp, dp.seqpart]
    )
    return "\n".join(out)


def run_all(datasets: Mapping[str, Sequence[int]] | None = None) -> str:
    """Every counterexample, rendered; ``datasets`` (name -> lengths) feeds the real-data hunt."""
    real = search_real_data(datasets) if datasets else None
    return render(
        cap_counterexample(), smallest_cap_counterexample(), real, dp_empty_counterexample()
    )
