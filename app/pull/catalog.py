"""The published checkpoint sets lnserve knows how to fetch, with their addresses as given in the original
projects' READMEs (see the spec, §5.2-§5.4).

Sizes and sha256 sums are ``None`` where no trustworthy figure exists: a guessed checksum would only turn a
good download into an error. ``size_hint`` carries the READMEs' rough figures for ``pull --list``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import UnknownCatalogEntryError

_TORONTO_RKIROS = "http://www.cs.toronto.edu/~rkiros"
_SKIP_MODELS = f"{_TORONTO_RKIROS}/models"
_VENDROV_ZIP = "http://www.cs.toronto.edu/~vendrov/order/models.zip"
_RMSNORM_OE = "http://data.statmt.org/bzhang/neurips19_rmsnorm/oe"


@dataclass(frozen=True)
class RemoteFile:
    """One file to download; an archive also names the members to extract (member path -> local name)."""

    url: str
    size: int | None = None  # exact bytes, when known
    sha256: str | None = None
    size_hint: str | None = None  # a README's rough figure, for display only
    members: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return posixpath.basename(urlsplit(self.url).path)

    @property
    def provides(self) -> tuple[str, ...]:
        """The local file names this source yields: the members of an archive, else the file itself."""
        return tuple(self.members.values()) if self.members else (self.filename,)


@dataclass(frozen=True)
class CatalogEntry:
    """A published set and how to convert it.

    ``converter`` is ``order-embedding`` (``args['prefix']`` names PREFIX.npz + PREFIX.pkl),
    ``skip-thoughts`` (``args['uni']`` / ``args['bi']`` name the .npz files; the tables sit beside them) or
    ``skip-thoughts-training`` (``args['model']`` names MODEL.npz). ``user_files`` names files the set
    needs that were never published (pull option -> why), so ``pull`` asks for them before downloading.
    """

    name: str
    family: str
    cell: str  # the cell the converter is expected to detect
    description: str
    origin: str  # where the addresses come from
    files: tuple[RemoteFile, ...]
    converter: str
    args: Mapping[str, str]
    user_files: Mapping[str, str] = field(default_factory=dict)

    @property
    def local_names(self) -> tuple[str, ...]:
        return tuple(n for f in self.files for n in f.provides)

    def size_label(self) -> str:
        sizes = [f.size for f in self.files]
        if all(s is not None for s in sizes):
            return _human(sum(s for s in sizes if s is not None))
        hints = [f.size_hint for f in self.files if f.size_hint]
        return ", ".join(hints) if hints else "unknown"


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _oe_pair(base: str, prefix: str) -> tuple[RemoteFile, RemoteFile]:
    return RemoteFile(f"{base}/{prefix}.npz"), RemoteFile(f"{base}/{prefix}.pkl")


def _vendrov(name: str) -> RemoteFile:
    return RemoteFile(
        _VENDROV_ZIP,
        size_hint="models.zip 124 MB (README)",
        members={f"snapshots/{name}.npz": f"{name}.npz", f"snapshots/{name}.pkl": f"{name}.pkl"},
    )


def _skip_files(kinds: tuple[str, ...]) -> tuple[RemoteFile, ...]:
    files: list[RemoteFile] = []
    for kind in kinds:
        files += [
            RemoteFile(f"{_SKIP_MODELS}/{kind}_skip.npz"),
            RemoteFile(f"{_SKIP_MODELS}/{kind}_skip.npz.pkl"),
        ]
    for kind in kinds:
        files.append(
            RemoteFile(f"{_SKIP_MODELS}/{kind[0]}table.npy", size_hint=f"{kind[0]}table > 2 GB (README)")
        )
    files.append(RemoteFile(f"{_SKIP_MODELS}/dictionary.txt"))
    return tuple(files)


_SKIP_ORIGIN = "ryankiros/skip-thoughts README"
_LN_SKIP = "lngru_may13_1700000"
LN_SKIP_DICTIONARY_GAP = (
    "its vocab.py dictionary pkl was never published next to it (ryankiros/layer-norm README); give one with "
    "--dictionary DICT.pkl, e.g. uni-skip's, recovered exactly by `lnserve dictionary recover --uni-skip DIR "
    "--out DICT.pkl` (an assumption: that the release shares uni-skip's corpus and vocabulary build)"
)

CATALOG: dict[str, CatalogEntry] = {
    e.name: e
    for e in (
        CatalogEntry(
            name="lngru-order",
            family="order-embedding",
            cell="lngru",
            description="order-embeddings with a layer-norm GRU (lngru_order_add0)",
            origin="ryankiros/layer-norm README",
            files=_oe_pair(_TORONTO_RKIROS, "lngru_order_add0"),
            converter="order-embedding",
            args={"prefix": "lngru_order_add0"},
        ),
        CatalogEntry(
            name="rms-order",
            family="order-embedding",
            cell="rlngru",
            description="order-embeddings with an RMSNorm GRU (weights labelled lngru; detected as rlngru)",
            origin="bzhangGo/rmsnorm README",
            files=_oe_pair(_RMSNORM_OE, "order"),
            converter="order-embedding",
            args={"prefix": "order"},
        ),
        CatalogEntry(
            name="order",
            family="order-embedding",
            cell="gru",
            description="the original order-embeddings (Vendrov et al.), from models.zip",
            origin="ivendrov/order-embedding README",
            files=(_vendrov("order"),),
            converter="order-embedding",
            args={"prefix": "order"},
        ),
        CatalogEntry(
            name="symmetric",
            family="order-embedding",
            cell="gru",
            description="the symmetric (cosine) baseline of Vendrov et al., from models.zip",
            origin="ivendrov/order-embedding README",
            files=(_vendrov("symmetric"),),
            converter="order-embedding",
            args={"prefix": "symmetric"},
        ),
        CatalogEntry(
            name="uni-skip",
            family="skip-thoughts",
            cell="gru",
            description="skip-thoughts uni-skip (2400-d)",
            origin=_SKIP_ORIGIN,
            files=_skip_files(("uni",)),
            converter="skip-thoughts",
            args={"uni": "uni_skip.npz"},
        ),
        CatalogEntry(
            name="bi-skip",
            family="skip-thoughts",
            cell="gru",
            description="skip-thoughts bi-skip (2 x 1200-d)",
            origin=_SKIP_ORIGIN,
            files=_skip_files(("bi",)),
            converter="skip-thoughts",
            args={"bi": "bi_skip.npz"},
        ),
        CatalogEntry(
            name="combine-skip",
            family="skip-thoughts",
            cell="gru",
            description="skip-thoughts combine-skip: uni-skip + bi-skip (4800-d)",
            origin=_SKIP_ORIGIN,
            files=_skip_files(("uni", "bi")),
            converter="skip-thoughts",
            args={"uni": "uni_skip.npz", "bi": "bi_skip.npz"},
        ),
        CatalogEntry(
            name="ln-skip",
            family="skip-thoughts",
            cell="lngru",
            description="the layer-norm paper's skip-thoughts (uni LN-GRU, 1.7M updates); needs --dictionary",
            origin="ryankiros/layer-norm README",
            files=(
                RemoteFile(f"{_TORONTO_RKIROS}/{_LN_SKIP}.npz"),
                RemoteFile(f"{_TORONTO_RKIROS}/{_LN_SKIP}.npz.pkl"),
            ),
            converter="skip-thoughts-training",
            args={"model": f"{_LN_SKIP}.npz"},
            user_files={"dictionary": LN_SKIP_DICTIONARY_GAP},
        ),
    )
}


def get_entry(name: str) -> CatalogEntry:
    try:
        return CATALOG[name]
    except KeyError:
        raise UnknownCatalogEntryError(
            f"no published set named {name!r}; known: {', '.join(CATALOG)} (see `lnserve pull --list`)"
        ) from None


def source_url(file: RemoteFile, base_url: str | None) -> str:
    """The address to fetch: a base URL replaces the host and directory and keeps the file name (mirrors,
    tests)."""
    if not base_url:
        return file.url
    return f"{base_url.rstrip('/')}/{file.filename}"
