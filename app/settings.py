"""Service settings: one pydantic-settings class, each field also the ``LNSERVE_<FIELD>`` variable.

Built by the app factory (or the ``serve`` command), never at import, so tests pass their own.
``load_settings`` turns pydantic's validation dump into one ``InvalidSettingError`` (code ``invalid_setting``,
CLI exit 2) that names the variable or flag and what it accepts.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from lnserve.errors import InvalidSettingError

from .runtime.engine import BACKENDS, DEFAULT_BACKEND
from .runtime.fused_op import SEQUENCE_MAX_D
from .runtime.precisions import Precision
from .runtime.retrieval import SCORERS

SERVE_BODY_GRACE_MS = 500.0  # body_arrival_grace_ms unset, outside Ray's proxy: a few network round trips


def _default_threads() -> int:
    """Leave a core for the event loop and tokenisation where there is more than one."""
    return max(1, min(8, (os.cpu_count() or 1) - 1))


def _split_list(value: object) -> object:
    """Environment lists are comma-separated (``LNSERVE_MODELS=/m/a,/m/b``); JSON lists work too."""
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            from ..converters.bounded_json import loads

            return loads(value)
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _split_pairs(value: object) -> object:
    """``ALIAS=MODEL,ALIAS2=MODEL`` (or a JSON object) -> a dict."""
    if not isinstance(value, str):
        return value
    value = value.strip()
    if value.startswith("{"):
        from ..converters.bounded_json import loads

        return loads(value)
    pairs: dict[str, str] = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        alias, sep, model = (p.strip() for p in item.partition("="))
        if not (sep and alias and model):
            raise ValueError(f"{item!r} is not ALIAS=MODEL")
        pairs[alias] = model
    return pairs


class Settings(BaseSettings):
    """Everything the HTTP service can be told; ``/info`` reports the limits."""

    # allow_inf_nan=False: a wait or timeout of "inf" would hold a lone request (or a shutdown) forever
    model_config = SettingsConfigDict(env_prefix="LNSERVE_", extra="ignore", allow_inf_nan=False)

    # models
    models: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Artifact directories (or folders of them); none: the embedded demo model.",
    )
    default_model: str | None = Field(None, description="Name of the default model (default: the first).")
    model_aliases: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Other names for served models: ALIAS=MODEL, comma-separated.",
    )
    demo_if_empty: bool = Field(
        False,
        description="When every models folder holds no artifact (a container's fresh /models volume), serve "
        "the embedded demo model and log so, instead of refusing to start.",
    )
    backend: str = Field(DEFAULT_BACKEND, description=f"Inference backend: {', '.join(BACKENDS)}.")
    threads: int = Field(default_factory=_default_threads, ge=1, description="Intra-op threads per model.")
    providers: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="onnx backend: execution providers, in order (default: CUDA if a GPU is seen, then CPU).",
    )
    precision: Precision = Field(
        "fp32",
        description="Precision profile: fp32 (exact); int8 (CPU, onnx backend: int8 products, float32 norms, "
        "gates and state); bf16 (CPUs with AVX-512 BF16 or AMX, torch backend); fp16 (GPUs, onnx backend). "
        "Fidelity of each: docs/precision.md.",
    )
    strict_provider: bool = Field(
        False, description="onnx backend: fail at startup if the first provider is not obtained."
    )
    fused_op: bool = Field(
        True,
        description="onnx backend on the CPU at fp32: run the lngru / rlngru step's norms and gates as one "
        "custom op (built by the install where a C++ compiler exists; without it, the plain graph).",
    )
    fused_sequence_max_dim: int = Field(
        SEQUENCE_MAX_D,
        ge=0,
        description="With the fused op at fp32: lngru / rlngru parts whose state is at most this wide run "
        "their whole recurrence as one custom op instead of a Scan of steps (faster for small cells, where "
        "a Scan iteration's own cost is most of the time: docs/runtime.md); 0: never.",
    )
    galleries_dir: Path | None = Field(
        None, description="Root of the retrieval galleries (default ~/.local/share/lnserve/galleries)."
    )
    scorer: str = Field(
        "auto",
        description=f"Order-violation retrieval kernel: {', '.join(SCORERS)} "
        "(auto: numba when it imports, else numpy; compiled is an alias of numba; pruned: numba plus a "
        "bound-pruned exact top-k with bit-identical results).",
    )

    # network
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: SecretStr | None = Field(None, description="If set, `Authorization: Bearer <key>` is required.")
    reload_without_key: bool = Field(
        False,
        description="Allow POST /models/NAME/reload (an admin action: each reload loads a model) when no "
        "api_key is set; otherwise it is refused with 403 reload_disabled.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    drain_timeout_s: float = Field(30.0, ge=0, description="SIGTERM: seconds to finish in-flight requests.")
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A request's headers must arrive whole within this many seconds of its first byte (of "
        "the connection's opening, for its first request); else 408 request_timeout and the connection is "
        "closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A request's body must arrive whole within this many seconds of its headers; else 408 "
        "request_timeout and the connection is closed. A request counts in flight only once its body is in.",
    )
    max_body_reads_per_client: int = Field(
        8,
        ge=0,
        description="Requests from one client address (an IPv6 /64) whose body is still arriving; one more "
        "is 429 overloaded. Bodies that arrive with their headers never count. 0: no limit.",
    )
    body_arrival_grace_ms: float | None = Field(
        None,
        ge=0,
        description="How long the body of a request from a client at max_body_reads_per_client may take to "
        "arrive whole before the request is refused (many clients may share one address: a body that comes "
        "a segment after its headers is not refused for its neighbours' slow bodies). Unset: "
        f"{SERVE_BODY_GRACE_MS:g} for lnserve serve, 1000 in a Ray replica behind Serve's proxy (every body "
        "arrives through a call to the proxy); 0: refused unless the body is there at once.",
    )
    max_body_bytes_arriving: int = Field(
        128 << 20,
        ge=1024,
        description="Bytes of the request bodies still arriving, all clients together (per process; a body "
        "counts until it is whole); the body whose bytes would pass it is 429 overloaded and its connection "
        "closed. Bounds the memory that slow bodies from many addresses hold; a value below max_body_bytes "
        "counts as max_body_bytes.",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of the reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; a request from any other peer is its TCP peer address whatever "
        "it sends. Default none.",
    )

    max_url_bytes: int = Field(
        8192,
        ge=256,
        description="The request target (path and query, as sent) in bytes; beyond it, 414 uri_too_long and "
        "the connection is closed, before any of it is used.",
    )
    max_header_bytes: int = Field(
        65536,
        ge=1024,
        description="A request's headers in all, as sent (names, values and separators); beyond it, 431 "
        "header_too_large and the connection is closed, before any of them is used.",
    )
    http_parser: Literal["auto", "httptools", "h11"] = Field(
        "auto",
        description="uvicorn's HTTP/1.1 parser. auto: httptools where it installs (a dependency), else h11. "
        "Both keep max_url_bytes and max_header_bytes and answer malformed requests with a JSON 400; only "
        "httptools keeps header_timeout_s and the body backstop of body_timeout_s.",
    )

    # micro-batching and backpressure
    max_batch_size: int = Field(64, ge=1, description="Sentences per model call.")
    max_batch_tokens: int = Field(8192, ge=1, description="Tokens per model call.")
    max_wait_ms: float = Field(
        0.0,
        ge=0,
        description="How long an idle model waits for company before it runs a batch. Batches form anyway "
        "while the model is busy; measured (benchmarks/http_load.py), 0 costs nothing at load and saves the "
        "wait at low load.",
    )
    inflight_wait_ms: float = Field(
        2.0,
        ge=0,
        description="How long an idle model waits, at most, for requests already in flight in the server "
        "(admitted, not yet queued: bodies being parsed, clients just answered) to join its batch. A lone "
        "request never waits; 0 turns it off.",
    )
    inline_batch_max_ms: float = Field(
        0.5,
        ge=0,
        description="A batch whose model call is predicted (the least of the last calls of its shape) to "
        "take at most this long runs on the event loop instead of the model's worker thread, whose hop and "
        "GIL hand-offs cost more than a small model's call; 0 turns it off.",
    )
    max_queue: int = Field(1024, ge=1, description="Sentences waiting per model; beyond it, 429.")
    retry_after_s: int = Field(1, ge=1, description="Retry-After sent with 429.")
    request_timeout_ms: float = Field(
        60000.0,
        gt=0,
        description="Queue deadline: a request still queued this long after it was queued is dropped before "
        "it runs (504 deadline_exceeded); a request's X-Request-Timeout-Ms header overrides it.",
    )
    max_inflight: int | None = Field(
        None,
        ge=1,
        description="Requests in flight per process (/health, /ready, /metrics not counted; a request "
        "counts once its body is in); beyond it, 429 overloaded at once. Default: half of max_batch_size, at "
        "least 8 (measured: benchmarks/http_load.py --open-loop).",
    )

    # request limits
    max_sentences: int = Field(256, ge=1, description="Sentences (or images) per request.")
    max_tokens: int = Field(256, ge=1, description="Tokens per sentence, eos included.")
    max_body_bytes: int = Field(4 << 20, ge=1024, description="Request body size; beyond it, 413.")
    max_answer_bytes: int = Field(
        32 << 20,
        ge=1024,
        description="Answer size (JSON) one request may make: vectors, scores, search hits with their "
        "payloads, echoed tokens; beyond it, 413 answer_too_large (before any work where the size is known "
        "up front).",
    )

    # logs
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True

    @field_validator("models", "cors_origins", "providers", "trusted_proxies", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    @field_validator("model_aliases", mode="before")
    @classmethod
    def _aliases(cls, value: object) -> object:
        return _split_pairs(value)

    @field_validator("model_aliases")
    @classmethod
    def _alias_names(cls, value: dict[str, str]) -> dict[str, str]:
        """An alias is a model name a client sends (in a body, or in ``/models/NAME/reload``): it obeys the
        rule of model names (``converters.url_segment``), so ``..`` or a control character is refused."""
        from ..converters.url_segment import SEGMENT_RULE, segment_fault

        for alias in value:
            fault = segment_fault(alias) if alias else "it is empty"
            if fault is not None:
                rule = f"an alias, like a model name, must be {SEGMENT_RULE}"
                raise ValueError(f"bad alias {alias!r}: {fault}; {rule}")
        return value

    @field_validator("api_key", "default_model", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """Compose passes ``${VAR:-}`` as an empty string: that means unset, not an empty key."""
        return None if value == "" else value

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}; expected one of {', '.join(BACKENDS)}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: list[str]) -> list[str]:
        """Each an IP address or network, normalised (``*`` or a name would trust anyone who claims it)."""
        out = []
        for item in value:
            try:
                network = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network (CIDR)") from None
            out.append(str(network.network_address) if network.num_addresses == 1 else str(network))
        return out

    def body_bytes_arriving_limit(self) -> int:
        """``max_body_bytes_arriving``, at least ``max_body_bytes`` (else no body of the allowed size could
        be read)."""
        return max(self.max_body_bytes_arriving, self.max_body_bytes)

    def body_arrival_grace_s(self) -> float:
        """``body_arrival_grace_ms`` in seconds, or its default for ``lnserve serve``."""
        ms = self.body_arrival_grace_ms
        return (SERVE_BODY_GRACE_MS if ms is None else ms) / 1000.0

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, value: str) -> str:
        if value.lower() not in SCORERS:
            raise ValueError(f"unknown scorer {value!r}; expected one of {', '.join(SCORERS)}")
        return value.lower()

    def inflight_limit(self) -> int:
        """``max_inflight``, or its default, half a batch: admitted requests wait about max_inflight /
        throughput. Measured at twice saturation (open loop, 300 -> 1024 LN-GRU, 2 cores; README): 32 served
        as many requests/s as 64 at half the latency; 16 halves it again but refuses bursts of 17 clients."""
        return self.max_inflight or max(8, self.max_batch_size // 2)

    def limits(self) -> dict[str, int | float]:
        """The limits a client needs to know (reported by ``/info``)."""
        return {
            "max_sentences": self.max_sentences,
            "max_tokens": self.max_tokens,
            "max_body_bytes": self.max_body_bytes,
            "max_answer_bytes": self.max_answer_bytes,
            "max_batch_size": self.max_batch_size,
            "max_batch_tokens": self.max_batch_tokens,
            "max_wait_ms": self.max_wait_ms,
            "inflight_wait_ms": self.inflight_wait_ms,
            "max_queue": self.max_queue,
            "max_inflight": self.inflight_limit(),
        }


# what a setting accepts, where its type and bounds do not say it (a validator checks it)
_ALLOWED = {
    "backend": f"one of {', '.join(BACKENDS)}",
    "trusted_proxies": "IP addresses or networks (CIDR), comma-separated or a JSON list",
}
_LIST_FIELDS = ("models", "providers", "cors_origins", "trusted_proxies")


def load_settings(flags: dict[str, Any] | None = None) -> Settings:
    """``Settings`` from the environment and ``flags`` (the ``serve`` options, named ``--<field>``).

    A bad value raises ``InvalidSettingError`` naming where it came from and what is allowed."""
    flags = flags or {}
    try:
        return Settings(**flags)
    except ValidationError as exc:
        problems = [_describe(err, flags) for err in exc.errors()]
        raise InvalidSettingError("; ".join(dict.fromkeys(problems))) from None


def _shown(value: object, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters: a 100 KB value would bury the message's point."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _describe(err: Any, flags: dict[str, Any]) -> str:
    """``LNSERVE_PORT='abc': port must be an integer from 0 to 65535`` for one pydantic error."""
    name = str(err["loc"][0]) if err["loc"] else ""
    field = Settings.model_fields.get(name)
    value = "<hidden>" if name == "api_key" else _shown(err.get("input"))
    flag = f"--{name.replace('_', '-')} {value}"
    source = flag if name in flags else f"LNSERVE_{name.upper()}={value}"
    allowed = _allowed(name, field) if field is not None else None
    if allowed is None:
        reason = str(err["msg"]).removeprefix("Value error, ")
        return f"{source}: {reason}"
    return f"{source}: {name} must be {allowed}"


def _allowed(name: str, field: FieldInfo) -> str | None:
    """What a field accepts, in words, from its type and bounds (None: let pydantic's message speak)."""
    if name in _ALLOWED:
        return _ALLOWED[name]
    if name in _LIST_FIELDS:
        return "a comma-separated list or a JSON list"
    kind = field.annotation
    if get_origin(kind) is Literal:
        return "one of " + ", ".join(str(v) for v in get_args(kind))
    if kind is bool:
        return "true or false"
    words = {int: "an integer", float: "a number"}.get(kind) if isinstance(kind, type) else None
    if words is None:
        return None
    ge = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    le = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if ge is not None and le is not None:
        return f"{words} from {ge} to {le}"
    if ge is not None:
        return f"{words} >= {ge}"
    return words
