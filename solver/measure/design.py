"""Which micro-batches calibration times: a design that separates the cost's terms.

A micro-batch's time is fitted as ``overhead + a*sum(l) + b*sum(l^2)`` (plus candidate extra
terms). Those features are collinear in naive samples (long micro-batches have both more tokens
and more ``l^2``), so the training design varies them independently:

* the same token total split into 1, 2, 4, ... ``max_count`` equal sequences: ``sum l`` fixed,
  ``sum l^2`` falls as ``T^2 / count`` (separates ``a`` from ``b`` and from a per-sequence term);
* one long sequence against many short ones of the same total (skew at a fixed count);
* token totals on a geometric grid up to ``max_tokens``, down to tiny micro-batches (overhead).

Held-out micro-batches are drawn at random (seeded): a random count in ``1..max_count``, a total
log-uniform up to ``max_tokens`` and random lengths summing to it, so the reported error is on
shapes the fit never saw. Pure: no timing, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import positive_int

MicroBatch = tuple[int, ...]


@dataclass(frozen=True)
class Design:
    """The training micro-batches (fitted) and the held-out ones (only scored)."""

    train: tuple[MicroBatch, ...]
    held_out: tuple[MicroBatch, ...]
    max_tokens: int
    max_count: int
    min_length: int = 16
    #: random micro-batches added to the training set (``make_design(random_train=)``)
    random_train: int = 0

    @property
    def all(self) -> tuple[MicroBatch, ...]:
        return self.train + self.held_out


def _split_equal(total: int, count: int) -> MicroBatch:
    base, extra = divmod(total, count)
    return tuple(base + (1 if i < extra else 0) for i in range(count))


def _grid(max_tokens: int, min_tokens: int) -> list[int]:
    """Token totals from ``max_tokens`` down by halves, and 3/4 points between (not only powers)."""
    out: list[int] = []
    t = max_tokens
    while t >= min_tokens:
        out.append(t)
        if (t * 3) // 4 >= min_tokens and t < max_tokens:
            out.append((t * 3) // 4)
        t //= 2
    return sorted(set(out))


def training_set(max_tokens: int, max_count: int, min_tokens: int = 64, min_length: int = 16
                 ) -> list[MicroBatch]:
    """Equal splits at every grid total and power-of-two count, plus skewed ones (one long
    sequence holding half or 7/8 of the total, the rest in short ones). No sequence is shorter
    than ``min_length`` tokens: lower it when the workload has many very short sequences, whose
    fixed per-sequence cost the fit must see rather than extrapolate."""
    counts = [c for c in (1, 2, 4, 8, 16, 32, 64) if c <= max_count]
    if counts[-1] != max_count:
        counts.append(max_count)
    out: list[MicroBatch] = []
    for total in _grid(max_tokens, min_tokens):
        for count in counts:
            if total // count >= min_length:
                out.append(_split_equal(total, count))
        for share in (2, 8):  # one long sequence of total*(share-1)/share, the rest short
            short_count = min(max_count - 1, 8)
            rest = total // share
            if short_count >= 1 and rest // short_count >= min_length:
                out.append((total - rest, *_split_equal(rest, short_count)))
    return sorted(set(out), key=lambda mb: (sum(mb), len(mb), mb))


def held_out_set(count: int, max_tokens: int, max_count: int, rng: np.random.Generator,
                 min_tokens: int = 64) -> list[MicroBatch]:
    """``count`` random micro-batches; every fourth one has the largest total, so the large
    micro-batches (where a cost model is most often wrong) are always scored."""
    out: list[MicroBatch] = []
    for i in range(count):
        n = int(rng.integers(1, max_count + 1))
        if i % 4 == 0:
            total = max_tokens
        else:
            total = int(np.exp(rng.uniform(np.log(max(min_tokens, n)), np.log(max_tokens))))
        total = max(total, n)
        # random lengths summing to total: a Dirichlet split, each at least one token
        weights = rng.dirichlet(np.full(n, 0.7))
        lengths = np.maximum(1, np.floor(weights * (total - n)).astype(int) + 1)
        lengths[int(np.argmax(lengths))] += total - int(lengths.sum())
        out.append(tuple(int(x) for x in lengths))
    return out


def make_design(max_tokens: int = 4096, max_count: int = 16, held_out: int = 16, seed: int = 0,
                min_tokens: int = 64, min_length: int = 16, random_train: int = 0) -> Design:
    """The calibration design: :func:`training_set` and ``held_out`` random micro-batches.
    Cover the micro-batches the planners will form: ``max_tokens`` at least the cap,
    ``max_count`` at least their usual sequence count, ``min_length`` at most their short
    sequences' length. ``random_train`` adds that many random micro-batches (drawn like the
    held-out ones, from another seed) to the training set: many sequences of unequal lengths,
    which the structured set lacks and where a per-sequence cost is hard to separate."""
    max_tokens = positive_int(max_tokens, "max_tokens", minimum=64)
    max_count = positive_int(max_count, "max_count")
    held_out = positive_int(held_out, "held_out", minimum=0)
    min_tokens = positive_int(min_tokens, "min_tokens", minimum=1)
    min_length = positive_int(min_length, "min_length", minimum=1)
    random_train = positive_int(random_train, "random_train", minimum=0)
    if min_tokens > max_tokens:
        raise ValueError(f"min_tokens={min_tokens} exceeds max_tokens={max_tokens}")
    rng = np.random.default_rng(seed)
    held = held_out_set(held_out, max_tokens, max_count, rng, min_tokens)
    extra = held_out_set(random_train, max_tokens, max_count, np.random.default_rng([seed, 1]), min_tokens)
    train = training_set(max_tokens, max_count, min_tokens, min_length)
    train += [mb for mb in extra if mb not in set(held) | set(train)]
    return Design(
        train=tuple(train),
        held_out=tuple(held),
        max_tokens=max_tokens,
        max_count=max_count,
        min_length=min_length,
        random_train=random_train,
    )
