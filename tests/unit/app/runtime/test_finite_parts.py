"""``finite_parts``: a micro-batch's vectors cut into its jobs' parts, a part with a row that is not finite
replaced by the error naming that row within the part (one request's overflow never fails the others). It
checks the whole batch in one pass; the table holds it to the rule part by part (``check_finite``)."""

from __future__ import annotations

import numpy as np
import pytest

from lnserve.app.runtime.engine import check_finite, finite_parts
from lnserve.app.runtime.errors import EncodeInputError

# (rows of each job, rows of the batch that are not finite)
LAYOUTS = [
    ([1], []),
    ([1], [0]),
    ([3, 1, 2], []),
    ([3, 1, 2], [0]),
    ([3, 1, 2], [2, 3]),  # the last row of the first part and the whole second
    ([3, 1, 2], [5]),  # the last row of the batch
    ([3, 1, 2], [4, 5]),  # two rows of the last part: counted
    ([2, 2, 2, 2], [1, 2, 7]),
    ([1] * 9, list(range(0, 9, 2))),
]


@pytest.mark.parametrize(("sizes", "bad"), LAYOUTS)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_each_part_is_its_rows_or_the_error_of_its_first_bad_row(
    sizes: list[int], bad: list[int], value: float
) -> None:
    vectors = np.arange(sum(sizes) * 4, dtype=np.float32).reshape(-1, 4)
    vectors[bad, 1] = value
    parts = finite_parts(vectors, sizes, "sentence")
    assert len(parts) == len(sizes)
    start = 0
    for size, part in zip(sizes, parts, strict=True):
        rows = vectors[start : start + size]
        try:
            expected: np.ndarray | EncodeInputError = check_finite(rows, "sentence")
        except EncodeInputError as exc:
            expected = exc
        if isinstance(expected, EncodeInputError):
            assert isinstance(part, EncodeInputError) and str(part) == str(expected)
        else:
            assert isinstance(part, np.ndarray) and np.array_equal(part, expected)
        start += size
