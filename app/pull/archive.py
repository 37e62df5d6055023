"""Extract named members of a zip archive, and only those.

Output paths come from the catalog's local names (plain file names, never from the archive), so an entry such
as ``../../etc/x`` cannot place a file anywhere: members the catalog does not name are never read.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path

from .errors import UnsafeArchiveError

_CHUNK = 1 << 20
MAX_MEMBER_BYTES = 1 << 30  # the published order-embedding snapshots are tens of MB each


def extract_members(archive: Path, members: Mapping[str, str], dest: Path) -> dict[str, Path]:
    """Copy each named member to ``dest/<local name>`` via a temporary file and an atomic rename.

    Args:
        archive: the zip file.
        members: archive member path -> local file name (a bare name, no directories).
        dest: an existing directory.

    Returns:
        local name -> extracted path.

    Raises:
        UnsafeArchiveError: the archive is unreadable, lacks a member, a name is not a plain file name, or
            a member would expand past ``MAX_MEMBER_BYTES`` (checked on the declared size before anything is
            written; zipfile then stops reading at that size).
    """
    out: dict[str, Path] = {}
    try:
        with zipfile.ZipFile(archive) as zf:
            for member, local in members.items():
                if local in ("", ".", "..") or "/" in local or "\\" in local:
                    raise UnsafeArchiveError(
                        f"{archive}: refusing local name {local!r} (not a plain file name)"
                    )
                info = _find(zf, member, archive)
                if info.file_size > MAX_MEMBER_BYTES:
                    raise UnsafeArchiveError(
                        f"{archive}: member {member!r} would expand to {info.file_size} bytes, over the "
                        f"{MAX_MEMBER_BYTES} byte limit for a model snapshot (a zip bomb?)"
                    )
                target = dest / local
                part = target.with_name(f".{local}.extracting")
                with zf.open(info) as src, part.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)  # zipfile checks the size and CRC as it reads
                os.replace(part, target)
                out[local] = target
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise UnsafeArchiveError(f"{archive}: cannot extract ({exc})") from None
    finally:
        for local in members.values():
            leftover = dest / f".{local}.extracting"
            if "/" not in local and leftover.exists():
                leftover.unlink()
    return out


def _find(zf: zipfile.ZipFile, member: str, archive: Path) -> zipfile.ZipInfo:
    matches = [i for i in zf.infolist() if i.filename == member]
    if not matches:
        raise UnsafeArchiveError(f"{archive}: has no member {member!r}")
    if len(matches) > 1:
        raise UnsafeArchiveError(f"{archive}: member {member!r} appears {len(matches)} times")
    info = matches[0]
    if info.is_dir() or (info.external_attr >> 16) & 0o170000 == 0o120000:  # directory or symlink
        raise UnsafeArchiveError(f"{archive}: member {member!r} is not a plain file")
    return info
