"""Request bodies that carry items counted against ``max_sentences`` say so themselves.

A body model that carries a list of texts, feature rows, items or queries derives from ``Counted`` and
gives ``item_count`` (and ``count_label``, the items' name in the error). Body parsing applies the limit
to every such model (``body_parsing``: a large body is refused in the parsing worker, before any Python
object of it exists in the server): a new route is count-limited by its body model alone, with nothing to
register elsewhere. ``tests/unit/app/http/test_counted_bodies.py`` checks that every route body with a list
derives from it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sized
from typing import ClassVar


class Counted:
    """A request body whose items count against ``max_sentences`` (a mixin of pydantic models, whose
    metaclass refuses to build one that lacks ``item_count``)."""

    count_label: ClassVar[str] = "items"  # what the items are called in the too_many_sentences error

    @abstractmethod
    def item_count(self) -> int:
        """How many items this body carries."""


def items_in(value: str | Sized) -> int:
    """One for a lone string (OpenAI's and TEI's ``input``), else the list's length."""
    return 1 if isinstance(value, str) else len(value)
