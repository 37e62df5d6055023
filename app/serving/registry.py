"""Model registry: name -> loaded engine and its micro-batcher; one default model.

``open`` is quick and fails fast (model directories resolved, manifests read, names checked); ``load``
builds the engines and warms each one up through its batcher, after which ``ready`` is true.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from lnserve.errors import InvalidSettingError, UserInputError

from ...converters.artifact import MANIFEST, check_model_name, read_manifest
from ...converters.errors import ArtifactError
from ..runtime.engine import Engine, finite_parts
from ..runtime.errors import EncodeInputError
from ..runtime.model_ref import ModelRef
from ..settings import Settings
from .batcher import BatchLimits, BatchObserver, MicroBatcher
from .errors import (
    ModelNotFoundError,
    ModelRenamedError,
    NotReadyError,
    ReloadBusyError,
    ReloadFailedError,
    SentenceTooLongError,
    TooManySentencesError,
)
from .memory import release_memory
from .timing import JobTiming

log = logging.getLogger("lnserve.registry")
_T = TypeVar("_T", bound=Sequence[Any])
INLINE_TOKENIZE_CHARS = 64 * 1024  # larger request texts are tokenised off the event loop

State = Literal["pending", "loading", "ready", "failed"]
WARMUP_SENTENCE = "a dog sitting on a table"
RETIRE_WAIT_MIN_S = 60.0  # a retiring version waits at most max(this, 2 x request_timeout) for its holders


_ABSOLUTE_PATH = re.compile(r"(?<![\w.~/:])/(?:[^/\s'\"(),:;]+/)+([^/\s'\"(),:;]*)")


def public_reason(text: str, directory: Path) -> str:
    """``text`` (an error message) with no server path in it: files of the model's ``directory`` are named
    relative to it, any other absolute path by its last part. Reload answers go to clients, who have no
    business learning where the server keeps its models."""
    for root in dict.fromkeys((str(directory.resolve()), str(directory.absolute()), str(directory))):
        text = text.replace(root + "/", "").replace(root, "<model directory>")
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1) or "<path>", text)


ModelDirs = list[tuple[str, Path, dict[str, Any]]]  # (name, directory, manifest) per model


def resolve_model_dirs(settings: Settings) -> ModelDirs:
    """(name, directory, manifest) per configured model; the demo model when none is configured.

    Raises:
        ArtifactError: a directory is not an artifact, or two models share a name.
        InvalidSettingError: a configured path does not exist, or ``default_model`` names no model.
    """
    dirs = [d for given in settings.models for d in _artifact_dirs(Path(given))]
    if not settings.models:
        from ..galleries.demo import shipped_demo

        dirs = [shipped_demo().path]
    out: list[tuple[str, Path, dict[str, Any]]] = []
    for d in dirs:
        try:
            manifest = read_manifest(Path(d))
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{d}: not a model artifact ({MANIFEST}: {exc})") from None
        name = str(manifest.get("name") or Path(d).name) if isinstance(manifest, dict) else Path(d).name
        try:
            check_model_name(name)  # it is addressed in URLs (/models/NAME/reload): refused, never mangled
        except ArtifactError as exc:
            raise ArtifactError(f"{d}: {exc}") from None
        if any(name == n for n, _, _ in out):
            raise ArtifactError(f"two models are named {name!r} ({d}); rename one when converting")
        out.append((name, Path(d), manifest))
    default = settings.model_aliases.get(settings.default_model or "", settings.default_model)
    if default and default not in {n for n, _, _ in out}:
        names = ", ".join(n for n, _, _ in out)
        raise InvalidSettingError(
            f"default model {settings.default_model!r} is not among the models ({names})"
        )
    _check_aliases(settings.model_aliases, [n for n, _, _ in out])
    return out


def _check_aliases(aliases: dict[str, str], names: list[str]) -> None:
    """Every alias names a served model and hides none (a configuration mistake otherwise)."""
    for alias, target in aliases.items():
        if target not in names:
            raise InvalidSettingError(
                f"model alias {alias}={target}: {target!r} is not among the models ({', '.join(names)})"
            )
        if alias in names:
            raise InvalidSettingError(f"model alias {alias}={target}: {alias!r} is already a model's name")


def demo_if_empty(settings: Settings) -> Settings:
    """``settings`` without its models when ``demo_if_empty`` is on and every models folder exists but holds
    no artifact: a container whose /models volume starts empty serves the demo (a warning says so) instead
    of restarting in a loop. A missing path or a damaged artifact still fails as usual."""
    if not settings.demo_if_empty or not settings.models:
        return settings
    for given in map(Path, settings.models):
        if (
            not given.is_dir()
            or (given / MANIFEST).exists()
            or any((p / MANIFEST).exists() for p in given.iterdir())
        ):
            return settings
    folders = ", ".join(str(p) for p in settings.models)
    log.warning(
        "%s: no model artifacts; serving the embedded demo model instead (LNSERVE_DEMO_IF_EMPTY). "
        "Put converted artifacts there and restart.",
        folders,
    )
    return settings.model_copy(update={"models": []})


def _artifact_dirs(path: Path) -> list[Path]:
    """An artifact directory is itself; a directory of artifacts (a mounted volume) is each of them."""
    if not path.exists():  # a configuration mistake (a typo in --models), not a damaged artifact
        raise InvalidSettingError(f"{path}: not a model artifact (no such file or directory; see --models)")
    if (path / MANIFEST).is_file() or not path.is_dir():
        return [path]
    found = sorted(p for p in path.iterdir() if (p / MANIFEST).is_file())
    if not found:
        raise ArtifactError(
            f"{path}: no model artifacts in this directory (no {MANIFEST}); convert one first"
        )
    return found


@dataclass(eq=False)
class ModelEntry:
    """One served model: its engine, batcher and the limits its requests are checked against."""

    name: str
    path: Path
    manifest: dict[str, Any]
    batcher: MicroBatcher
    settings: Settings
    engine: Engine | None = None
    ref: ModelRef | None = None  # identity galleries pin (weights, vocab, cell, options); set with engine
    state: State = "pending"
    error: str | None = field(default=None, repr=False)
    loaded_at: float | None = None  # when this version turned ready (unix time)
    # the tasks (requests) that looked this version up and have not finished: a retired version is closed
    # and freed as soon as the last of them ends (``ModelRegistry.swap``), not after a fixed grace
    _holders: set[asyncio.Task[Any]] = field(default_factory=set, repr=False)
    _released: asyncio.Event | None = field(default=None, repr=False)

    # -- holders ------------------------------------------------------------------------------------
    def hold(self) -> None:
        """The calling task uses this version until it finishes (no-op outside a task: CLI, tests)."""
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running event loop
            return
        if task is None or task in self._holders or task.done():
            return
        self._holders.add(task)
        task.add_done_callback(self._let_go)

    def _let_go(self, task: asyncio.Task[Any]) -> None:
        self._holders.discard(task)
        if not self._holders and self._released is not None:
            self._released.set()

    async def released(self, timeout: float) -> bool:
        """Wait until no task holds this version; False if ``timeout`` passed first."""
        if not self._holders:
            return True
        self._released = asyncio.Event()
        try:
            await asyncio.wait_for(self._released.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # -- requests -----------------------------------------------------------------------------------
    def check_count(self, n: int) -> None:
        TooManySentencesError.check(n, self.settings.max_sentences)

    def token_ids(
        self,
        sentences: Sequence[str],
        *,
        pretokenized: bool,
        eos: bool | None,
        truncate: bool,
        keep_end: bool = False,
    ) -> list[list[int]]:
        """Token ids within ``max_tokens`` (the caller has checked the count: ``check_count``).
        ``keep_end``: truncation keeps a long sentence's last tokens (TEI's truncation_direction left)."""
        engine = self._engine()
        use_eos = engine.eos_for(eos)
        seqs = engine.token_ids(sentences, pretokenized=pretokenized, eos=use_eos)
        return self._within_max_tokens(seqs, eos=use_eos, truncate=truncate, keep_end=keep_end)

    def _within_max_tokens(
        self, seqs: list[_T], *, eos: bool, truncate: bool, keep_end: bool = False
    ) -> list[_T]:
        """The one place ``max_tokens`` is enforced (``/encode`` and every route that encodes text, and
        ``/tokenize``): a longer sequence is refused, or cut with ``truncate`` (keeping eos last)."""
        limit = self.settings.max_tokens
        for i, seq in enumerate(seqs):
            if len(seq) <= limit:
                continue
            if not truncate:
                raise SentenceTooLongError(
                    f"sentence {i} has {len(seq)} tokens; the limit is {limit} (max_tokens); "
                    "send truncate: true to cut it"
                )
            if keep_end:
                seqs[i] = seq[-limit:]  # type: ignore[assignment]  # eos, when on, is among the last tokens
            else:
                seqs[i] = [*seq[: limit - 1], *seq[-1:]] if eos else seq[:limit]  # type: ignore[assignment]
        return seqs

    async def token_ids_async(
        self,
        sentences: list[str],
        *,
        pretokenized: bool,
        eos: bool | None,
        truncate: bool,
        keep_end: bool = False,
    ) -> list[list[int]]:
        """``token_ids`` for a request: small bodies on the event loop (a thread hop costs more than they
        do), large ones in a thread so tokenising megabytes of text never stalls other requests."""
        token_ids = functools.partial(
            self.token_ids,
            sentences,
            pretokenized=pretokenized,
            eos=eos,
            truncate=truncate,
            keep_end=keep_end,
        )
        if sum(map(len, sentences)) <= INLINE_TOKENIZE_CHARS:
            return token_ids()
        return await asyncio.to_thread(token_ids)

    def tokenize(
        self, sentences: Sequence[str], *, pretokenized: bool, eos: bool | None, truncate: bool = False
    ) -> dict[str, Any]:
        """``POST /tokenize``: each sentence's tokens and ids as ``token_ids`` would look them up, within the
        same limits (``max_sentences``, ``max_tokens``: refused, or cut with ``truncate``, exactly as
        ``/encode`` cuts it), unknown words marked. The answer grows with the tokens (each is echoed back):
        without the limits one body of a million tokens made a 40 MB answer."""
        engine = self._engine()
        self.check_count(len(sentences))
        use_eos = engine.eos_for(eos)
        unk = engine.vocab.unk
        out = []
        found = engine.tokenize(sentences, pretokenized=pretokenized, eos=use_eos)
        for triples in self._within_max_tokens(list(found), eos=use_eos, truncate=truncate):
            tokens = [
                {"token": t, "id": i, "unknown": unk is not None and i == unk, "source": src}
                for t, i, src in triples
            ]
            n_unk = sum(1 for t in tokens if t["unknown"])
            out.append({"tokens": tokens, "token_count": len(tokens), "unk_count": n_unk})
        tokenizer = "whitespace" if pretokenized else engine.tokenizer_name
        return {"model": self.name, "tokenizer": tokenizer, "eos": use_eos, "unk_id": unk, "sentences": out}

    def decode(self, seqs: list[list[int]], *, skip_special: bool) -> list[str]:
        """TEI's ``/decode``: ids back to text, within ``/tokenize``'s limits (``max_sentences`` lists of at
        most ``max_tokens`` ids: the answer stays as small as a tokenize answer)."""
        self.check_count(len(seqs))
        self._within_max_tokens(seqs, eos=False, truncate=False)
        return self._engine().decode(seqs, skip_special=skip_special)

    def unk_counts(self, seqs: list[list[int]]) -> list[int]:
        """Per sequence from ``token_ids``: tokens that mapped to UNK."""
        return self._engine().unk_counts(seqs)

    async def encode_ids(self, seqs: list[list[int]], *, normalize: bool | None) -> np.ndarray:
        """``encode_ids_timed`` without the times."""
        return (await self.encode_ids_timed(seqs, normalize=normalize))[0]

    async def encode_ids_timed(
        self, seqs: list[list[int]], *, normalize: bool | None
    ) -> tuple[np.ndarray, JobTiming]:
        """Token ids from ``token_ids`` through the micro-batcher: the vectors and the job's times."""
        key = ("text", bool(self._engine().normalize_for(normalize)))
        return await self.batcher.submit_timed(key, seqs, rows=len(seqs), tokens=sum(map(len, seqs)))

    async def encode_images(self, features: list[list[float]]) -> np.ndarray:
        """``encode_images_timed`` after the count check, without the times."""
        self.check_count(len(features))
        return (await self.encode_images_timed(features))[0]

    async def encode_images_timed(self, features: list[list[float]]) -> tuple[np.ndarray, JobTiming]:
        """Image feature rows through the micro-batcher (the caller has checked the count)."""
        engine = self._engine()
        if engine.family.text_only:
            raise EncodeInputError(
                f"model {self.name!r} has no image encoder ({engine.family.name} is text only)"
            )
        dim_image = self.manifest["dims"]["dim_image"]
        bad = [i for i, row in enumerate(features) if len(row) != dim_image]
        if bad:
            raise EncodeInputError(
                f"feature row {bad[0]} has {len(features[bad[0]])} values; expected {dim_image}"
            )
        feats = np.asarray(features, dtype=np.float32)
        if not np.isfinite(feats).all():
            raise EncodeInputError("image features must be finite numbers (no NaN or infinity)")
        return await self.batcher.submit_timed(("images",), feats, rows=len(feats), tokens=len(feats))

    def model_ref(self) -> ModelRef:
        """The identity a gallery records and checks queries against. Raises NotReadyError."""
        self._engine()
        assert self.ref is not None
        return self.ref

    def _engine(self) -> Engine:
        if self.engine is None:
            if self.state == "ready":  # a retired version still held past its wait (``_retire``)
                raise NotReadyError(f"model {self.name!r} was reloaded while this request ran; retry")
            raise NotReadyError(f"model {self.name!r} is {self.state}; retry when /ready says so")
        return self.engine

    def fail(self, reason: str) -> None:
        """The model failed at run time (session error, out of memory, dead batcher): ``/ready`` and
        ``/health`` report it so that an orchestrator restarts the process. Requests are still tried."""
        if self.state != "failed":
            log.error("model %s failed: %s", self.name, reason)
        self.state, self.error = "failed", reason

    # -- description --------------------------------------------------------------------------------
    def describe(self, *, default: bool) -> dict[str, Any]:
        m = self.manifest
        parts = m.get("parts") or {}
        cells = {p: v["cell"] for p, v in parts.items()} if parts else {"sentence": m.get("cell")}
        backend = self.engine.backend if self.engine is not None else None
        return {
            "name": self.name,
            "default": default,
            "state": self.state,
            "family": m.get("family"),
            "cells": cells,
            "dim": m.get("dims", {}).get("output_dim"),
            "dim_image": m.get("dims", {}).get("dim_image"),
            "tokenizer": m.get("tokenizer"),
            "defaults": m.get("defaults", {}),
            "demo": bool(m.get("demo", False)),
            "backend": backend.name if backend else self.settings.backend,
            "providers": list(backend.providers) if backend else [],
            "precision": getattr(backend, "precision", "fp32"),
            "graph": getattr(backend, "graph", None),
            "sha256": self.ref.manifest_sha256 if self.ref else None,
            "identity": self.ref.identity if self.ref else None,
            "loaded_at": _iso(self.loaded_at),
        }


@dataclass(eq=False)
class _Beside:
    """The one version of a model allowed beside its serving one: staged (loading, or loaded and waiting
    for its swap), then, once swapped in, the old version retiring. ``gone`` is set when it is freed."""

    staged: bool = True
    gone: asyncio.Event = field(default_factory=asyncio.Event)


def warmup_ids(entry: ModelEntry) -> list[list[int]]:
    """The warm-up sentence's token ids (loading, Ray's health probe): one sentence, within every limit."""
    entry.check_count(1)
    return entry.token_ids([WARMUP_SENTENCE], pretokenized=False, eos=None, truncate=True)


def _engine_runner(
    engine: Engine, batch_size: int, entry: ModelEntry
) -> Callable[[Hashable, list[Any]], list[np.ndarray | Exception]]:
    """The batcher's ``run_batch``: one engine call for a group of jobs, results split per job.

    A job with a row that has no finite vector gets its own ``EncodeInputError`` (naming its row); the
    other jobs of the group keep their vectors. An engine failure that is not the input's fault marks the
    model failed before it propagates.

    The entry is held weakly: it owns the batcher that holds this function, and a strong reference would
    make a cycle that only a full garbage-collector pass frees (each reload kept its old version, engine
    and weights included, for as long as that took: 12 reloads of a 57 MB model, RSS 290 MB -> 2.1 GB)."""
    entry_ref = weakref.ref(entry)

    def fail(reason: str) -> None:
        if (owner := entry_ref()) is not None:
            owner.fail(reason)

    def run(key: Hashable, payloads: list[Any]) -> list[np.ndarray | Exception]:
        assert isinstance(key, tuple)
        try:
            if key[0] == "images":
                what, vectors = "feature row", engine.encode_images(np.concatenate(payloads), check=False)
            else:
                seqs = [s for p in payloads for s in p]
                what = "sentence"
                vectors = engine.encode_ids(seqs, normalize=bool(key[1]), batch_size=batch_size, check=False)
        except UserInputError:
            raise
        except Exception as exc:
            fail(f"run time: {describe_error(exc)}")
            raise
        return list(finite_parts(vectors, [len(p) for p in payloads], what))

    return run


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def _sha(entry: ModelEntry) -> str:
    return entry.ref.manifest_sha256[:12] if entry.ref else "?"


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (ORT messages run to many lines)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class ModelRegistry:
    """Every served model by name, and the default one."""

    def __init__(
        self,
        settings: Settings,
        *,
        observer: BatchObserver | None = None,
        in_flight: Callable[[], int] | None = None,
        model_dirs: ModelDirs | None = None,
    ) -> None:
        """``in_flight``: requests the server has admitted and not yet answered (the batchers' hint that
        company is coming; see ``inflight_wait_ms``). ``model_dirs``: ``resolve_model_dirs(settings)``
        when the caller already has it (``lnserve serve`` resolves once, before binding), else ``open``
        resolves them."""
        self._model_dirs = model_dirs
        self.settings, self.observer, self.in_flight = settings, observer, in_flight
        self.entries: dict[str, ModelEntry] = {}
        self.default_name: str | None = None
        self._reload_lock = asyncio.Lock()  # one reload at a time
        self._retiring: set[asyncio.Task[None]] = set()  # old versions draining after a reload
        self._beside: dict[str, _Beside] = {}  # per model: the one version beside the serving one

    @property
    def ready(self) -> bool:
        return bool(self.entries) and all(e.state == "ready" for e in self.entries.values())

    def failures(self) -> dict[str, str]:
        """Models that failed to load or at run time, with why (``/health``, which is public, reports them:
        no server path in the reason; the log has the full one)."""
        return {
            n: public_reason(e.error or "failed", e.path)
            for n, e in self.entries.items()
            if e.state == "failed"
        }

    def resolve(self, name: str | None) -> str:
        """The served model's own name for ``name`` (an alias of ``LNSERVE_MODEL_ALIASES`` included), the
        default model's for ``None``: the one place a name from a request becomes a model. Everything
        that takes a model name (requests, reload, galleries, metrics) goes through it, so an alias is only
        ever another name for its model, never an entry of its own.

        Raises:
            ModelNotFoundError: no model has that name.
            NotReadyError: no model is configured yet (startup).
        """
        if name is None:
            if self.default_name is None:
                raise NotReadyError("no model is loaded yet")
            return self.default_name
        if name not in self.entries:  # LNSERVE_MODEL_ALIASES: a name a client insists on (text-embedding-...)
            name = self.settings.model_aliases.get(name, name)
        if name not in self.entries:
            known = ", ".join(sorted(self.entries)) or "none yet"
            raise ModelNotFoundError(f"no model named {name!r} (models: {known})")
        return name

    def get(self, name: str | None) -> ModelEntry:
        """The named model (or alias), or the default one for ``None``, held by the calling task until it
        ends: a reload retires this version only once no request holds it (``ModelEntry.hold``).

        Raises:
            ModelNotFoundError: no model has that name.
            NotReadyError: no model is configured yet (startup).
        """
        entry = self.entries[self.resolve(name)]
        entry.hold()
        return entry

    async def open(self) -> None:
        """Resolve the model directories and read their manifests (fast; errors stop startup)."""
        s = self.settings
        resolved = self._model_dirs
        if resolved is None:
            resolved = await asyncio.to_thread(resolve_model_dirs, s)
        limits = BatchLimits(
            max_batch_size=s.max_batch_size,
            max_batch_tokens=s.max_batch_tokens,
            max_wait_s=s.max_wait_ms / 1000.0,
            inflight_wait_s=s.inflight_wait_ms / 1000.0,
            max_queue=s.max_queue,
            retry_after_s=s.retry_after_s,
            deadline_s=s.request_timeout_ms / 1000.0,
            inline_max_s=s.inline_batch_max_ms / 1000.0,
        )
        for name, path, manifest in resolved:
            batcher = MicroBatcher(
                name=name,
                limits=limits,
                observer=self.observer,
                in_flight=self.in_flight,
                on_failure=self._batcher_failed(name),
            )
            self.entries[name] = ModelEntry(name, path, manifest, batcher, s)
        # LNSERVE_DEFAULT_MODEL may name a model by an alias too: the default is the model it names
        default = s.model_aliases.get(s.default_model or "", s.default_model)
        self.default_name = default or resolved[0][0]

    async def load(self) -> dict[str, Exception]:
        """Build each engine in its model's worker thread, then warm it up through the batcher.

        Returns the models that failed to load, with their errors (also reported by ``/ready``)."""
        failed: dict[str, Exception] = {}
        for entry in self.entries.values():
            entry.state = "loading"
            try:
                await self._load_one(entry)
            except Exception as exc:
                entry.state, entry.error = "failed", f"{type(exc).__name__}: {exc}"
                log.error("model %s failed to load: %s", entry.name, entry.error)
                failed[entry.name] = exc
        return failed

    def _batcher_failed(self, name: str) -> Callable[[str], None]:
        return lambda reason: self.entries[name].fail(f"run time: {reason}")

    async def _load_one(self, entry: ModelEntry) -> None:
        s = self.settings
        options = {
            "threads": s.threads,
            "providers": s.providers or None,
            "strict": s.strict_provider,
            "precision": s.precision,
            "fused_op": s.fused_op,
            "fused_sequence_max_dim": s.fused_sequence_max_dim,
        }
        engine: Engine = await entry.batcher.run_exclusive(
            lambda: Engine.open(entry.path, backend=s.backend, **options)
        )
        entry.ref = await asyncio.to_thread(engine.model_ref)
        entry.batcher.start(_engine_runner(engine, s.max_batch_size, entry))
        entry.engine = engine
        await entry.encode_ids(warmup_ids(entry), normalize=None)
        if not engine.family.text_only:
            # ones, not zeros: with a zero projection bias a zero row has no direction (a 422, not a warm-up)
            await entry.encode_images([[1.0] * entry.manifest["dims"]["dim_image"]])
        entry.state, entry.loaded_at = "ready", time.time()
        log.info(
            "model %s ready (%s, %s)", entry.name, engine.backend.name, ",".join(engine.backend.providers)
        )

    async def close(self) -> None:
        """Drain every batcher (queued jobs finish) and stop the worker threads."""
        for entry in self.entries.values():
            await entry.batcher.close()
        for task in list(self._retiring):
            task.cancel()  # stops waiting for holders; the drain itself is shielded
            await asyncio.gather(task, return_exceptions=True)

    async def reload(self, name: str) -> ModelEntry:
        """Load the artifact now in model ``name``'s directory beside the serving version, warm it up,
        switch to it atomically, then retire the old version: it serves the requests that looked it up
        before the switch, and is closed and freed the moment the last of them ends.

        At most two versions of a model are resident: a reload while the previous one's old version is
        still retiring waits for it (its requests end within their deadline), and reloads run one at a
        time, each loading the directory as it is when its turn comes.

        Raises:
            ModelNotFoundError: no model of that name (aliases resolve to their model).
            ReloadFailedError: the new version cannot be read, verified or warmed (the old one serves on).
        """
        name = self.resolve(name)
        async with self._reload_lock:
            return self.swap(name, await self.stage(name))

    async def stage(self, name: str) -> ModelEntry:
        """The first half of ``reload``: the new version loaded and warmed beside the serving one, not yet
        served (``serve --ray`` stages on every replica before any swaps). Discard it with ``discard``.
        Waits for a retiring old version to be gone first (two versions at most).

        Raises:
            ModelNotFoundError: no model of that name.
            ReloadBusyError: another version of it is staged and not yet swapped in or discarded.
            ReloadFailedError: the new version cannot be read, verified or warmed.
        """
        name = self.resolve(name)
        while (beside := self._beside.get(name)) is not None:
            if beside.staged:
                raise ReloadBusyError(
                    f"model {name!r} is being reloaded already (a new version is staged); the old version "
                    "serves on: retry when that reload has answered"
                )
            await beside.gone.wait()  # a retiring version: its last requests finish within their deadline
        beside = self._beside[name] = _Beside()
        try:
            return await self._load_version(self.entries[name])
        except BaseException:
            self._let_go_beside(name, beside)
            raise

    def swap(self, name: str, new: ModelEntry) -> ModelEntry:
        """The second half of ``reload``: serve the staged ``new`` from now on and retire the old version."""
        name = self.resolve(name)
        if new.name != name:
            raise ValueError(f"a staged version of {new.name!r} cannot replace model {name!r}")
        old = self.entries[name]
        self.entries[name] = new  # requests from now on get the new version
        log.info("model %s reloaded: sha256 %s -> %s", name, _sha(old), _sha(new))
        beside = self._beside.get(name)
        if beside is None:  # staged without ``stage`` (tests): the old version still retires as one
            beside = self._beside[name] = _Beside()
        beside.staged = False
        task = asyncio.get_running_loop().create_task(self._retire(old, beside), name=f"retire-{name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return new

    async def discard(self, staged: ModelEntry) -> None:
        """A staged version that will not be served: its worker thread stopped, its slot freed."""
        try:
            await staged.batcher.close()
        finally:
            beside = self._beside.get(staged.name)
            if beside is not None and beside.staged:
                self._let_go_beside(staged.name, beside)
            staged.engine = None
            await release_memory()

    def _let_go_beside(self, name: str, beside: _Beside) -> None:
        if self._beside.get(name) is beside:
            del self._beside[name]
        beside.gone.set()

    async def _load_version(self, old: ModelEntry) -> ModelEntry:
        """A new, warmed-up entry for ``old``'s directory, or ReloadFailedError with the reason."""
        try:
            manifest = read_manifest(old.path)
            if not isinstance(manifest, dict):
                raise ArtifactError(f"{MANIFEST} is not a JSON object")
        except (OSError, ValueError, ArtifactError) as exc:
            if isinstance(exc, OSError):
                reason = f"{MANIFEST}: {exc.strerror}"
            else:  # not JSON, or over a bound (bounded_json): a 4xx with the reason, never a 500
                reason = str(exc) if isinstance(exc, ArtifactError) else f"{MANIFEST}: {exc}"
            raise ReloadFailedError(
                f"model {old.name!r}: not a model artifact ({public_reason(reason, old.path)}); "
                "the old version serves on"
            ) from None
        renamed = str(manifest.get("name") or old.path.name)
        if renamed != old.name:
            raise ModelRenamedError(
                f"model {old.name!r}: the new version's {MANIFEST} names it {renamed!r}; a served model "
                f"keeps its name (requests, galleries and the default model refer to it), so it was not "
                f"reloaded and the old version serves on: restore the name, or restart to serve it as "
                f"{renamed!r}"
            )
        batcher = MicroBatcher(
            name=old.name,
            limits=old.batcher.limits,
            observer=self.observer,
            in_flight=self.in_flight,
            on_failure=self._batcher_failed(old.name),
        )
        new = ModelEntry(old.name, old.path, manifest, batcher, self.settings, state="loading")
        try:
            await self._load_one(new)
        except Exception as exc:
            await batcher.close()
            log.warning("reload of model %s failed, the old version serves on: %s", old.name, exc)
            raise ReloadFailedError(
                f"model {old.name!r} was not reloaded, the old version serves on: "
                f"{public_reason(describe_error(exc), old.path)}"
            ) from None
        return new

    async def _retire(self, old: ModelEntry, beside: _Beside) -> None:
        """Close the old version once no request holds it (at most ``_retire_wait_s``: a holder past its
        deadline then gets a retryable 503), then free it and give its memory back to the system."""
        name = old.name
        try:
            if not await old.released(self._retire_wait_s()):
                log.warning(
                    "model %s: %d request(s) still hold the old version; closing it",
                    old.name,
                    len(old._holders),
                )
        finally:
            try:
                await asyncio.shield(old.batcher.close())
            finally:
                old.engine = None  # freed even if a holder lingers; nothing runs on it any more
                del old
                self._let_go_beside(name, beside)
                await release_memory()

    def _retire_wait_s(self) -> float:
        return max(RETIRE_WAIT_MIN_S, 2 * self.settings.request_timeout_ms / 1000.0)

    def describe(self) -> list[dict[str, Any]]:
        return [e.describe(default=e.name == self.default_name) for e in self.entries.values()]
