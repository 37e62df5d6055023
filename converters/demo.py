"""A small deterministic RANDOM-weight LN-GRU order-embedding checkpoint, written in the exact legacy
on-disk format by our own code and converted through the same converter path as real checkpoints.

Its vectors are meaningless: it is a converter-path smoke model (benchmarks, tests). The model the service
serves by default is the trained demo shipped in ``app/demo_model/`` (see ``app.training.demo``).
"""

from __future__ import annotations

import collections
import pickle
import tempfile
from pathlib import Path

import numpy as np

from converters.order_embedding import read_order_embedding, write_order_embedding

DEMO_NAME = "random-lngru"
DEMO_SEED = 20240611
DEMO_WORDS = tuple(
    """
    a an the of on in with and to is are at by near next two three
    man woman person people child dog cat horse bird giraffe zebra elephant
    bus car train bike plane boat street road field beach table plate food
    pizza cake kite frisbee umbrella skateboard surfboard red blue green yellow white black small large big
    sitting standing riding walking eating holding playing flying circle square triangle
    """.split()
)
DEMO_DIMS = {"dim_word": 32, "dim": 64, "dim_image": 128}


def write_demo_checkpoint(prefix: Path) -> None:
    """Write ``PREFIX.npz`` + ``PREFIX.pkl`` exactly as the legacy trainer would (protocol-0 pickle)."""
    rng = np.random.default_rng(DEMO_SEED)
    dw, d, di = DEMO_DIMS["dim_word"], DEMO_DIMS["dim"], DEMO_DIMS["dim_image"]
    worddict = collections.OrderedDict((w, i + 2) for i, w in enumerate(DEMO_WORDS))
    n_words = len(worddict) + 2
    options = {
        "method": "order",
        "margin": 0.05,
        "abs": True,
        "encoder": "lngru",
        "dim": d,
        "dim_word": dw,
        "dim_image": di,
        "n_words": n_words,
        "data": "demo",
        "cnn": "demo",
        "max_epochs": 0,
        "dispFreq": 10,
        "grad_clip": 2.0,
        "optimizer": "adam",
        "batch_size": 128,
        "lrate": 1e-3,
        "validFreq": 300,
    }

    def u(*shape: int, scale: float = 0.1) -> np.ndarray:
        return rng.uniform(-scale, scale, size=shape).astype(np.float32)

    params = {
        "Wemb": u(n_words, dw),
        "encoder_W": u(dw, 2 * d),
        "encoder_b": u(2 * d),
        "encoder_U": u(d, 2 * d, scale=0.2),
        "encoder_Wx": u(dw, d),
        "encoder_Ux": u(d, d, scale=0.2),
        "encoder_bx": u(d),
        "ff_image_W": u(di, d),
        "ff_image_b": u(d),
    }
    for idx, size in (("1", 2 * d), ("2", d), ("3", 2 * d), ("4", d)):
        params[f"encoder_s{idx}"] = (1.0 + u(size)).astype(np.float32)
        params[f"encoder_b{idx}"] = u(size)
    np.savez(f"{prefix}.npz", **params)
    with open(f"{prefix}.pkl", "wb") as f:
        pickle.dump({"options": options, "worddict": worddict}, f, protocol=0)


def build_demo_artifact(out: Path, *, overwrite: bool = False) -> Path:
    """Generate the demo checkpoint in a scratch directory and convert it into ``out``."""
    with tempfile.TemporaryDirectory() as scratch:
        prefix = Path(scratch) / DEMO_NAME
        write_demo_checkpoint(prefix)
        model = read_order_embedding(prefix)
        write_order_embedding(model, out, name=DEMO_NAME, demo=True, overwrite=overwrite)
    return out
