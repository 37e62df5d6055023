"""The embedded demo: a small LN-GRU order-embedding model trained on the synthetic world, shipped as
package data in ``app/demo_model/`` together with a gallery of held-out world images.

``make demo-model`` rebuilds it: ``lnserve train world`` -> ``lnserve train order-embedding --world`` ->
``lnserve eval`` on the held-out split -> ``python -m lnserve.app.training.demo ship`` (this module)
copies the artifact, the gallery data and the evaluation into ``app/demo_model/``.

Importing this module is cheap (no torch): the service reaches it only through
``lnserve.app.galleries.demo.shipped_demo`` (when it serves the demo).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from ...converters.artifact import MANIFEST, read_artifact
from ..demo_model.data import DEMO_DIR, EVAL_JSON, GALLERY_IMAGES, GALLERY_PAYLOADS, GALLERY_SIZE


def ship(
    model: Path, world: Path, eval_json: Path, *, out: Path = DEMO_DIR, size: int = GALLERY_SIZE
) -> None:
    """Replace the data in ``out`` with the artifact ``model``, the first ``size`` test images of ``world``
    with their scene payloads, and the ``lnserve eval`` result. ``out``'s Python modules (the package
    ``lnserve.app.demo_model`` and its accessors) stay: only data files are replaced."""
    artifact = read_artifact(model)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.suffix != ".py" and old.name != "__pycache__":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for name in [MANIFEST, *artifact.manifest["files"]]:
        (out / name).parent.mkdir(exist_ok=True)  # int8/: its calibration
        shutil.copy2(model / name, out / name)
    images = np.load(world / "test_ims.npy", allow_pickle=False)[:size]
    np.save(out / GALLERY_IMAGES, images.astype(np.float32))
    scenes = (world / "test_scenes.jsonl").read_text(encoding="utf-8").splitlines()[:size]
    (out / GALLERY_PAYLOADS).write_text("\n".join(scenes) + "\n", encoding="utf-8")
    shutil.copy2(eval_json, out / EVAL_JSON)
    read_artifact(out)


def main() -> None:
    parser = argparse.ArgumentParser(description="Copy a trained demo into app/demo_model/.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ship")
    p.add_argument("model", type=Path)
    p.add_argument("world", type=Path)
    p.add_argument("eval_json", type=Path)
    p.add_argument("--out", type=Path, default=DEMO_DIR)
    args = parser.parse_args()
    ship(args.model, args.world, args.eval_json, out=args.out)
    print(f"shipped {args.model} + gallery -> {args.out}")


if __name__ == "__main__":
    main()
