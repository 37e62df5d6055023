"""The pull catalog is self-consistent, and archive extraction writes only the members it names."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from lnserve.app.pull.archive import extract_members
from lnserve.app.pull.catalog import CATALOG, get_entry, source_url
from lnserve.app.pull.errors import UnknownCatalogEntryError, UnsafeArchiveError


@pytest.mark.parametrize("name", list(CATALOG))
def test_every_entry_provides_what_its_converter_reads(name: str) -> None:
    entry = CATALOG[name]
    local = set(entry.local_names)
    if entry.converter == "order-embedding":
        assert {f"{entry.args['prefix']}.npz", f"{entry.args['prefix']}.pkl"} <= local
    elif entry.converter == "skip-thoughts-training":  # the dictionary comes from the user
        assert {entry.args["model"], f"{entry.args['model']}.pkl"} == local
        assert set(entry.user_files) == {"dictionary"}
    else:
        halves = [entry.args[k] for k in ("uni", "bi") if k in entry.args]
        assert halves and "dictionary.txt" in local
        for npz in halves:
            assert {npz, f"{npz}.pkl", f"{npz[0]}table.npy"} <= local
    for file in entry.files:
        assert file.url.startswith("http://") and file.sha256 is None  # no invented checksums
        assert all("/" not in n for n in file.provides)


def test_base_url_keeps_the_file_name() -> None:
    (zip_file,) = get_entry("order").files
    assert source_url(zip_file, "http://mirror:8080/x/") == "http://mirror:8080/x/models.zip"
    assert source_url(zip_file, None) == "http://www.cs.toronto.edu/~vendrov/order/models.zip"


def test_unknown_name_lists_the_catalog() -> None:
    with pytest.raises(UnknownCatalogEntryError, match="lngru-order"):
        get_entry("lngru")


def test_extract_members_ignores_other_entries(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("snapshots/order.npz", b"npz")
        zf.writestr("../../outside.txt", b"x")
        zf.writestr("/abs.txt", b"x")
    dest = tmp_path / "out"
    dest.mkdir()
    got = extract_members(archive, {"snapshots/order.npz": "order.npz"}, dest)
    assert got == {"order.npz": dest / "order.npz"} and (dest / "order.npz").read_bytes() == b"npz"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.zip", "order.npz", "out"]


@pytest.mark.parametrize(
    ("members", "match"),
    [({"snapshots/missing.npz": "m.npz"}, "no member"), ({"snapshots/order.npz": "../order.npz"}, "plain")],
)
def test_extract_members_refuses(tmp_path: Path, members: dict[str, str], match: str) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("snapshots/order.npz", b"npz")
    with pytest.raises(UnsafeArchiveError, match=match):
        extract_members(archive, members, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]
