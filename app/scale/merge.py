"""Exact merge of per-shard top-k lists into the single-process top-k.

A gallery sharded by item answers a query with one exact top-k per shard. The single-process store orders
hits by score (best first) and breaks ties by the item's position in the gallery (insertion order). Each
shard reports, with every hit, the position the item would have had in one store (its *global* position),
so sorting the union by (score key, global position) and keeping k gives exactly the single-process list:
every member of the global top-k is within its own shard's top-k, and each shard's list is already sorted
by that same key (a shard's local insertion order follows the global one).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Hit = dict[str, Any]  # {"id", "score", "payload", "pos"}: pos is the item's global position


def sort_key(direction: str) -> Callable[[Hit], tuple[float, int]]:
    """(key, position) where a smaller key is better, as the store's selection does."""
    if direction == "lower_is_better":
        return lambda h: (h["score"], h["pos"])
    if direction == "higher_is_better":
        return lambda h: (-h["score"], h["pos"])
    raise ValueError(f"unknown score direction {direction!r}")


def merge_top_k(shard_lists: Iterable[Sequence[Hit]], k: int, direction: str) -> list[Hit]:
    """The best ``k`` hits of the union of per-shard lists, each already sorted best first.

    Ties (equal scores) go to the smaller global position, as in one store. ``pos`` is dropped from the
    returned hits so that they are exactly what the single-process store returns.
    """
    key = sort_key(direction)
    merged = heapq.merge(*shard_lists, key=key)
    return [{k_: v for k_, v in h.items() if k_ != "pos"} for h in itertools.islice(merged, k)]


def merge_results(per_shard: Sequence[Sequence[Sequence[Hit]]], k: int, direction: str) -> list[list[Hit]]:
    """Per query: ``merge_top_k`` of that query's list from every shard (``per_shard[shard][query]``)."""
    if not per_shard:
        return []
    n_queries = len(per_shard[0])
    if any(len(lists) != n_queries for lists in per_shard):
        raise ValueError("shards answered different numbers of queries")
    return [merge_top_k([lists[q] for lists in per_shard], k, direction) for q in range(n_queries)]
