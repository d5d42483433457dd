"""The explorer's error type and its caps (no HTTP, no torch)."""

from __future__ import annotations

import dataclasses

__all__ = ["ApiError", "Limits"]


class ApiError(ValueError):
    """A request the explorer refuses, with a message meant for the page.

    Attributes:
        code: machine-readable kind (``"bad_value"``, ``"too_large"``,
            ``"not_found"``, ``"unavailable"``, ``"too_costly"``), which the page may translate.
        field: the request parameter at fault, if any (the first of ``fields``).
        fields: every request parameter that contributes to the fault (a cost
            refusal names all the options that drive the cost).
        limit: the cap that was exceeded, for ``"too_large"`` / ``"too_costly"``.
        unit: what ``limit`` counts (``"tokens"``, ``"bytes"``, ``"parameters"``, ...).
        status: HTTP status the server answers with.
    """

    def __init__(self, message: str, *, code: str = "bad_value", field: str | None = None,
                 limit: int | float | None = None, unit: str | None = None, status: int = 400,
                 fields: list[str] | tuple[str, ...] | None = None, value: int | float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.fields = list(fields) if fields else ([field] if field else [])
        self.field = field if field is not None else (self.fields[0] if self.fields else None)
        self.limit = limit
        self.unit = unit
        self.status = status
        self.value = value

    def to_json(self) -> dict:
        return {"error": str(self), "code": self.code, "field": self.field, "fields": self.fields,
                "limit": self.limit, "unit": self.unit, "value": self.value}


@dataclasses.dataclass(frozen=True)
class Limits:
    """Caps on what the explorer accepts (each keeps one request well under a second).

    Field caps (lengths, heads) bound the shape of a request; the *cost* caps
    bound what a combination of options implies, whatever the single fields say:

    * ``max_state_elems`` -- parameters plus buffers of one built scheme
      (4 Mi elements = 16 MiB of float32);
    * ``max_flops`` -- an upper estimate of the arithmetic of one request:
      ``2 x state elements x points`` with ``points = 2N - 1`` for a
      Toeplitz bias and ``N x N`` otherwise (every point may touch every
      parameter, e.g. an MLP);
    * ``cache_bytes`` -- all cached schemes together; ``attention_cache_bytes``
      -- all cached attention maps together.

    Server caps: ``max_connections`` handled at once (more wait up to
    ``connection_wait_s`` and then get a 503), ``read_timeout_s`` for a whole
    request (line, headers and body) to arrive, ``idle_timeout_s`` for a
    kept-alive connection, and ``listen_backlog``.
    """

    max_text_chars: int = 1000
    max_tokens: int = 64
    max_len: int = 256
    max_heads: int = 16
    max_head_dim: int = 256
    max_content_width: int = 1024  # n_heads * head_dim for the content-dependent schemes of view 2
    max_int_option: int = 4096
    max_shift_len: int = 64
    max_shift: int = 2048
    max_attention_bytes: int = 128
    max_query_bytes: int = 8192
    max_body_bytes: int = 8 * 1024 * 1024
    max_state_elems: int = 4 * 1024 * 1024
    max_flops: float = 2e10
    cache_bytes: int = 256 * 1024 * 1024
    attention_cache_bytes: int = 64 * 1024 * 1024
    max_json_depth: int = 32
    max_connections: int = 64
    connection_wait_s: float = 2.0
    read_timeout_s: float = 10.0
    idle_timeout_s: float = 15.0
    listen_backlog: int = 1024
