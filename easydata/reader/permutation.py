"""Stateless seeded permutations of `[0, n)`: a Feistel network with cycle walking, in numpy.

`permute(indices, n, key)` maps every index to its place in a pseudo-random permutation of `[0, n)`
without materialising the permutation, so the position-to-row mapping of a reader is a pure function
(exact resume needs no stored state) and costs O(1) memory for any `n`. The round function is
integer mixing on uint64 (splitmix64), identical on every platform and numpy version.
"""

from __future__ import annotations

import numpy as np

__all__ = ["permute", "derive_key"]

_ROUNDS = 4
_MASK64_INT = 0xFFFFFFFFFFFFFFFF


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """`_mix` on one Python int (the same function; no numpy call overhead for key derivation)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64_INT
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64_INT
    return x ^ (x >> 31)


def derive_key(*parts: int) -> int:
    """A 64-bit key from integers (seed, epoch, window, ...), order-sensitive."""
    key = 0x9E3779B97F4A7C15
    for part in parts:
        key = _mix_int(key ^ (int(part) & _MASK64_INT))
    return key


def _feistel(x: np.ndarray, half_bits: int, key: int) -> np.ndarray:
    mask = np.uint64((1 << half_bits) - 1)
    left, right = x >> np.uint64(half_bits), x & mask
    for r in range(_ROUNDS):
        round_key = np.uint64(derive_key(key, r))
        left, right = right, left ^ (_mix(right ^ round_key) & mask)
    return (left << np.uint64(half_bits)) | right


def permute(indices: np.ndarray, n: int, key: int) -> np.ndarray:
    """Where each of `indices` (in `[0, n)`) goes under the permutation of `[0, n)` chosen by `key`.

    Raises:
      ValueError: if an index is outside `[0, n)`.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if n <= 0 or (indices.size and (indices.min() < 0 or indices.max() >= n)):
        raise ValueError(f"indices must lie in [0, {n}), got range [{indices.min()}, {indices.max()}].")
    if n == 1:
        return np.zeros_like(indices)
    bits = max(2, int(n - 1).bit_length())
    half = (bits + 1) // 2
    x = indices.astype(np.uint64)
    out = _feistel(x, half, key)
    # Cycle walking: a bijection on [0, 4^half) restricted to [0, n) by re-applying until inside.
    outside = out >= np.uint64(n)
    while outside.any():
        out[outside] = _feistel(out[outside], half, key)
        outside = out >= np.uint64(n)
    return out.astype(np.int64)
