"""The order-embedding scoring methods (spec §7), importable without torch: the training loss, the
evaluation and the ``/score`` route all accept these names."""

from __future__ import annotations

METHODS = ("order", "cosine")
