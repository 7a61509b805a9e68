"""Local search: moves and swaps out of the heaviest micro-batch, cap respected.

Each accepted step lowers the heaviest load, or keeps it and lowers the number of micro-batches
at that load, so the search always terminates. Moves never empty a micro-batch and never break
the cap or the per-bin sample count. Candidate swaps are scored with numpy in one shot per step,
which keeps a step around 0.1 ms at n=2048.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._common import Bins, apply_move_or_swap, prepare
from .capped_balance import capped_balance_lists

#: Upper limit on (heavy item, partner) pairs scored per step: ~1 ms of numpy at most.
_MAX_PAIRS = 60_000
_NO = np.iinfo(np.int64).max  # "not allowed" in score matrices
#: How many of the lightest bins hold the first swap partners tried.
_LIGHT_BINS = 24


def improve(
    lengths: Any,
    bins: Sequence[Sequence[int]],
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
    deadline: float | None = None,
    target: int | None = None,
    max_steps: int = 100_000,
) -> Bins:
    """Return an improved copy of ``bins``.

    ``deadline`` is a ``time.perf_counter()`` value; ``target`` a load at which to stop early (a
    lower bound: nothing beats it).
    """
    tokens, cost, count, _k, cap = prepare(lengths, len(bins), cap, costs, counts)
    return improve_lists(tokens, cost, count, bins, cap, max_count, deadline, target, max_steps)


def improve_lists(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    bins: Sequence[Sequence[int]],
    cap: int | None,
    max_count: int | None,
    deadline: float | None = None,
    target: int | None = None,
    max_steps: int = 100_000,
) -> Bins:
    """Local search on validated lists; see :func:`improve`."""
    k = len(bins)
    n = len(tokens)
    tok = np.asarray(tokens, dtype=np.int64)
    cst = np.asarray(cost, dtype=np.int64)
    cnt_item = np.asarray(count, dtype=np.int64)
    where = np.empty(n, dtype=np.int64)
    members = [list(b) for b in bins]
    for b, items in enumerate(members):
        where[items] = b
    load = np.zeros(k, dtype=np.int64)
    tload = np.zeros(k, dtype=np.int64)
    cnt = np.zeros(k, dtype=np.int64)
    np.add.at(load, where, cst)
    np.add.at(tload, where, tok)
    np.add.at(cnt, where, cnt_item)
    cap_v = _NO if cap is None else cap
    cnt_v = _NO if max_count is None else max_count
    # Items of one type (cost, tokens, count) are interchangeable: score one per type and bin.
    if np.array_equal(cst, tok) and bool((cnt_item == 1).all()):  # the usual case: one key
        _, type_id = np.unique(tok, return_inverse=True)
    else:
        _, type_id = np.unique(np.stack([cst, tok, cnt_item], axis=1), axis=0, return_inverse=True)
    type_id = type_id.reshape(-1)
    is_light = np.zeros(k, dtype=bool)
    totals = ((load, cst), (tload, tok), (cnt, cnt_item))
    for step in range(max_steps):
        if deadline is not None and time.perf_counter() > deadline:
            break
        h = int(np.argmax(load))
        top = int(load[h])
        if target is not None and top <= target:
            break
        heavy_all = np.asarray(members[h], dtype=np.int64)
        _, first = np.unique(type_id[heavy_all], return_index=True)
        heavy = heavy_all[np.sort(first)]
        best = (top, -1, -1, -1)  # (new pair max, item a, target bin, item b or -1)
        # Moves of a from h to bin j: needs h to keep an item, j room for tokens and count.
        if len(heavy_all) > 1:
            new_j = load[None, :] + cst[heavy][:, None]  # (|h|, k)
            ok = (tload[None, :] + tok[heavy][:, None] <= cap_v) & (
                cnt[None, :] + cnt_item[heavy][:, None] <= cnt_v
            )
            ok[:, h] = False
            score = np.maximum(new_j, top - cst[heavy][:, None])
            score = np.where(ok & (new_j < top), score, _NO)
            flat = int(np.argmin(score))
            if score.flat[flat] < best[0]:
                a, j = divmod(flat, k)
                best = (int(score.flat[flat]), int(heavy[a]), j, -1)
        # Swaps of a in h with a lighter b elsewhere: both sides keep cap and count. Partners
        # in the lightest bins are tried first (most swaps that help land there, and the
        # matrix is small); the rest only when those hold none.
        if best[1] < 0 and k > 2 * _LIGHT_BINS:
            is_light[:] = False
            is_light[np.argpartition(load, _LIGHT_BINS)[:_LIGHT_BINS]] = True
            near = np.flatnonzero(is_light[where])
            swap = _best_swap(heavy, near, h, top, cst, tok, cnt_item, where, load, tload, cnt,
                              cap_v, cnt_v)
            if swap is not None:
                best = swap
        if best[1] < 0:
            best = _scan_swaps(heavy, h, top, step, type_id, k, n, cst, tok, cnt_item, where,
                               load, tload, cnt, cap_v, cnt_v, best)
        _, a, j, b = best
        if a < 0:
            break
        apply_move_or_swap(members, where, totals, a, h, j, b)
    return [sorted(m) for m in members]


def local_search(
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> Bins:
    """The capped balancer's plan, improved by moves and swaps (same signature as the others)."""
    tokens, cost, count, k, cap = prepare(lengths, k, cap, costs, counts)
    start = capped_balance_lists(tokens, cost, count, k, cap, max_count)
    return improve_lists(tokens, cost, count, start, cap, max_count)


def _scan_swaps(
    heavy: np.ndarray,
    h: int,
    top: int,
    step: int,
    type_id: np.ndarray,
    k: int,
    n: int,
    cst: np.ndarray,
    tok: np.ndarray,
    cnt_item: np.ndarray,
    where: np.ndarray,
    load: np.ndarray,
    tload: np.ndarray,
    cnt: np.ndarray,
    cap_v: int,
    cnt_v: int,
    best: tuple[int, int, int, int],
) -> tuple[int, int, int, int]:
    """Swaps against every other item, in windows of heavy types so a step stays cheap."""
    if len(heavy) > 16:  # big bins: one partner per (type, bin) keeps the matrix small
        _, keep = np.unique(type_id * k + where, return_index=True)
        partners = np.sort(keep)
    else:
        partners = np.arange(n)
    width = max(1, _MAX_PAIRS // len(partners))
    # Start where the last step left off; the first window with an improving swap ends it.
    start = (step * width) % len(heavy)
    for offset in range(0, len(heavy), width):
        window = np.roll(heavy, -start)[offset : offset + width]
        swap = _best_swap(window, partners, h, top, cst, tok, cnt_item, where, load, tload,
                          cnt, cap_v, cnt_v)
        if swap is not None and swap[0] < best[0]:
            return swap
    return best


def _best_swap(
    heavy: np.ndarray,
    partners: np.ndarray,
    h: int,
    top: int,
    cst: np.ndarray,
    tok: np.ndarray,
    cnt_item: np.ndarray,
    where: np.ndarray,
    load: np.ndarray,
    tload: np.ndarray,
    cnt: np.ndarray,
    cap_v: int,
    cnt_v: int,
) -> tuple[int, int, int, int] | None:
    """Best swap of a heavy item with a lighter partner elsewhere: (new pair max, a, bin, b).

    The cheap test (the swap must lower the max) runs on the whole matrix, the cap and count
    tests only on its survivors.
    """
    delta = cst[heavy][:, None] - cst[partners][None, :]
    new_j = load[where[partners]][None, :] + delta
    ra, rc = np.nonzero((delta > 0) & (new_j < top) & (where[partners][None, :] != h))
    if not ra.size:
        return None
    rb = partners[rc]
    a_i, jb = heavy[ra], where[rb]
    dt = tok[a_i] - tok[rb]
    dc = cnt_item[a_i] - cnt_item[rb]
    ok = (
        (tload[jb] + dt <= cap_v)
        & (tload[h] - dt <= cap_v)
        & (cnt[jb] + dc <= cnt_v)
        & (cnt[h] - dc <= cnt_v)
    )
    if not ok.any():
        return None
    score = np.where(ok, np.maximum(new_j[ra, rc], top - delta[ra, rc]), _NO)
    pick = int(np.argmin(score))
    return int(score[pick]), int(a_i[pick]), int(jb[pick]), int(rb[pick])
