"""Built schemes and attention maps, cached within byte budgets, and the cost check.

Every scheme a request asks for is first built on PyTorch's ``meta`` device
(no memory, no arithmetic) to count its parameters and buffers; a request
whose options imply more state or arithmetic than :class:`Limits` allows is
refused with a 400 that names the options, before anything is allocated.

Building is done outside the cache's lock, so a slow build never stalls a
request that hits the cache. Only the seeded construction itself (a few
milliseconds under the caps) holds :data:`_RNG_LOCK`, because
``torch.manual_seed`` sets the process-wide generator.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

import torch

from relpos.encodings import get_scheme, make_encoding
from relpos.explorer.errors import ApiError, Limits

__all__ = ["Cost", "EncodingCache", "ByteLRU", "estimate_cost", "state_bytes"]

_RNG_LOCK = threading.Lock()


class Cost:
    """What building and evaluating one scheme costs: state elements and operations."""

    def __init__(self, state: int, toeplitz: bool) -> None:
        self.state = state
        self.toeplitz = toeplitz

    def flops(self, n_query: int, n_key: int) -> float:
        """Upper estimate: every evaluated point may touch every parameter (an MLP does)."""
        points = (n_query + n_key - 1) if self.toeplitz else n_query * n_key
        return 2.0 * max(1, self.state) * points


def state_bytes(module: torch.nn.Module) -> int:
    """Bytes held by a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def _build(name: str, options: tuple, n_heads: int, head_dim: int, causal: bool, max_len: int):
    cls, _ = get_scheme(name)
    return make_encoding(name, n_heads=n_heads, head_dim=head_dim, causal=causal or cls.causal_only,
                         max_len=max_len, **dict(options))


def estimate_cost(name: str, options: tuple, n_heads: int, head_dim: int, causal: bool, max_len: int) -> Cost:
    """Count a scheme's parameters and buffers by building it on the meta device.

    Raises:
        ApiError: the scheme refuses the options (its own message).
    """
    try:
        with torch.device("meta"):
            enc = _build(name, options, n_heads, head_dim, causal, max_len)
    except (ValueError, TypeError) as e:
        raise ApiError(str(e), field="options") from None
    except Exception:  # noqa: BLE001 - a scheme that cannot be built on meta: count nothing, field caps still hold
        return Cost(0, False)
    state = sum(t.numel() for t in (*enc.parameters(), *enc.buffers()))
    return Cost(state, bool(getattr(enc, "toeplitz", False)))


class ByteLRU:
    """A thread-safe least-recently-used map bounded by the total size of its values in bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key, value, nbytes: int) -> None:
        if nbytes > self.budget:
            return  # never cached; the caller keeps its own reference
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            while self._items and self.used + nbytes > self.budget:
                _, (_, b) = self._items.popitem(last=False)
                self.used -= b
            self._items[key] = (value, nbytes)
            self.used += nbytes

    def __len__(self) -> int:
        return len(self._items)


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class EncodingCache:
    """Schemes built for the explorer, keyed by every argument, within ``limits.cache_bytes``."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.lru = ByteLRU(limits.cache_bytes)
        self._lock = threading.Lock()
        self._building: dict[tuple, _Pending] = {}

    def check_cost(self, name: str, options: tuple, n_heads: int, head_dim: int, causal: bool, max_len: int,
                   n_query: int, n_key: int, *, fields: list[str], length_field: str | None = None,
                   shown_options: dict | None = None) -> Cost:
        """Refuse (``too_costly``) a scheme whose state or arithmetic is over the caps.

        Args:
            fields: the request fields that size the scheme (named in the refusal).
            length_field: the field that sets the length (named too when arithmetic is refused).
            shown_options: the options to print (default: all of ``options``).
        """
        L = self.limits
        cost = estimate_cost(name, options, n_heads, head_dim, causal, max_len)
        shown_options = dict(options) if shown_options is None else shown_options
        shown = ", ".join(f"{k}={v}" for k, v in shown_options.items()) or "its default options"
        if cost.state > L.max_state_elems:
            raise ApiError(
                f"{name} with {shown}, {n_heads} heads and head_dim {head_dim} would hold {cost.state:,} "
                f"parameters and buffers; the explorer accepts at most {L.max_state_elems:,} "
                f"(change {', '.join(fields)})", code="too_costly", fields=fields, limit=L.max_state_elems,
                unit="parameters", value=cost.state)
        flops = cost.flops(n_query, n_key)
        if length_field:
            fields = [*fields, length_field]
        if flops > L.max_flops:
            raise ApiError(
                f"{name} with {shown} on {n_query} x {n_key} positions would take about {flops:.2g} "
                f"operations; the explorer accepts at most {L.max_flops:.2g} (change {', '.join(fields)})",
                code="too_costly", fields=fields, limit=L.max_flops, unit="operations", value=flops)
        return cost

    def get(self, name: str, options: tuple, n_heads: int, head_dim: int, causal: bool, seed: int,
            max_len: int):
        """The scheme built right after ``torch.manual_seed(seed)``, in eval mode (cached)."""
        key = (name, options, n_heads, head_dim, causal, seed, max_len)
        hit = self.lru.get(key)
        if hit is not None:
            return hit
        with self._lock:
            pending = self._building.get(key)
            owner = pending is None
            if owner:
                pending = self._building[key] = _Pending()
        if not owner:
            pending.done.wait(timeout=120)
            if pending.error is not None:
                raise pending.error
            if pending.value is not None:
                return pending.value
        try:
            enc = self._construct(name, options, n_heads, head_dim, causal, seed, max_len)
            pending.value = enc
        except BaseException as e:
            pending.error = e
            raise
        finally:
            with self._lock:
                self._building.pop(key, None)
            pending.done.set()
        self.lru.put(key, enc, state_bytes(enc))
        return enc

    @staticmethod
    def _construct(name, options, n_heads, head_dim, causal, seed, max_len):
        try:
            with _RNG_LOCK, torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                enc = _build(name, options, n_heads, head_dim, causal, max_len)
        except (ValueError, TypeError) as e:
            raise ApiError(str(e), field="options") from None
        enc.eval()
        return enc


def cached_call(lru: ByteLRU, key, fn: Callable[[], Any], nbytes: Callable[[Any], int]):
    """``lru[key]``, or ``fn()`` stored with its size."""
    hit = lru.get(key)
    if hit is not None:
        return hit
    value = fn()
    lru.put(key, value, nbytes(value))
    return value
