"""The six raw legacy layers (gru, lngru, rlngru, lstm, lnlstm, rlnlstm) step by step, holes in the mask
included, against the original layer functions' outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lnserve.converters.param_map import cell_state_dict, check_params, expected_cell_shapes
from lnserve.models.cells import CELL_TYPES
from lnserve.models.recurrence import Recurrence
from tests.conftest import LEGACY, golden


@pytest.mark.parametrize("cell", CELL_TYPES)
def test_raw_layer_states(cell: str) -> None:
    with np.load(LEGACY / "raw_layers" / "params.npz") as p:
        params = {k: p[k] for k in p.files}
    with np.load(LEGACY / "raw_layers" / "inputs.npz") as i:
        x, mask = i["state_below"], i["mask"]
    n_in, d = x.shape[2], params[f"{cell}_U"].shape[0]
    check_params(params, expected_cell_shapes(cell, cell, n_in, d), source="params.npz")
    rnn = Recurrence(cell, n_in, d)
    state = {k: torch.from_numpy(v) for k, v in cell_state_dict(params, cell, cell).items()}
    rnn.cell.load_state_dict(state, strict=True)
    with torch.inference_mode():
        states = rnn(torch.from_numpy(x), torch.from_numpy(mask > 0))
    gold = golden("raw_layers")
    h = np.stack([s[0].numpy() for s in states])
    assert np.abs(h - gold[f"{cell}_h"]).max() <= 1e-5
    assert np.abs(h[-1] - gold[f"{cell}_h_last"]).max() <= 1e-5
    if cell.endswith("lstm"):
        c = np.stack([s[1].numpy() for s in states])
        assert np.abs(c - gold[f"{cell}_c"]).max() <= 1e-5
