"""A small synthetic image-caption world: coloured shapes at positions, and captions that describe them.

An image holds 1-3 objects, each a (shape, colour, position) with distinct positions. Its feature vector
is a spatial map with one slot of ``SLOT_DIM`` features per position, like a tiny CNN grid: a slot holding
an object gets shape code + colour code + a code of the (shape, colour) pair, so "a red circle and a blue
square" differs from "a blue circle and a red square" (an additive code could not tell them apart).
Gaussian noise everywhere, then row-L2 normalisation, as the original VGG features were. Every image has
five captions, most naming all its objects (with or without positions), one naming a single object: the
partial descriptions an order embedding places above the images they describe.

Everything derives from one seed through NumPy's PCG64, so the same seed gives the same world.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
POSITIONS = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "middle": "in the middle",
}
SLOT_DIM = 24
DIM_IMAGE = SLOT_DIM * len(POSITIONS)
CAPTIONS_PER_IMAGE = 5
OBJECT_COUNTS = ((1, 0.4), (2, 0.35), (3, 0.25))
NOISE = 0.05
SPLITS = {"train": 6000, "dev": 500, "test": 1000}
DEMO_WORLD_SEED = 20260807
_NUMBERS = {2: "two", 3: "three"}


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    position: str

    def phrase(self, *, position: bool) -> str:
        article = "an" if self.colour[0] in "aeiou" else "a"
        text = f"{article} {self.colour} {self.shape}"
        return f"{text} {POSITIONS[self.position]}" if position else text

    def as_dict(self) -> dict[str, str]:
        return {"shape": self.shape, "colour": self.colour, "position": self.position}


@dataclass
class Split:
    """One split: features (N, DIM_IMAGE), 5 captions per image (captions 5i..5i+4 describe image i)."""

    images: np.ndarray
    captions: list[str]
    scenes: list[list[Obj]]


class World:
    """The codes that turn scenes into features, drawn once from the seed."""

    def __init__(self, seed: int = DEMO_WORLD_SEED) -> None:
        self.seed = seed
        rng = np.random.default_rng([seed, 0])
        scale = 1.0 / np.sqrt(SLOT_DIM)
        self.shape_code = rng.normal(0, scale, (len(SHAPES), SLOT_DIM))
        self.colour_code = rng.normal(0, scale, (len(COLOURS), SLOT_DIM))
        self.pair_code = rng.normal(0, scale, (len(SHAPES), len(COLOURS), SLOT_DIM))

    def features(self, scene: list[Obj], rng: np.random.Generator) -> np.ndarray:
        x = rng.normal(0, NOISE, DIM_IMAGE)
        for obj in scene:
            s, c = SHAPES.index(obj.shape), COLOURS.index(obj.colour)
            p = list(POSITIONS).index(obj.position)
            x[p * SLOT_DIM : (p + 1) * SLOT_DIM] += (
                self.shape_code[s] + self.colour_code[c] + self.pair_code[s, c]
            )
        return (x / np.linalg.norm(x)).astype(np.float32)

    def split(self, name: str, n_images: int) -> Split:
        """``n_images`` scenes with features and captions; each split has its own stream."""
        rng = np.random.default_rng([self.seed, 1 + list(SPLITS).index(name) if name in SPLITS else 99])
        scenes = [random_scene(rng) for _ in range(n_images)]
        images = np.stack([self.features(sc, rng) for sc in scenes])
        captions = [c for sc in scenes for c in describe(sc, rng)]
        return Split(images, captions, scenes)


def random_scene(rng: np.random.Generator) -> list[Obj]:
    counts, probs = zip(*OBJECT_COUNTS, strict=True)
    k = int(rng.choice(counts, p=probs))
    positions = rng.choice(list(POSITIONS), size=k, replace=False)
    return [
        Obj(SHAPES[rng.integers(len(SHAPES))], COLOURS[rng.integers(len(COLOURS))], str(p)) for p in positions
    ]


def _listing(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def describe(scene: list[Obj], rng: np.random.Generator) -> list[str]:
    """Five captions: full with positions (twice, objects in random order), full without positions, a
    counted or "there is" form, and one object alone (with or without its position)."""

    def shuffled() -> list[Obj]:
        return [scene[i] for i in rng.permutation(len(scene))]

    full_pos = [_listing([o.phrase(position=True) for o in shuffled()]) for _ in range(2)]
    full = _listing([o.phrase(position=False) for o in shuffled()])
    if len(scene) > 1 and rng.random() < 0.5:
        counted = f"{_NUMBERS[len(scene)]} shapes : {full}"
    else:
        counted = f"there is {_listing([o.phrase(position=bool(rng.random() < 0.5)) for o in shuffled()])}"
    one = scene[rng.integers(len(scene))].phrase(position=bool(rng.random() < 0.5))
    return [full_pos[0], full, full_pos[1], counted, one]


def scene_payload(scene: list[Obj]) -> dict[str, Any]:
    """What a gallery item says about its image: the full description and the objects."""
    return {
        "description": _listing([o.phrase(position=True) for o in scene]),
        "objects": [o.as_dict() for o in scene],
    }


def write_world(
    out: Path, *, seed: int = DEMO_WORLD_SEED, sizes: dict[str, int] | None = None
) -> dict[str, Any]:
    """Write ``{split}_caps.txt``, ``{split}_ims.npy`` and ``{split}_scenes.jsonl`` per split plus
    ``world.json``; returns the world description."""
    out.mkdir(parents=True, exist_ok=True)
    world = World(seed)
    sizes = dict(sizes or SPLITS)
    for name, n in sizes.items():
        split = world.split(name, n)
        np.save(out / f"{name}_ims.npy", split.images)
        (out / f"{name}_caps.txt").write_text("\n".join(split.captions) + "\n", encoding="utf-8")
        with (out / f"{name}_scenes.jsonl").open("w", encoding="utf-8") as f:
            for sc in split.scenes:
                f.write(json.dumps(scene_payload(sc)) + "\n")
    info = {
        "generator": "lnserve.app.training.world",
        "seed": seed,
        "splits": sizes,
        "dim_image": DIM_IMAGE,
        "captions_per_image": CAPTIONS_PER_IMAGE,
        "shapes": list(SHAPES),
        "colours": list(COLOURS),
        "positions": list(POSITIONS),
    }
    (out / "world.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info
