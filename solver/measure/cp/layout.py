"""Where each token of a context-parallel micro-batch lives, and which schedules can run.

Split: **zigzag**, as Megatron-LM's THD slicing does. Each sequence of ``l`` tokens is cut into
``2c`` chunks as equal as integers allow (the first ``l mod 2c`` one token longer); rank ``r``
of a group of degree ``c`` holds chunks ``r`` and ``2c - 1 - r``. Why zigzag and not contiguous:
under causal attention a chunk's work grows with its position, so pairing an early chunk with a
late one gives every rank the same attention work, which a contiguous split does not. A sequence
shorter than ``2c`` leaves some chunks empty, so some ranks hold none of its tokens.

Pure Python (no torch): the index lists here are what the attention and the runners gather with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: One step of a schedule: its groups as (ranks, sequence ids).
Step = Sequence[tuple[Sequence[int], Sequence[int]]]


def chunk_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``[start, end)`` chunks of ``range(length)``, sizes differing by <= 1."""
    base, extra = divmod(length, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


@dataclass(frozen=True)
class CPLayout:
    """The zigzag split of a packed micro-batch (``lengths``) over a group of ``degree`` ranks,
    seen from group rank ``rank``.

    * ``chunks[s]``: this rank's ``[start, end)`` chunks of sequence ``s`` (positions inside
      the sequence, in order; empty chunks left out);
    * ``local_index``: the packed (global) positions of this rank's tokens, in the order the
      rank holds them (sequence by sequence, chunk by chunk);
    * ``local_starts``: cumulative counts of this rank's tokens per sequence."""

    lengths: tuple[int, ...]
    degree: int
    rank: int

    def __post_init__(self) -> None:
        if isinstance(self.degree, bool) or not isinstance(self.degree, int) or self.degree < 1:
            raise ValueError(f"degree must be an int >= 1 (the CP group's size), got {self.degree!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.degree:
            raise ValueError(f"rank={self.rank!r} is not a rank of a group of degree {self.degree}: "
                             f"use 0..{self.degree - 1}")
        if not self.lengths or any(isinstance(x, bool) or not isinstance(x, int) or x < 1
                                   for x in self.lengths):
            raise ValueError(f"lengths must be a non-empty list of ints >= 1, got {list(self.lengths)[:8]}")

    @property
    def starts(self) -> list[int]:
        out = [0]
        for x in self.lengths:
            out.append(out[-1] + x)
        return out

    def chunks_of(self, rank: int) -> list[list[tuple[int, int]]]:
        c = self.degree
        out = []
        for length in self.lengths:
            bounds = chunk_bounds(length, 2 * c)
            # at degree 1 the rank's two chunks are adjacent: one, the whole sequence
            mine = [(0, length)] if c == 1 else [bounds[rank], bounds[2 * c - 1 - rank]]
            out.append([(s, e) for s, e in mine if e > s])
        return out

    @property
    def chunks(self) -> list[list[tuple[int, int]]]:
        return self.chunks_of(self.rank)

    def index_of(self, rank: int) -> list[int]:
        starts = self.starts
        return [starts[s] + p for s, chunks in enumerate(self.chunks_of(rank))
                for a, b in chunks for p in range(a, b)]

    @property
    def local_index(self) -> list[int]:
        return self.index_of(self.rank)

    @property
    def local_positions(self) -> list[int]:
        """Each of this rank's tokens' position inside its sequence (what rotary embeddings use)."""
        return [p for chunks in self.chunks for a, b in chunks for p in range(a, b)]

    @property
    def local_starts(self) -> list[int]:
        out = [0]
        for chunks in self.chunks:
            out.append(out[-1] + sum(b - a for a, b in chunks))
        return out

    @property
    def padded(self) -> int:
        """Tokens per rank in the all-gather: the largest rank's count (the others pad)."""
        return max(len(self.index_of(r)) for r in range(self.degree))

    def gather_index(self) -> list[int]:
        """For each packed position, its row in the all-gathered ``[degree * padded]`` buffer
        (rank ``r``'s tokens at rows ``r * padded ...``): the permutation back to sequence order."""
        where = [0] * sum(self.lengths)
        pad = self.padded
        for r in range(self.degree):
            for i, pos in enumerate(self.index_of(r)):
                where[pos] = r * pad + i
        return where


def default_degrees(n_gpus: int) -> tuple[int, ...]:
    """Megatron's degrees: the powers of two ``c`` with ``2c <= n``, and ``n`` itself."""
    out, c = [], 1
    while 2 * c <= n_gpus:
        out.append(c)
        c *= 2
    return tuple(sorted(set(out) | {n_gpus}))


def check_steps(steps: Sequence[Step], n_gpus: int, n_sequences: int,
                degrees: Sequence[int] | None = None) -> list[list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """``steps`` as tuples, or a ValueError naming what is wrong: every step's groups tile
    ``range(n_gpus)`` with aligned blocks of consecutive ranks whose sizes are in ``degrees``
    (default :func:`default_degrees`), every group runs at least one sequence, and every sequence
    runs exactly once."""
    allowed = set(default_degrees(n_gpus) if degrees is None else degrees)
    seen: list[int] = []
    out = []
    for s, step in enumerate(steps):
        ranks_seen: list[int] = []
        groups = []
        for g, (ranks, seqs) in enumerate(step):
            ranks, seqs = tuple(int(r) for r in ranks), tuple(int(i) for i in seqs)
            c = len(ranks)
            if c not in allowed:
                raise ValueError(f"steps[{s}][{g}] has degree {c}, which is not in degrees "
                                 f"{sorted(allowed)} for n_gpus={n_gpus}: use one of those")
            if ranks != tuple(range(ranks[0], ranks[0] + c)) or ranks[0] % c:
                raise ValueError(f"steps[{s}][{g}]'s ranks {list(ranks)} are not an aligned block of "
                                 f"{c} consecutive ranks starting at a multiple of {c}")
            if not seqs:
                raise ValueError(f"steps[{s}][{g}] runs no sequence: every group of a step runs one or more")
            ranks_seen += ranks
            seen += seqs
            groups.append((ranks, seqs))
        if sorted(ranks_seen) != list(range(n_gpus)):
            raise ValueError(f"steps[{s}]'s groups cover ranks {sorted(ranks_seen)}, not each of "
                             f"0..{n_gpus - 1} once: every GPU runs one group in every step")
        out.append(groups)
    if sorted(seen) != list(range(n_sequences)):
        raise ValueError(f"the steps run sequences {sorted(seen)[:12]}..., not each of 0..{n_sequences - 1} "
                         "exactly once")
    return out
