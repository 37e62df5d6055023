"""``GalleryChecker``: whether a gallery may be served. Every use opens a gallery through ``open`` (its
state checked against its files, its rows verified against their checksums once per process), and the model
rule is checked here; ``verify``, ``check`` and ``repair`` are the full check, its report and the cut back to
the last consistent state. It reads and writes through the repository, never around it."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3

from ..runtime.model_ref import ModelRef
from . import integrity
from .errors import GalleryCorruptError
from .layout import LOCK, VECTORS, CheckReport, GalleryInfo, RepairReport, State
from .repository import GalleryRepository
from .rules import check_compatible
from .sqlite_faults import MALFORMED_BLOCK, items_fault

log = logging.getLogger("lnserve.galleries")


class GalleryChecker:
    """Opens galleries for every use and verifies them; remembers, per process, what it verified."""

    def __init__(self, repo: GalleryRepository) -> None:
        self.repo = repo
        # verification, per gallery: (state key, rows verified) and ((*state key, n_rows), fault)
        self._verified: dict[str, tuple[tuple[str, int, tuple[int, int]], int]] = {}
        self._failed: dict[str, tuple[tuple[str, int, tuple[int, int], int], str]] = {}

    # -- opening: the checks every use goes through ----------------------------------------------------------
    def open(self, name: str, db: sqlite3.Connection, *, scan: bool = True) -> State:
        """Read the gallery's state and check it against its files; with ``scan``, verify the rows not yet
        verified by this process against their checksums, all in one read transaction (a consistent view of
        counters, items and checksums). Raises GalleryCorruptError."""
        if db.in_transaction:
            return self.read_checked(name, db, scan=scan)
        db.execute("BEGIN")
        try:
            state = self.read_checked(name, db, scan=scan)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return state

    def read_checked(self, name: str, db: sqlite3.Connection, *, scan: bool) -> State:
        """``open`` inside the caller's transaction: the one place a gallery is opened and checked."""
        state = self.repo.read_state(name, db)
        self._verify_rows(name, db, state, scan=scan)
        return state

    def check_model(
        self, name: str, info: GalleryInfo, *, kind: str | None = None, model: ModelRef | None = None
    ) -> None:
        """The gallery holds ``kind`` and was embedded by ``model`` (GalleryMismatchError); a gallery made
        before model identities adopts the model's identity."""
        check_compatible(info, kind=kind, model=model)
        if model is not None:
            self.repo.adopt_identity(name, info, model)

    def _verify_rows(self, name: str, db: sqlite3.Connection, state: State, *, scan: bool) -> None:
        """Verify rows once per process (then only new ones); a fault is remembered for as long as the
        gallery stays in that state, so a quarantined gallery is not re-read on every request."""
        key = state.key
        with self.repo.gallery_lock(name):
            failed = self._failed.get(name)
            if failed is not None and failed[0] == (*key, state.n_rows):
                raise GalleryCorruptError(name, failed[1])
            if not scan:
                return
            done = self._verified.get(name)
            start = done[1] if done is not None and done[0] == key and done[1] <= state.n_rows else 0
            if done is not None and done[0] == key and start == state.n_rows:
                return
            fault = items_fault(db, state.n_rows, state.n_deleted) if start == 0 else None
            if fault is None and start < state.n_rows:
                fault = integrity.scan(
                    db, self.repo.root / name / VECTORS, state.info.dim, state.n_rows, start=start
                ).fault
            if fault is not None:
                self._failed[name] = ((*key, state.n_rows), fault)
                raise GalleryCorruptError(name, fault)
            self._verified[name] = (key, state.n_rows)

    def mark_verified(self, name: str, state: State, n_rows: int) -> None:
        """Rows up to ``n_rows`` were written (and fsynced) by this process: verified."""
        key = state.key
        with self.repo.gallery_lock(name):
            if self._verified.get(name) == (key, state.n_rows):
                self._verified[name] = (key, n_rows)

    def forget(self, name: str) -> None:
        """Drop what was verified of the gallery (removed or repaired)."""
        self._verified.pop(name, None)
        self._failed.pop(name, None)

    # -- full checks ----------------------------------------------------------------------------------------
    def verify(self, name: str) -> GalleryInfo:
        """Check a gallery in full and record the checksums of rows written before checksums existed
        (``GalleryStore.verify``)."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.repo.write_lock(name))
                writable = True
            except OSError as exc:  # a read-only gallery (permissions, mount): verified, nothing recorded
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                writable = False
            db = stack.enter_context(self.repo.db(name))
            state = self.open(name, db)
            if writable:
                self._record_legacy(name, db, state)
            return state.info

    def check(self, name: str) -> CheckReport:
        """Verify a gallery in full without changing it (``GalleryStore.check``)."""
        with self.repo.db(name) as db:
            db.execute("BEGIN")
            report = self._inspect(name, db)[0]
            db.execute("COMMIT")
        return report

    def _inspect(self, name: str, db: sqlite3.Connection) -> tuple[CheckReport, GalleryInfo]:
        """Every fault of a gallery whose database is readable, and how many rows are consistent."""
        gdir = self.repo.root / name
        info, n_rows, n_deleted = self.repo.read_info(name, db)
        faults = [f"{LOCK} is missing"] if not (gdir / LOCK).is_file() else []
        found = integrity.scan(db, gdir / VECTORS, info.dim, n_rows)
        if not (gdir / VECTORS).is_file():
            faults.append(f"{VECTORS} is missing ({n_rows} rows are acknowledged)")
        elif found.fault is not None:
            faults.append(found.fault)
        items = items_fault(db, n_rows, n_deleted)
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

    def repair(self, name: str, *, dry_run: bool = False) -> RepairReport:
        """Cut a damaged gallery back to its last consistent acknowledged state (``GalleryStore.repair``);
        the caller forgets what was cached of it."""
        vectors = self.repo.path(name) / VECTORS
        with contextlib.ExitStack() as stack:
            lock_missing = not (vectors.parent / LOCK).is_file()
            if not dry_run:
                stack.enter_context(self.repo.write_lock(name, create=True))
            try:
                db = stack.enter_context(self.repo.db(name))
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
            db.execute(f"DELETE FROM blocks WHERE start + n > ? OR {MALFORMED_BLOCK}", (cut,))
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
        return report

    def _record_legacy(self, name: str, db: sqlite3.Connection, state: State) -> None:
        """Record checksums of verified rows written before checksums existed (caller holds the lock)."""
        covered = integrity.covered_rows(db)
        if covered >= state.n_rows:
            return
        blocks = integrity.legacy_blocks(
            self.repo.root / name / VECTORS, state.info.dim, covered, state.n_rows
        )
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


__all__ = ["GalleryChecker"]
