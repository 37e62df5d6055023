"""Training: the loss goes down, resuming equals not stopping, fine-tuning a converted artifact, the
``--legacy-out`` round trip through ``lnserve convert``, and pRMSNorm artifacts on the runtime."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.errors import ProviderUnavailableError
from lnserve.app.training.trainer import PairData, TrainConfig, Trainer, build_vocab
from lnserve.app.training.world import World
from tests.conftest import run_cli

TINY = TrainConfig(cell="lngru", dim=16, dim_word=8, batch_size=32, epochs=2, valid_freq=4, seed=3)


@pytest.fixture(scope="module")
def world() -> tuple[PairData, PairData]:
    w = World(seed=11)
    tr, dv = w.split("train", 48), w.split("dev", 12)
    return PairData(tr.captions, tr.images), PairData(dv.captions, dv.images)


def _run(cfg: TrainConfig, data: tuple[PairData, PairData], **kw: object) -> Trainer:
    trainer = Trainer(cfg, data[0], data[1], device=torch.device("cpu"))
    trainer.run(**kw)  # type: ignore[arg-type]
    return trainer


def test_vocabulary_by_descending_frequency_from_id_2() -> None:
    assert build_vocab([["b a a", "c b a"]]) == {"a": 2, "b": 3, "c": 4}


@pytest.mark.slow  # over 10 s
@pytest.mark.parametrize("cell", ["gru", "lngru", "rlngru"])
def test_a_few_steps_reduce_the_loss(world: tuple[PairData, PairData], cell: str) -> None:
    cfg = replace(TINY, cell=cell, epochs=12, batch_size=48, lr=1e-2, valid_freq=1000)
    losses = _run(cfg, world).losses
    assert len(losses) == 60
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


@pytest.mark.slow  # over 10 s
def test_seeded_runs_are_identical(world: tuple[PairData, PairData]) -> None:
    a, b = _run(TINY, world), _run(TINY, world)
    assert a.losses == b.losses


def test_resume_equals_an_uninterrupted_run(world: tuple[PairData, PairData], tmp_path: Path) -> None:
    whole = _run(TINY, world, checkpoints=tmp_path / "whole")
    first = Trainer(TINY, world[0], world[1], device=torch.device("cpu"))
    stopped = first.run(checkpoints=tmp_path / "cut", max_steps=5)  # mid-epoch, between validations
    assert not stopped.finished and stopped.step == 5
    from lnserve.app.training.checkpoint import load_checkpoint

    second = Trainer(TINY, world[0], world[1], device=torch.device("cpu"))
    second.restore(load_checkpoint(tmp_path / "cut"))
    done = second.run(checkpoints=tmp_path / "cut")
    assert done.finished and second.losses == whole.losses
    assert (second.best_step, second.best_score) == (whole.best_step, whole.best_score)
    for key, value in whole.model.state_dict().items():
        assert torch.equal(value, second.model.state_dict()[key]), key


def _write_pairs(tmp: Path, data: PairData, stem: str) -> tuple[Path, Path]:
    caps, ims = tmp / f"{stem}_caps.txt", tmp / f"{stem}_ims.npy"
    caps.write_text("\n".join(data.captions) + "\n", encoding="utf-8")
    np.save(ims, data.images)
    return caps, ims


def test_legacy_out_round_trips_through_convert(world: tuple[PairData, PairData], tmp_path: Path) -> None:
    caps, ims = _write_pairs(tmp_path, world[0], "train")
    dcaps, dims = _write_pairs(tmp_path, world[1], "dev")
    common = ["--captions", str(caps), "--images", str(ims), "--dev-captions", str(dcaps)]
    run_cli(
        *("train", "order-embedding", *common, "--dev-images", str(dims), "--cell", "rlngru"),
        *("--dim", "12", "--dim-word", "6", "--epochs", "2", "--batch-size", "32", "--valid-freq", "3"),
        *("--device", "cpu", "--out", str(tmp_path / "trained"), "--legacy-out", str(tmp_path / "legacy/m")),
        check=True,
    )
    run_cli(
        "convert", "order-embedding", str(tmp_path / "legacy/m"), "--out", str(tmp_path / "conv"), check=True
    )
    trained, conv = (Engine.open(tmp_path / d, backend="torch") for d in ("trained", "conv"))
    assert conv.artifact.manifest["cell"] == "rlngru"
    texts = world[1].captions[:20]
    np.testing.assert_allclose(trained.encode_sentences(texts), conv.encode_sentences(texts), atol=1e-6)
    np.testing.assert_allclose(
        trained.encode_images(world[1].images), conv.encode_images(world[1].images), atol=1e-6
    )
    training = trained.artifact.manifest["training"]
    assert training["config"]["cell"] == "rlngru"
    assert training["steps"] == 16  # 240 captions / 32 = 8 batches, 2 epochs


def test_fine_tune_a_converted_artifact(artifacts: dict[str, Path], tmp_path: Path) -> None:
    source = Engine.open(artifacts["oe_order_lngru"], backend="torch")
    vocab = list(source.vocab.worddict)[:12]  # type: ignore[union-attr]
    rng = np.random.default_rng(0)
    captions = [" ".join(rng.choice(vocab, size=5)) for _ in range(40)]
    images = rng.random((8, 20)).astype(np.float32)
    caps, ims = tmp_path / "c.txt", tmp_path / "i.npy"
    caps.write_text("\n".join(captions) + "\n", encoding="utf-8")
    np.save(ims, images)
    out = tmp_path / "tuned"
    run_cli(
        *("train", "order-embedding", "--from-artifact", str(artifacts["oe_order_lngru"])),
        *("--captions", str(caps), "--images", str(ims), "--epochs", "2", "--batch-size", "16"),
        *("--device", "cpu", "--out", str(out), "--quiet"),
        check=True,
    )
    tuned = Engine.open(out, backend="torch")
    m, src = tuned.artifact.manifest, source.artifact.manifest
    assert (m["cell"], m["dims"], m["options"]["abs"]) == (src["cell"], src["dims"], src["options"]["abs"])
    assert json.loads((out / "vocab.json").read_text()) == json.loads(
        (artifacts["oe_order_lngru"] / "vocab.json").read_text()
    )
    before, after = source.encode_sentences(captions[:4]), tuned.encode_sentences(captions[:4])
    assert np.abs(before - after).max() > 1e-4  # the weights moved


def test_partial_rms_artifact_runs_on_torch_and_refuses_strict_onnx(
    world: tuple[PairData, PairData], tmp_path: Path
) -> None:
    from lnserve.app.training.trainer import write_trained

    cfg = replace(TINY, cell="rlngru", partial_rms=0.5, epochs=1)
    trainer = Trainer(cfg, world[0], world[1], device=torch.device("cpu"))
    result = trainer.run()
    manifest = write_trained(result, trainer, tmp_path / "p", name="p")
    assert manifest["cell_options"] == {"partial_rms": 0.5}
    engine = Engine.open(tmp_path / "p", backend="onnx")  # falls back: no ONNX graph for pRMSNorm
    assert engine.backend.name == "torch"
    assert engine.backend.module.sentence.rnn.cell.norm_ih_ru.stat_size == 16  # floor(0.5 * 2d)
    with torch.no_grad():
        ids = [[2, 3, 4, 0]]
        want = result.model.sentence(torch.tensor(ids).T, torch.tensor([4])).numpy()
    np.testing.assert_allclose(engine.encode_ids(ids, normalize=True), want, atol=1e-6)
    with pytest.raises(ProviderUnavailableError, match="partial RMSNorm"):
        Engine.open(tmp_path / "p", backend="onnx", strict=True)
    with pytest.raises(Exception, match="legacy format has no partial"):
        write_trained(result, trainer, tmp_path / "q", name="q", legacy_prefix=tmp_path / "q_legacy")
