"""The legacy cell-type names, importable without torch (the converters only need the names)."""

from __future__ import annotations

GRU_CELLS = ("gru", "lngru", "rlngru")
LSTM_CELLS = ("lstm", "lnlstm", "rlnlstm")
CELL_TYPES = GRU_CELLS + LSTM_CELLS
NORM_EPS = 1e-5  # inside the square root, for LayerNorm and RMSNorm alike (spec §3)
