"""Sizing of the scalable Bloom filter kept in plain Redis strings.

Layer i holds `capacity * growth**i` fingerprints at error rate `p * (1 - r) * r**i`, so the
compound false-positive rate stays below `p` however many layers the crawl needs (Almeida et al.,
"Scalable Bloom Filters"). Bits are exact (`m = -n ln p / ln² 2`, no power-of-two rounding) and
split into pieces whose allocation is exactly one jemalloc size class: a piece is created at its
full length in one SETRANGE (no greedy string growth), so `MEMORY USAGE` matches the formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TIGHTENING = 0.1  # r: each layer's error rate is a tenth of the previous one
GROWTH = 2  # each layer holds twice the previous one
SDS_OVERHEAD = 10  # sdshdr32 (len, alloc, flags) + the trailing NUL
MIN_PIECE_LOG2, MAX_PIECE_LOG2 = 12, 22  # pieces of 4 KiB .. 4 MiB: far below Redis's 512 MB strings
MAX_K = 30  # keeps (h1 + i*h2) below 2**53, exact in Lua's doubles
MAX_LAYERS = 64  # capacity doubles per layer: far beyond any crawl; more in a meta hash is corruption
MAX_PIECES = 1 << 20


class BloomMetaError(ValueError):
    """The filter's meta hash is not a layout we wrote (edited by hand, truncated, foreign)."""


def finite_number(value: Any) -> float:
    """A statistics field of the meta hash: anything that is not a finite number counts as 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def size_class(nbytes: int) -> int:
    """Smallest jemalloc size class >= nbytes (four classes per doubling above 64 bytes)."""
    if nbytes <= 64:
        return max(8, 1 << (nbytes - 1).bit_length())
    lg = (nbytes - 1).bit_length() - 1  # 2**lg < nbytes <= 2**(lg+1)
    step = 1 << (lg - 2)
    return (1 << lg) + math.ceil((nbytes - (1 << lg)) / step) * step


@dataclass(frozen=True)
class Layer:
    capacity: int
    error_rate: float
    bits: int  # m, the bits actually used (all bytes of all pieces)
    hashes: int  # k
    piece_bits: int  # bits per piece (all but maybe the last are this long)
    pieces: int

    @classmethod
    def plan(cls, capacity: int, error_rate: float) -> Layer:
        wanted = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        wanted_bytes = math.ceil(wanted / 8)
        # Equal pieces of one exact size class, at least ~16 of them, plus a last piece sized to
        # its own class: the allocator's rounding then costs at most a quarter of that last piece.
        alloc = 1 << max(MIN_PIECE_LOG2, min(MAX_PIECE_LOG2, (wanted_bytes // 16).bit_length() - 1))
        full_piece = alloc - SDS_OVERHEAD
        pieces = max(1, math.ceil(wanted_bytes / full_piece))
        last = wanted_bytes - full_piece * (pieces - 1)
        total_bytes = full_piece * (pieces - 1) + size_class(last + SDS_OVERHEAD) - SDS_OVERHEAD
        bits = total_bytes * 8  # bits the allocator gives anyway lower the error rate further
        hashes = max(1, min(MAX_K, round(bits / capacity * math.log(2))))
        return cls(capacity, error_rate, bits, hashes, full_piece * 8, pieces)

    def piece_lengths(self) -> list[int]:
        """Byte length of each piece, for creating them at full size."""
        full = self.piece_bits // 8
        last = self.bits // 8 - full * (self.pieces - 1)
        return [full] * (self.pieces - 1) + [last]

    def to_meta(self, index: int) -> dict[str, Any]:
        return {
            f"L{index}:cap": self.capacity,
            f"L{index}:p": repr(self.error_rate),
            f"L{index}:m": self.bits,
            f"L{index}:k": self.hashes,
            f"L{index}:pbits": self.piece_bits,
            f"L{index}:pieces": self.pieces,
        }

    @classmethod
    def from_meta(cls, meta: dict[str, str], index: int) -> Layer:
        """Raises KeyError / ValueError when a field is missing or not a number (BloomState says so)."""
        return cls(
            int(meta[f"L{index}:cap"]),
            float(meta[f"L{index}:p"]),
            int(meta[f"L{index}:m"]),
            int(meta[f"L{index}:k"]),
            int(meta[f"L{index}:pbits"]),
            int(meta[f"L{index}:pieces"]),
        )

    def fill_error_rate(self, count: int) -> float:
        """Expected false-positive rate of this layer holding `count` fingerprints."""
        return (1 - math.exp(-self.hashes * count / self.bits)) ** self.hashes


def layer_plan(capacity: int, error_rate: float, index: int) -> Layer:
    """Parameters of layer `index` of a filter sized for `capacity` at `error_rate` overall."""
    return Layer.plan(capacity * GROWTH**index, error_rate * (1 - TIGHTENING) * TIGHTENING**index)


@dataclass(frozen=True)
class BloomState:
    """What the meta hash says: the layers, and how many fingerprints each holds."""

    layers: tuple[Layer, ...]
    counts: tuple[int, ...]
    capacity: int = 0  # overall sizing the filter was created with (0 = none yet)
    overall_error_rate: float = 0.0

    @classmethod
    def from_meta(cls, raw: dict[Any, Any]) -> BloomState:
        """The layout from the meta hash; `BloomMetaError` if it is not one we wrote (never guessed)."""
        meta = {_s(k): _s(v) for k, v in raw.items()}
        try:
            n = int(meta.get("layers", 0))
            if not 0 <= n <= MAX_LAYERS:
                raise ValueError(f"layers={n} is not between 0 and {MAX_LAYERS}")
            layers = tuple(Layer.from_meta(meta, i) for i in range(n))
        except (KeyError, ValueError, OverflowError) as exc:
            raise BloomMetaError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        for i, layer in enumerate(layers):
            if (
                min(layer.capacity, layer.bits, layer.hashes, layer.piece_bits, layer.pieces) < 1
                or not 0 < layer.error_rate < 1
                or layer.hashes > MAX_K
                or layer.pieces > MAX_PIECES
            ):
                raise BloomMetaError(f"layer {i} has impossible parameters ({layer})")
        return cls(
            layers,
            tuple(max(0, int(finite_number(meta.get(f"L{i}:n")))) for i in range(n)),  # a count is only statistics
            max(0, int(finite_number(meta.get("capacity")))),
            finite_number(meta.get("error_rate")) if 0 < finite_number(meta.get("error_rate")) < 1 else 0.0,
        )

    def piece_keys(self, base: str) -> list[str]:
        return [piece_key(base, i, j) for i, layer in enumerate(self.layers) for j in range(layer.pieces)]

    @property
    def count(self) -> int:
        return sum(self.counts)

    def error_rate(self) -> float:
        """Estimated current false-positive rate: any layer may answer "seen"."""
        miss = 1.0
        for layer, count in zip(self.layers, self.counts):
            miss *= 1 - layer.fill_error_rate(count)
        return 1 - miss


def piece_key(base: str, layer: int, piece: int) -> str:
    return f"{base}:{layer}:{piece}"


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
