"""Train or fine-tune an order-embedding model with the original recipe (spec §7).

Sentence encoder (gru / lngru / rlngru) and linear image encoder into one space; the contrastive hinge over
all in-batch negatives in both directions; Adam; every gradient clipped separately at norm 2; batches of 128
(caption, image) pairs; ``<eos>`` appended to each caption; validation by caption->image R@1+R@5+R@10 on the
dev split (first 1,000 images at most), keeping the best parameters.

Determinism: the initial weights come from ``seed``, and the pair order of epoch e is a permutation drawn
from (seed, e), so an interrupted run resumed from its checkpoint replays exactly the batches it would have
seen and ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lnserve.errors import UserInputError

from ...models.cell_types import GRU_CELLS
from ...models.encoders import OrderEmbedding, OrderEmbeddingConfig
from ...models.init import RECURRENT_INITS, init_order_embedding
from ...models.losses import DEFAULT_MARGINS, clip_each_gradient, contrastive_loss
from ...models.methods import METHODS
from ...models.tokenize import coco_tokens
from ..runtime import scoring
from ..runtime.errors import EncodeInputError
from ..runtime.evaluation import rank_stats, t2i_ranks
from ..runtime.text import OrderVocabulary
from .checkpoint import save_checkpoint

FIRST_WORD = 2  # after <eos> (0) and UNK (1)
VALID_IMAGES = 1000  # the original validated on dev fold 0: 1,000 images


@dataclass(frozen=True)
class TrainConfig:
    """The recipe; defaults are the published order-embeddings settings (``driver.py``)."""

    cell: str = "gru"
    init: str = "orthogonal"
    gain: float | None = None  # the initialiser's gain; None: its default (models.init.DEFAULT_GAINS)
    init_diag: float = 0.0  # the a of chain / fbchain (a * I)
    dim: int = 1024
    dim_word: int = 300
    method: str = "order"
    margin: float | None = None  # None: 0.05 for order, 0.2 for cosine
    epochs: int = 100
    batch_size: int = 128
    lr: float = 1e-3
    grad_clip: float = 2.0
    seed: int = 1234
    valid_freq: int = 300  # updates between validations (also at the end of every epoch)
    partial_rms: float = 1.0  # pRMSNorm fraction, rlngru only

    @property
    def loss_margin(self) -> float:
        return DEFAULT_MARGINS[self.method] if self.margin is None else self.margin

    def check(self) -> None:
        problems = []
        if self.cell not in GRU_CELLS:
            problems.append(f"cell must be one of {', '.join(GRU_CELLS)}, got {self.cell!r}")
        if self.init not in RECURRENT_INITS:
            problems.append(f"init must be one of {', '.join(RECURRENT_INITS)}, got {self.init!r}")
        if self.method not in METHODS:
            problems.append(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not 0.0 < self.partial_rms <= 1.0:
            problems.append(f"partial RMSNorm fraction must be in (0, 1], got {self.partial_rms}")
        elif self.partial_rms != 1.0 and self.cell != "rlngru":
            problems.append(f"partial RMSNorm needs the rlngru cell, not {self.cell!r}")
        if min(self.dim, self.dim_word, self.epochs, self.batch_size, self.valid_freq) < 1:
            problems.append("dim, dim-word, epochs, batch-size and valid-freq must be positive")
        if problems:
            raise UserInputError("; ".join(problems))


# Fields that may differ between a run and its resumption (they do not change what was already computed).
_RESUMABLE = ("epochs",)


@dataclass
class PairData:
    """Captions and image features; captions k*i .. k*i+k-1 describe image i (k = ``per_image``)."""

    captions: list[str]
    images: np.ndarray  # (N, dim_image) float32
    per_image: int = field(init=False)

    def __post_init__(self) -> None:
        n_img = self.images.shape[0] if self.images.ndim == 2 else 0
        if n_img == 0 or len(self.captions) % n_img or not self.captions:
            raise EncodeInputError(
                f"{len(self.captions)} captions for images of shape {self.images.shape}: need a 2-d feature "
                "matrix and the same number k >= 1 of captions per image (captions k*i..k*i+k-1 for image i)"
            )
        self.per_image = len(self.captions) // n_img

    @functools.cached_property
    def digest(self) -> str:
        """Identifies the data a checkpoint was trained on; computed once (checkpoints are frequent)."""
        h = hashlib.sha256("\n".join(self.captions).encode("utf-8"))
        h.update(np.ascontiguousarray(self.images, dtype=np.float32).data.cast("B"))
        return h.hexdigest()


def build_vocab(caption_sets: Sequence[Sequence[str]]) -> dict[str, int]:
    """Words by descending frequency from id 2 (0 = <eos>, 1 = UNK); ties keep first-seen order, as the
    original's stable ``sorted`` over an insertion-ordered count does."""
    counts: Counter[str] = Counter()
    for caps in caption_sets:
        for c in caps:
            counts.update(coco_tokens(c))
    ranked = sorted(counts, key=lambda w: -counts[w])  # Counter keeps insertion order; sorted is stable
    return {w: FIRST_WORD + i for i, w in enumerate(ranked)}


def caption_ids(captions: Sequence[str], worddict: dict[str, int], n_words: int) -> list[list[int]]:
    """Token ids with <eos> appended, looked up exactly as the runtime does when it serves the model."""
    vocab = OrderVocabulary(worddict, n_words)
    return [vocab.ids(coco_tokens(c), eos=True) for c in captions]


def pad_batch(seqs: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded time-major ids (T, B) and lengths (B,)."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.zeros(int(lengths.max()), len(seqs), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[: len(s), b] = torch.tensor(s)
    return ids.to(device), lengths.to(device)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserInputError("--device cuda: no CUDA device is available to torch")
    if name not in ("cpu", "cuda"):
        raise UserInputError(f"device must be cpu, cuda or auto, got {name!r}")
    return torch.device(name)


@dataclass
class Progress:
    """What the progress display is told after each update."""

    epoch: int
    epochs: int
    step: int
    steps_per_epoch: int
    loss: float
    recall: float | None


@dataclass
class TrainResult:
    finished: bool  # False: stopped by ``max_steps`` (the checkpoint allows resuming)
    step: int
    best_step: int
    best_score: float | None  # dev R@1+R@5+R@10 (caption->image)
    best_dev: dict[str, float] | None
    losses: list[float]  # mean loss per pair of every update
    model: OrderEmbedding


class Trainer:
    """One training run: model, optimiser, data, and the state a checkpoint saves."""

    def __init__(
        self,
        cfg: TrainConfig,
        train: PairData,
        dev: PairData | None,
        *,
        device: torch.device,
        worddict: dict[str, int] | None = None,
        n_words: int | None = None,
        init_state: dict[str, torch.Tensor] | None = None,
        use_abs: bool | None = None,
    ) -> None:
        cfg.check()
        self.cfg, self.train_data, self.dev, self.device = cfg, train, dev, device
        sets = [train.captions] + ([dev.captions] if dev else [])
        self.worddict = worddict if worddict is not None else build_vocab(sets)
        if n_words is None:  # the original's len(worddict) + 2
            n_words = max(FIRST_WORD, max(self.worddict.values(), default=0) + 1)
        self.model_cfg = OrderEmbeddingConfig(
            cell=cfg.cell,
            n_words=n_words,
            dim_word=cfg.dim_word,
            dim=cfg.dim,
            dim_image=int(train.images.shape[1]),
            use_abs=cfg.method == "order" if use_abs is None else use_abs,
            partial_rms=cfg.partial_rms,
        )
        self.model = OrderEmbedding(self.model_cfg)
        if init_state is None:
            init_order_embedding(self.model, kind=cfg.init, gain=cfg.gain, diag=cfg.init_diag, seed=cfg.seed)
        else:
            self.model.load_state_dict(init_state, strict=True)
        self.model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.train_ids = caption_ids(train.captions, self.worddict, self.model_cfg.n_words)
        self.train_images = torch.from_numpy(np.ascontiguousarray(train.images, dtype=np.float32)).to(device)
        self.epoch = self.batch = self.step = 0
        self.best_score: float | None = None
        self.best_step = 0
        self.best_dev: dict[str, float] | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.losses: list[float] = []

    # -- data order -----------------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The caption indices of every batch of ``epoch``: a permutation drawn from (seed, epoch)."""
        perm = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.train_ids))
        bs = self.cfg.batch_size
        return [perm[i : i + bs] for i in range(0, len(perm), bs)]

    # -- one update -----------------------------------------------------------------------------------
    def update(self, idx: np.ndarray) -> float:
        self.model.train()
        ids, lengths = pad_batch([self.train_ids[i] for i in idx], self.device)
        images = self.train_images[torch.as_tensor(idx // self.train_data.per_image, device=self.device)]
        s = self.model.sentence(ids, lengths)
        v = self.model.image(images)
        loss = contrastive_loss(s, v, method=self.cfg.method, margin=self.cfg.loss_margin)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_each_gradient(list(self.model.parameters()), self.cfg.grad_clip)
        self.optimizer.step()
        return float(loss.item()) / len(idx)

    # -- validation -----------------------------------------------------------------------------------
    @torch.no_grad()
    def embed(self, data: PairData, n_images: int) -> tuple[np.ndarray, np.ndarray]:
        """Caption and image embeddings of the first ``n_images`` images and their captions."""
        self.model.eval()
        k = data.per_image
        ids = caption_ids(data.captions[: k * n_images], self.worddict, self.model_cfg.n_words)
        caps = []
        for start in range(0, len(ids), 256):
            batch = pad_batch(ids[start : start + 256], self.device)
            caps.append(self.model.sentence(*batch).cpu())
        ims = torch.from_numpy(np.ascontiguousarray(data.images[:n_images], dtype=np.float32)).to(self.device)
        return torch.cat(caps).numpy(), self.model.image(ims).cpu().numpy()

    def validate(self) -> dict[str, float] | None:
        """Caption->image rank statistics on the dev split (the original's model-selection criterion)."""
        if self.dev is None:
            return None
        n = min(VALID_IMAGES, self.dev.images.shape[0])
        s, v = self.embed(self.dev, n)
        errs = scoring.error_matrix(s, v, self.cfg.method)  # chunked: (N, M, dim) would not fit at dim 1024
        return rank_stats(t2i_ranks(errs, self.dev.per_image)).as_dict()

    def _after_validation(self, stats: dict[str, float] | None) -> float | None:
        score = None if stats is None else stats["r1"] + stats["r5"] + stats["r10"]
        if score is None or self.best_score is None or score > self.best_score:
            self.best_score, self.best_step, self.best_dev = score, self.step, stats
            self.best_state = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
        return score

    # -- the loop -------------------------------------------------------------------------------------
    def run(
        self,
        *,
        checkpoints: Path | None = None,
        max_steps: int | None = None,
        on_update: Callable[[Progress], None] | None = None,
    ) -> TrainResult:
        """Train until ``cfg.epochs`` are done or ``max_steps`` updates have been made in total; checkpoint
        after every validation, at every epoch end and when stopping early."""
        recall: float | None = None if self.best_score is None else self.best_score
        while self.epoch < self.cfg.epochs:
            batches = self.epoch_batches(self.epoch)
            while self.batch < len(batches):
                if max_steps is not None and self.step >= max_steps:
                    if checkpoints is not None:
                        save_checkpoint(checkpoints, self.state())
                    return self._result(finished=False)
                loss = self.update(batches[self.batch])
                self.batch += 1
                self.step += 1
                self.losses.append(loss)
                if self.step % self.cfg.valid_freq == 0:
                    recall = self._after_validation(self.validate())
                    if checkpoints is not None:
                        save_checkpoint(checkpoints, self.state())
                if on_update is not None:
                    on_update(Progress(self.epoch, self.cfg.epochs, self.step, len(batches), loss, recall))
            self.epoch, self.batch = self.epoch + 1, 0
            if self.step % self.cfg.valid_freq:
                recall = self._after_validation(self.validate())
            if checkpoints is not None:
                save_checkpoint(checkpoints, self.state())
        return self._result(finished=True)

    def _result(self, *, finished: bool) -> TrainResult:
        model = copy.deepcopy(self.model).cpu()
        if finished and self.best_state is not None:
            model.load_state_dict(self.best_state)
        return TrainResult(
            finished,
            self.step,
            self.best_step,
            self.best_score,
            self.best_dev,
            list(self.losses),
            model.eval(),
        )

    # -- checkpoints ----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "config": asdict(self.cfg),
            "model_config": asdict(self.model_cfg),
            "worddict": dict(self.worddict),
            "train_digest": self.train_data.digest,
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "batch": self.batch,
            "step": self.step,
            "best": {
                "score": self.best_score,
                "step": self.best_step,
                "dev": self.best_dev,
                "state": self.best_state,
            },
            "losses": list(self.losses),
        }

    def restore(self, payload: dict[str, Any]) -> None:
        """Continue from ``payload`` (a checkpoint of a run with the same recipe and data)."""
        saved = TrainConfig(**payload["config"])
        if replace(saved, **{k: getattr(self.cfg, k) for k in _RESUMABLE}) != self.cfg:
            raise UserInputError(
                "--resume: the checkpoint was written with another recipe; only --epochs may change "
                f"(checkpoint: {payload['config']})"
            )
        if payload["train_digest"] != self.train_data.digest or payload["worddict"] != self.worddict:
            raise UserInputError("--resume: the training data or vocabulary differ from the checkpoint's")
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.epoch, self.batch, self.step = payload["epoch"], payload["batch"], payload["step"]
        best = payload["best"]
        self.best_score, self.best_step, self.best_dev = best["score"], best["step"], best["dev"]
        self.best_state = best["state"]
        self.losses = list(payload["losses"])


# -- output -----------------------------------------------------------------------------------------------
def legacy_options(trainer: Trainer, *, data: str = "custom") -> dict[str, Any]:
    """The run's settings under the original option names (spec §5.2), for the manifest and ``.pkl``."""
    cfg, mc = trainer.cfg, trainer.model_cfg
    return {
        "method": cfg.method,
        "margin": cfg.loss_margin,
        "abs": mc.use_abs,
        "max_epochs": cfg.epochs,
        "data": data,
        "cnn": data,
        "dim_image": mc.dim_image,
        "encoder": cfg.cell,
        "dispFreq": 10,
        "grad_clip": cfg.grad_clip,
        "optimizer": "adam",
        "batch_size": cfg.batch_size,
        "dim": mc.dim,
        "dim_word": mc.dim_word,
        "lrate": cfg.lr,
        "validFreq": cfg.valid_freq,
        "n_words": mc.n_words,
    }


def write_trained(
    result: TrainResult,
    trainer: Trainer,
    out: Path,
    *,
    name: str,
    data: str = "custom",
    demo: bool = False,
    description: str = "",
    training: dict[str, Any] | None = None,
    legacy_prefix: Path | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the best parameters as an artifact (the converters' format) and optionally as the legacy
    ``PREFIX.npz`` + ``PREFIX.pkl``; returns the manifest."""
    from ...converters.order_embedding import (
        ConvertedOrderEmbedding,
        write_legacy_order_embedding,
        write_order_embedding,
    )

    cfg = trainer.cfg
    options = legacy_options(trainer, data=data)
    tensors = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in result.model.state_dict().items()}
    if legacy_prefix is not None:
        if cfg.partial_rms != 1.0:
            raise UserInputError(
                "--legacy-out: the legacy format has no partial RMSNorm (use --partial-rms 1)"
            )
        legacy_prefix.parent.mkdir(parents=True, exist_ok=True)
        write_legacy_order_embedding(
            legacy_prefix, cell=cfg.cell, options=options, worddict=trainer.worddict, tensors=tensors
        )
    record = {
        "trainer": "lnserve train order-embedding",
        "torch": torch.__version__,
        "config": asdict(cfg),
        "steps": result.step,
        "best_step": result.best_step,
        "dev_t2i": result.best_dev,
        "train_digest": trainer.train_data.digest,
        **(training or {}),
    }
    notes = [f"trained by lnserve ({result.step} updates, best dev step {result.best_step})"]
    model = ConvertedOrderEmbedding(cfg.cell, options, dict(trainer.worddict), tensors, notes, {})
    return write_order_embedding(
        model,
        out,
        name=name,
        demo=demo,
        description=description,
        partial_rms=cfg.partial_rms,
        extra={"training": record},
        overwrite=overwrite,
    )
