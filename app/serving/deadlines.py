"""Request deadlines: the ``X-Request-Timeout-Ms`` header's parsing and the deadline a request carries into
the batcher."""

from __future__ import annotations

from .timing import current_timing

MAX_TIMEOUT_MS = 86_400_000.0  # a day: more is a typo


def parse_timeout_ms(value: str) -> float:
    """``X-Request-Timeout-Ms`` -> seconds. Raises ValueError with the reason."""
    try:
        ms = float(value)
    except ValueError:
        raise ValueError(
            f"X-Request-Timeout-Ms must be a number of milliseconds, got {value[:40]!r}"
        ) from None
    if not 0 < ms <= MAX_TIMEOUT_MS:  # also refuses nan
        raise ValueError(
            f"X-Request-Timeout-Ms must be > 0 and at most {MAX_TIMEOUT_MS:.0f}, got {value[:40]!r}"
        )
    return ms / 1000.0


def request_deadline_s(default: float | None) -> float | None:
    """The current request's queue deadline: its ``X-Request-Timeout-Ms``, else ``default``. None (no
    deadline) outside a request (the warm-up): there is no client to give up."""
    timing = current_timing.get()
    if timing is None:
        return None
    return default if timing.timeout_s is None else timing.timeout_s
