"""The legacy cell-type names, importable without torch (the converters only need the names)."""

from __future__ import annotations

GRU_CELLS = ("gru", "lngru", "rlngru")
LSTM_CELLS = ("lstm", "lnlstm", "rlnlstm")
CELL_TYPES = GRU_CELLS + LSTM_CELLS
