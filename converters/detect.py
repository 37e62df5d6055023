"""Which cell a checkpoint holds: from ``options['encoder']`` and the keys present (spec §5.2).

The RMSNorm order-embedding release says ``lngru`` in its pkl but holds RMS weights; detect and say so.
An explicit override always wins (its keys are still checked).
"""

from __future__ import annotations

from collections.abc import Collection

from ..models.cell_types import CELL_TYPES, LSTM_CELLS
from .errors import UnknownCellTypeError


def detect_cell(
    encoder_option: str, keys: Collection[str], *, prefix: str, override: str | None = None
) -> tuple[str, str | None]:
    """Return (cell type, note for the user or None)."""
    if override is not None:
        if override not in CELL_TYPES:
            raise UnknownCellTypeError(
                f"unknown cell type {override!r}; expected one of {', '.join(CELL_TYPES)}"
            )
        note = None
        if override != encoder_option:
            note = f"cell type {override!r} given explicitly (the options say {encoder_option!r})"
        return override, note
    groups = "123" if encoder_option in LSTM_CELLS else "1234"
    has_s = [f"{prefix}_s{i}" in keys for i in groups]
    has_b = [f"{prefix}_b{i}" in keys for i in groups]
    base = (
        encoder_option[len("rln") :]
        if encoder_option.startswith("rln")
        else encoder_option.removeprefix("ln")
    )
    if base in ("gru", "lstm") and encoder_option in CELL_TYPES:
        if not any(has_s) and not any(has_b) and encoder_option == base:
            return base, None
        if all(has_s) and all(has_b) and encoder_option == "ln" + base:
            return encoder_option, None
        if all(has_s) and not any(has_b) and encoder_option in ("ln" + base, "rln" + base):
            if encoder_option == "ln" + base:
                return "rln" + base, (
                    f"options say {encoder_option!r} but the weights have only gains {prefix}_s* and no "
                    f"{prefix}_b*: reading them as RMSNorm ({'rln' + base!r}), as in the RMSNorm release"
                )
            return encoder_option, None
    raise UnknownCellTypeError(
        f"cannot tell the cell type: options say encoder={encoder_option!r}, norm gains present: "
        f"{sum(has_s)}/{len(groups)}, norm biases present: {sum(has_b)}/{len(groups)}; pass --cell to choose"
    )
