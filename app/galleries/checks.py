# mypy: disable-error-code=misc
# (the methods' ``self`` is the store that inherits this mixin, which mypy calls an erased
# self-type; their bodies are checked against GalleryStore all the same)
"""Check and repair of galleries (``GalleryStore``'s): full verification, the check report and repair."""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import sqlite3
from typing import TYPE_CHECKING

from lnserve.errors import StorageFullError

from . import integrity
from .errors import (
    GalleryCorruptError,
    GalleryNotFoundError,
)
from .layout import (
    LOCK,
    VECTORS,
    CheckReport,
    CorruptGallery,
    GalleryEntry,
    GalleryInfo,
    RepairReport,
    _State,
)
from .sqlite_faults import (
    _MALFORMED_BLOCK,
    _items_fault,
)
from .use_guards import _out_of_space_reported, _removal_reported

if TYPE_CHECKING:
    from .store import GalleryStore

log = logging.getLogger("lnserve.galleries")


class GalleryChecks:
    """GalleryStore's methods of this job (a mixin: ``self`` is the store)."""

    def verify_all(self: GalleryStore) -> builtins.list[GalleryEntry]:
        """``verify`` every gallery (the server's start-up check); a damaged one is returned as a
        ``CorruptGallery``, never raised, so one bad gallery never stops the others."""
        out: builtins.list[GalleryEntry] = []
        for name in self._names():
            try:
                out.append(self.verify(name))  # a gallery removed meanwhile: GalleryNotFoundError
            except GalleryNotFoundError:
                continue
            except GalleryCorruptError as exc:
                out.append(CorruptGallery(name, exc.reason, self._readable_info(name)))
            except StorageFullError as exc:  # not damage: verified at its next use, once there is room
                log.warning("gallery %s: not verified now: %s", name, exc)
            except (OSError, sqlite3.Error) as exc:
                out.append(CorruptGallery(name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return out

    @_out_of_space_reported
    @_removal_reported
    def verify(self: GalleryStore, name: str) -> GalleryInfo:
        """Check a gallery in full (files, counters, every acknowledged row against its checksum) and record
        the checksums of rows written before checksums existed (trusted on first use, once verified finite).

        Raises:
            GalleryNotFoundError. GalleryCorruptError: the gallery is damaged.
        """
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self._write_lock(name))
                writable = True
            except OSError as exc:  # a read-only gallery (permissions, mount): verified, nothing recorded
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                writable = False
            db = stack.enter_context(self._db(name))
            state = self._open(name, db)
            if writable:
                self._record_legacy(name, db, state)
            return state.info

    @_out_of_space_reported
    @_removal_reported
    def check(self: GalleryStore, name: str) -> CheckReport:
        """Verify a gallery in full without changing it (``lnserve gallery check``); rows without checksums
        are checked for finite values only.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: no check can look past the fault (the database or its
            description is missing or unreadable).
        """
        with self._db(name) as db:
            db.execute("BEGIN")
            report = self._inspect(name, db)[0]
            db.execute("COMMIT")
        return report

    def _inspect(self: GalleryStore, name: str, db: sqlite3.Connection) -> tuple[CheckReport, GalleryInfo]:
        """Every fault of a gallery whose database is readable, and how many rows are consistent."""
        gdir = self.root / name
        info, n_rows, n_deleted = self._read_state(name, db)
        faults = [f"{LOCK} is missing"] if not (gdir / LOCK).is_file() else []
        found = integrity.scan(db, gdir / VECTORS, info.dim, n_rows)
        if not (gdir / VECTORS).is_file():
            faults.append(f"{VECTORS} is missing ({n_rows} rows are acknowledged)")
        elif found.fault is not None:
            faults.append(found.fault)
        items = _items_fault(db, n_rows, n_deleted)
        faults += [items] if items else []
        report = CheckReport(
            name=name,
            ok=not faults,
            reason="; ".join(faults) or None,
            rows=n_rows,
            count=n_rows - n_deleted,
            verified_rows=min(found.covered, found.good_rows),
            legacy_rows=max(0, n_rows - found.covered),
            good_rows=found.good_rows,
        )
        return report, info

    @_out_of_space_reported
    @_removal_reported
    def repair(self: GalleryStore, name: str, *, dry_run: bool = False) -> RepairReport:
        """Cut a damaged gallery back to its last consistent acknowledged state (``lnserve gallery
        repair``): keep the rows before the first fault, drop the items stored at or after it, recreate a
        missing lock or vector file, recount the counters.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: beyond repair (no readable database or description).
        """
        vectors = self._path(name) / VECTORS
        with contextlib.ExitStack() as stack:
            lock_missing = not (vectors.parent / LOCK).is_file()
            if not dry_run:
                stack.enter_context(self._write_lock(name, create=True))
            try:
                db = stack.enter_context(self._db(name))
                found, info = self._inspect(name, db)
            except GalleryCorruptError as exc:
                raise GalleryCorruptError(
                    name,
                    f"{exc.reason}; repair cannot rebuild the database: restore the gallery from a backup "
                    f"or remove it (lnserve gallery rm {name})",
                ) from None
            cut, n_rows = found.good_rows, found.rows
            dropped = [
                str(r[0]) for r in db.execute("SELECT id FROM items WHERE pos >= ? ORDER BY pos", (cut,))
            ]
            kept = int(db.execute("SELECT count(*) FROM items WHERE pos < ?", (cut,)).fetchone()[0])
            fixed = [f"recreated {LOCK}"] if lock_missing else []
            fixed += [f"recreated an empty {VECTORS}"] if not vectors.is_file() else []
            if cut == n_rows and kept != found.count:
                fixed.append(f"recounted the counters ({kept} live items)")
            reasons = [f"{LOCK} is missing"] if lock_missing and not dry_run else []  # created just now
            reason = "; ".join([*reasons, *([found.reason] if found.reason else [])]) or None
            report = RepairReport(name, reason, n_rows, cut, dropped, fixed, applied=not dry_run)
            if dry_run or not report.changed:
                return report
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM items WHERE pos >= ?", (cut,))
            db.execute(integrity.BLOCKS_DDL)
            db.execute(f"DELETE FROM blocks WHERE start + n > ? OR {_MALFORMED_BLOCK}", (cut,))
            db.execute("UPDATE counters SET value = ? WHERE key = 'n_rows'", (cut,))
            db.execute("UPDATE counters SET value = ? WHERE key = 'n_deleted'", (cut - kept,))
            db.execute(
                "INSERT INTO counters (key, value) VALUES ('repairs', 1) "
                "ON CONFLICT (key) DO UPDATE SET value = value + 1"
            )
            db.execute("COMMIT")
            with open(vectors, "ab") as f:  # creates a missing file, never extends one
                if cut < n_rows and os.fstat(f.fileno()).st_size > cut * 4 * info.dim:
                    f.truncate(cut * 4 * info.dim)
                os.fsync(f.fileno())
        self._forget(name)
        return report

    def _verify(self: GalleryStore, name: str, db: sqlite3.Connection, state: _State, *, scan: bool) -> None:
        """Verify rows once per process (then only new ones); a fault is remembered for as long as the
        gallery stays in that state, so a quarantined gallery is not re-read on every request."""
        key = state.key
        with self._gallery_lock(name):
            failed = self._failed.get(name)
            if failed is not None and failed[0] == (*key, state.n_rows):
                raise GalleryCorruptError(name, failed[1])
            if not scan:
                return
            done = self._verified.get(name)
            start = done[1] if done is not None and done[0] == key and done[1] <= state.n_rows else 0
            if done is not None and done[0] == key and start == state.n_rows:
                return
            fault = _items_fault(db, state.n_rows, state.n_deleted) if start == 0 else None
            if fault is None and start < state.n_rows:
                fault = integrity.scan(
                    db, self.root / name / VECTORS, state.info.dim, state.n_rows, start=start
                ).fault
            if fault is not None:
                self._failed[name] = ((*key, state.n_rows), fault)
                raise GalleryCorruptError(name, fault)
            self._verified[name] = (key, state.n_rows)

    def _mark_verified(self: GalleryStore, name: str, state: _State, n_rows: int) -> None:
        key = state.key
        with self._gallery_lock(name):
            if self._verified.get(name) == (key, state.n_rows):
                self._verified[name] = (key, n_rows)

    def _record_legacy(self: GalleryStore, name: str, db: sqlite3.Connection, state: _State) -> None:
        """Record checksums of verified rows written before checksums existed (caller holds the lock)."""
        covered = integrity.covered_rows(db)
        if covered >= state.n_rows:
            return
        blocks = integrity.legacy_blocks(self.root / name / VECTORS, state.info.dim, covered, state.n_rows)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(integrity.BLOCKS_DDL)
            db.executemany("INSERT INTO blocks (start, n, crc32) VALUES (?, ?, ?)", blocks)
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # read-only: the rows stay checked for finite values only
            if db.in_transaction:
                db.execute("ROLLBACK")
            log.warning("gallery %s: cannot record checksums of %d older rows (%s)", name, len(blocks), exc)
            return
        log.info("gallery %s: recorded checksums of rows %d-%d (written before checksums)", name, covered,
                 state.n_rows - 1)  # fmt: skip
