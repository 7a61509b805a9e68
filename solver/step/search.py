"""Local search on the step objective: moves and swaps of sequences between micro-batches.

The state is one schedule with a fixed count ``m`` per rank: ``dp*m`` micro-batches, micro-batch
``b`` on rank ``b // m``. The objective is the largest scaled rank time
``R_r = vpp * S_r + (pp-1) * M_r`` (``S_r`` the sum and ``M_r`` the max of the rank's
micro-batch times), i.e. ``vpp`` x the step model's rank time, an exact integer. A micro-batch's
time includes the size term of its token total when the model has one
(:class:`~seqpart.solver.batch_cost.MicroBatchCost`): every move is scored with it, exactly.

Each step takes the critical rank (largest ``R``, lowest index on ties) and applies the best of:

1. a move of one of its sequences to a micro-batch of another rank;
2. a swap of one of its sequences with a lighter one on another rank;
3. a move or swap inside the rank, between its heaviest micro-batch and another (for the
   bubble term ``M_r``, so only with ``pp > 1``; taken when ``R_r`` falls).

A change is taken only when every rank it touches ends strictly below the critical rank's old
time, so the sorted vector of rank times falls lexicographically and the search terminates.
Every change keeps each micro-batch non-empty and under the cap. Candidates are scored in bulk
with numpy; the number of candidates scored is the work budget (deterministic), and a clock
deadline is only a safety net.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..batch_cost import MicroBatchCost
from ..tuning import CANDIDATES_PER_SECOND as CANDIDATES_PER_SECOND  # the phases read it here
from ..tuning import STEP_SECONDS_PER_MOVE as _SECONDS_PER_MOVE

#: Moves are scored from at most this many sequences of the slowest rank per step...
_MOVE_SOURCES = 256
#: ...to every micro-batch, or at pp = 1, past this many, to those of the lightest ranks.
_MOVE_DESTINATIONS = 4096
#: Swaps are scored against at most this many sequences of the least loaded ranks per step...
_SWAP_PARTNERS = 512
#: ...and from at most this many of the critical rank's sequences (the costliest first).
_SWAP_SOURCES = 64
#: Fixed cost of one step in candidate evaluations (numpy call overheads, the refresh).
_STEP_WORK = 4000


@dataclass
class SearchResult:
    mb_of: np.ndarray  # micro-batch of each sequence
    objective: int  # max scaled rank time
    steps: int
    work: int
    stopped_by: str  # "local optimum", "bound", "work budget", "clock"


def _dtype(costs: list[int], overhead: int, pp: int, vpp: int,
           size: MicroBatchCost | None = None, total_tokens: int = 0) -> type | np.dtype:
    """int64 when no scaled time can reach 2**62, else exact Python ints (object arrays)."""
    per_mb = overhead + (0 if size is None else size.size_max(total_tokens))
    worst = (sum(costs) + len(costs) * per_mb) * (vpp + pp)
    if size is not None:  # size(T) itself, and T*T inside it, must fit too
        worst = max(worst, size.square * total_tokens * total_tokens * 4)
    return np.int64 if worst < 2**62 else object


def schedule_objective(
    mb_of: np.ndarray, costs: np.ndarray, k: int, m: int, overhead: int, pp: int, vpp: int,
    size: MicroBatchCost | None = None, tokens: np.ndarray | None = None,
) -> int:
    times = np.full(k, overhead, dtype=costs.dtype)
    np.add.at(times, mb_of, costs)
    if size is not None and tokens is not None:
        totals = np.zeros(k, dtype=np.int64)
        np.add.at(totals, mb_of, np.asarray(tokens, dtype=np.int64))
        times = times + size.size_array(totals, costs.dtype)
    per_rank = times.reshape(-1, m)
    return int((vpp * per_rank.sum(axis=1) + (pp - 1) * per_rank.max(axis=1)).max())


def improve_schedule(
    mb_of: np.ndarray,
    tokens: list[int],
    costs: list[int],
    dp: int,
    m: int,
    cap: int | None,
    overhead: int,
    pp: int,
    vpp: int,
    *,
    bound: int = 0,
    work_budget: int = 10**9,
    deadline: float | None = None,
    size: MicroBatchCost | None = None,
) -> SearchResult:
    """Improve a valid schedule (``mb_of[i]`` = micro-batch of sequence i, micro-batch b on rank
    ``b // m``) until no change helps, the objective meets ``bound``, the work budget (candidate
    evaluations) is spent or ``deadline`` passes. Returns a valid schedule no worse than the
    start."""
    return _Search(mb_of, tokens, costs, dp, m, cap, overhead, pp, vpp, size).run(
        bound, work_budget, deadline
    )


class _Search:
    def __init__(
        self, mb_of: np.ndarray, tokens: list[int], costs: list[int], dp: int, m: int,
        cap: int | None, overhead: int, pp: int, vpp: int, size: MicroBatchCost | None = None,
    ) -> None:
        self.dp, self.m, self.k = dp, m, dp * m
        self.vpp, self.beta = vpp, pp - 1
        self.size = size
        self.dt = _dtype(costs, overhead, pp, vpp, size, sum(tokens))
        self.c = np.asarray(costs, dtype=self.dt)
        self.tok = np.asarray(tokens, dtype=np.int64)
        self.where = np.asarray(mb_of, dtype=np.int64).copy()
        self.cap = np.iinfo(np.int64).max if cap is None else cap
        self.t = np.full(self.k, overhead, dtype=self.dt)
        np.add.at(self.t, self.where, self.c)
        self.mtok = np.zeros(self.k, dtype=np.int64)
        np.add.at(self.mtok, self.where, self.tok)
        if size is not None:
            self.t = self.t + size.size_array(self.mtok, self.dt)
        self.cnt = np.bincount(self.where, minlength=self.k)
        self.rank_of = np.arange(self.k) // m
        self.work = 0
        self.refresh()

    def refresh(self) -> None:
        """Per-rank sum, max, the max of the other micro-batches, and the scaled rank times."""
        dp, m = self.dp, self.m
        tr = self.t.reshape(dp, m)
        self.s = tr.sum(axis=1)
        self.top = tr.max(axis=1)
        if m > 1:
            order = np.argsort(tr, axis=1, kind="stable")
            second = np.take_along_axis(tr, order[:, -2:-1], axis=1)[:, 0]
            is_top = np.zeros((dp, m), dtype=bool)
            np.put_along_axis(is_top, order[:, -1:], True, axis=1)
            self.other = np.where(is_top, second[:, None], self.top[:, None]).reshape(self.k)
        else:
            self.other = np.zeros(self.k, dtype=self.dt)
        self.big_r = self.vpp * self.s + self.beta * self.top

    def run(self, bound: int, work_budget: int, deadline: float | None) -> SearchResult:
        steps = 0
        stopped = "local optimum"
        balanced = False  # ranks balanced internally since the last change
        # The last step's wall time, at first an estimate from the moves a step scores.
        last = min(_MOVE_SOURCES, len(self.where)) * len(self.move_destinations()) * _SECONDS_PER_MOVE
        while True:
            r = int(np.argmax(self.big_r))
            target = int(self.big_r[r])
            if target <= bound:
                stopped = "bound"
                break
            if self.work >= work_budget:
                stopped = "work budget"
                break
            began = time.perf_counter()
            if deadline is not None and began + last > deadline:  # the next step would not fit
                stopped = "clock"
                break
            self.work += _STEP_WORK
            change = self.across(r, target) or (self.beta and self.m > 1 and self.inside(r))
            last = time.perf_counter() - began
            if change:
                balanced = False
                steps += 1
                continue
            if self.beta and self.m > 1 and not balanced:
                # Stuck: lower every rank's bubble, which makes room on the receiving ranks.
                balanced = True
                steps += self.balance_all(work_budget, deadline)
                continue
            break
        return SearchResult(self.where, int(self.big_r.max()), steps, self.work, stopped)

    def size_change(self, totals: np.ndarray, tokens: np.ndarray) -> np.ndarray | int:
        """How much the size term of micro-batches holding ``totals`` tokens changes when
        ``tokens`` are added (broadcast; 0 without a size term)."""
        if self.size is None:
            return 0
        after, before = np.broadcast_arrays(totals + tokens, totals)
        shape = after.shape
        return (self.size.size_array(after.ravel(), self.dt)
                - self.size.size_array(before.ravel(), self.dt)).reshape(shape)

    def apply(self, a: int, src: int, dst: int, b: int = -1) -> None:
        """Move sequence ``a`` from ``src`` to ``dst`` and, for a swap, ``b`` back."""
        c, tok = self.c, self.tok
        moved = int(tok[a]) - (int(tok[b]) if b >= 0 else 0)
        old_src, old_dst = self.mtok[src : src + 1], self.mtok[dst : dst + 1]
        grow_src = self.size_change(old_src, np.array([-moved]))
        grow_dst = self.size_change(old_dst, np.array([moved]))
        self.where[a] = dst
        self.t[src] -= c[a]
        self.t[dst] += c[a]
        self.mtok[src] -= tok[a]
        self.mtok[dst] += tok[a]
        if b < 0:
            self.cnt[src] -= 1
            self.cnt[dst] += 1
        else:
            self.where[b] = src
            self.t[dst] -= c[b]
            self.t[src] += c[b]
            self.mtok[dst] -= tok[b]
            self.mtok[src] += tok[b]
        if self.size is not None:
            self.t[src] += grow_src[0]
            self.t[dst] += grow_dst[0]
        self.refresh()

    def move_destinations(self) -> np.ndarray:
        """Every micro-batch; at pp = 1, past _MOVE_DESTINATIONS of them, those of the ranks
        with the lowest times (there a rank's time is its sum, so the best destination is on
        the lightest rank with room; scoring 256 sources against all 26,624 micro-batches took
        0.14-0.3 s a step). With pp > 1 a light rank's bubble may still rule a move out."""
        if self.k <= _MOVE_DESTINATIONS or self.beta:
            return np.arange(self.k)
        light = np.argsort(self.big_r, kind="stable")[: max(1, _MOVE_DESTINATIONS // self.m)]
        return (np.sort(light)[:, None] * self.m + np.arange(self.m)[None, :]).reshape(-1)

    def across(self, r: int, target: int) -> bool:
        """Best move, else best swap, of a sequence of rank r with another rank."""
        c, tok, t, s, vpp, beta = self.c, self.tok, self.t, self.s, self.vpp, self.beta
        rank_of, where, mtok = self.rank_of, self.where, self.mtok
        mine = np.flatnonzero(rank_of[where] == r)
        src = where[mine]
        movable = self.cnt[src] > 1
        if movable.any():
            a_idx, a_src = mine[movable], src[movable]
            if len(a_idx) > _MOVE_SOURCES:  # a long rank: sources spread over its cost order
                pick = np.argsort(-c[a_idx], kind="stable")
                pick = pick[np.linspace(0, len(pick) - 1, _MOVE_SOURCES).round().astype(np.int64)]
                a_idx, a_src = a_idx[pick], a_src[pick]
            a_c, a_l = c[a_idx], tok[a_idx]
            dest = self.move_destinations()
            d_rank, d_mtok, d_t = rank_of[dest], mtok[dest], t[dest]
            # Time change of each source micro-batch, and of each destination (a x destinations).
            d_src = self.size_change(mtok[a_src], -a_l) - a_c
            d_dst = self.size_change(d_mtok[None, :], a_l[:, None]) + a_c[:, None]
            new_src = vpp * (s[r] + d_src) + beta * np.maximum(self.other[a_src], t[a_src] + d_src)
            ok = (d_rank != r)[None, :] & (d_mtok[None, :] + a_l[:, None] <= self.cap)
            new_dst = vpp * (s[d_rank][None, :] + d_dst) + beta * np.maximum(
                self.top[d_rank][None, :], d_t[None, :] + d_dst
            )
            val = np.where(ok, np.maximum(new_src[:, None], new_dst), target)
            self.work += val.size
            flat = int(np.argmin(val))
            if int(val.flat[flat]) < target:
                ai, col = divmod(flat, len(dest))
                self.apply(int(a_idx[ai]), int(a_src[ai]), int(dest[col]))
                return True
        # Swaps: the rank's sequences (evenly spread over its cost order when there are many:
        # large differences move much, small ones fine-tune) against the least loaded ranks'.
        pick = np.argsort(-c[mine], kind="stable")
        if len(pick) > _SWAP_SOURCES:
            pick = pick[np.linspace(0, len(pick) - 1, _SWAP_SOURCES).round().astype(np.int64)]
        a_idx, a_src = mine[pick], src[pick]
        a_c, a_l = c[a_idx], tok[a_idx]
        pos = np.empty(self.dp, dtype=np.int64)
        pos[np.argsort(self.big_r, kind="stable")] = np.arange(self.dp)
        others = np.flatnonzero(rank_of[where] != r)
        if len(others) > _SWAP_PARTNERS:
            others = others[np.argsort(pos[rank_of[where[others]]], kind="stable")[:_SWAP_PARTNERS]]
        if not len(others) or not len(a_idx):
            return False
        b_src = where[others]
        b_c, b_l = c[others], tok[others]
        b_rank = rank_of[b_src]
        delta = a_c[:, None] - b_c[None, :]  # cost leaving rank r
        moved = a_l[:, None] - b_l[None, :]  # tokens leaving rank r
        d_a = self.size_change(mtok[a_src][:, None], -moved) - delta  # a's micro-batch
        d_b = self.size_change(mtok[b_src][None, :], moved) + delta  # b's micro-batch
        ok = (
            (d_a < 0)
            & (mtok[a_src][:, None] - moved <= self.cap)
            & (mtok[b_src][None, :] + moved <= self.cap)
        )
        new_r = vpp * (s[r] + d_a) + beta * np.maximum(
            self.other[a_src][:, None], t[a_src][:, None] + d_a
        )
        new_o = vpp * (s[b_rank][None, :] + d_b) + beta * np.maximum(
            self.other[b_src][None, :], t[b_src][None, :] + d_b
        )
        val = np.where(ok, np.maximum(new_r, new_o), target)
        self.work += val.size
        flat = int(np.argmin(val))
        if int(val.flat[flat]) < target:
            ai, bi = divmod(flat, len(others))
            self.apply(int(a_idx[ai]), int(a_src[ai]), int(b_src[bi]), int(others[bi]))
            return True
        return False

    def inside(self, r: int) -> bool:
        """Best move or swap between rank r's heaviest micro-batch and another of its own, when
        it lowers the rank's time (through its heaviest micro-batch, the bubble term)."""
        m, c, tok, t, mtok = self.m, self.c, self.tok, self.t, self.mtok
        vpp, beta, s_r, old_r = self.vpp, self.beta, self.s[r], self.big_r[r]
        lo = r * m
        heavy = lo + int(np.argmax(t[lo : lo + m]))
        peers = np.array([b for b in range(lo, lo + m) if b != heavy])
        rest = t[lo : lo + m].copy()
        rest[heavy - lo] = 0
        order = np.argsort(rest, kind="stable")
        # Max over the rank's micro-batches other than ``heavy`` and the peer.
        second = rest[order[-2]] if m > 2 else 0
        rest_top = np.full(len(peers), rest[order[-1]], dtype=self.dt)  # exact even as objects
        rest_top[peers - lo == order[-1]] = second
        mine = np.flatnonzero(self.where == heavy)
        h_c, h_l = c[mine], tok[mine]
        old = t[heavy]
        if self.cnt[heavy] > 1:
            d_h = (self.size_change(mtok[heavy], -h_l) - h_c)[:, None]
            d_p = self.size_change(mtok[peers][None, :], h_l[:, None]) + h_c[:, None]
            new_m = np.maximum(np.maximum(rest_top[None, :], old + d_h), t[peers][None, :] + d_p)
            new_r = vpp * (s_r + d_h + d_p) + beta * new_m
            val = np.where(mtok[peers][None, :] + h_l[:, None] <= self.cap, new_r, old_r)
            self.work += val.size
            flat = int(np.argmin(val))
            if int(val.flat[flat]) < old_r:
                ai, pi = divmod(flat, len(peers))
                self.apply(int(mine[ai]), heavy, int(peers[pi]))
                return True
        in_peers = np.flatnonzero((self.rank_of[self.where] == r) & (self.where != heavy))
        if not len(in_peers):
            return False
        p_src = self.where[in_peers]
        delta = h_c[:, None] - c[in_peers][None, :]
        moved = h_l[:, None] - tok[in_peers][None, :]
        d_h = self.size_change(mtok[heavy], -moved) - delta
        d_p = self.size_change(mtok[p_src][None, :], moved) + delta
        ok = (d_h < 0) & (mtok[heavy] - moved <= self.cap) & (mtok[p_src][None, :] + moved <= self.cap)
        p_pos = np.searchsorted(peers, p_src)
        new_m = np.maximum(np.maximum(rest_top[p_pos][None, :], old + d_h), t[p_src][None, :] + d_p)
        val = np.where(ok, vpp * (s_r + d_h + d_p) + beta * new_m, old_r)
        self.work += val.size
        flat = int(np.argmin(val))
        if int(val.flat[flat]) < old_r:
            ai, pi = divmod(flat, len(in_peers))
            self.apply(int(mine[ai]), heavy, int(p_src[pi]), int(in_peers[pi]))
            return True
        return False

    def balance_all(self, work_budget: int, deadline: float | None) -> int:
        """Lower each rank's heaviest micro-batch as far as single moves and swaps go (within
        the work budget and the clock)."""
        changes = 0
        for r in range(self.dp):
            while self.work < work_budget and not (
                deadline is not None and time.perf_counter() > deadline
            ) and self.inside(r):
                changes += 1
                self.work += _STEP_WORK
        return changes
