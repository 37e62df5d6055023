"""The app in-process (httpx ASGI transport): /ready before and after loading, the router contract."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lnserve.app.http.main import create_app
from lnserve.app.http.routes import ROUTER_MODULES
from lnserve.app.serving.registry import demo_if_empty, resolve_model_dirs
from lnserve.app.settings import Settings
from lnserve.converters.errors import ArtifactError
from lnserve.errors import InvalidSettingError


def test_ready_turns_true_after_load_and_warm_up(tmp_path: Path) -> None:
    async def main() -> None:
        app = create_app(Settings(galleries_dir=tmp_path))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            before = await c.get("/ready")
            assert before.status_code == 503 and before.json()["ready"] is False
            assert (await c.get("/health")).status_code == 200
            r = await c.post("/encode", json={"sentences": ["a dog"]})
            assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
            async with app.router.lifespan_context(app):
                deadline = time.monotonic() + 120  # a deadline, not a count: a busy machine loads slowly
                while (await c.get("/ready")).status_code != 200 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                ready = (await c.get("/ready")).json()
                assert ready == {"ready": True, "models": {"demo-lngru": "ready"}, "errors": {}}
                assert (await c.post("/encode", json={"sentences": ["a dog"]})).status_code == 200

    asyncio.run(main())


def test_every_router_module_is_included() -> None:
    app = create_app(Settings())
    paths = set(app.openapi()["paths"])
    assert {
        "/encode",
        "/encode/images",
        "/v1/embeddings",
        "/models",
        "/info",
        "/health",
        "/ready",
        "/metrics",
        "/galleries",
        "/galleries/{name}/items",
        "/retrieve",
    } <= paths
    assert ROUTER_MODULES[:5] == ("encode", "embeddings", "models", "health", "metrics")


def test_model_directories(artifacts: dict[str, Path], tmp_path: Path) -> None:
    a = artifacts["oe_order_gru"]
    names = [n for n, _, _ in resolve_model_dirs(Settings(models=[a.parent]))]
    assert "oe_order_gru" in names and "skipthoughts_lngru" in names  # a folder of artifacts
    with pytest.raises(ArtifactError, match="two models"):
        resolve_model_dirs(Settings(models=[a, a]))
    with pytest.raises(InvalidSettingError, match="default model") as bad_default:
        resolve_model_dirs(Settings(models=[a], default_model="nope"))
    assert bad_default.value.code == "invalid_setting"  # a configuration mistake, not invalid_input
    with pytest.raises(InvalidSettingError, match="no such file or directory") as missing:
        resolve_model_dirs(Settings(models=[tmp_path / "typo"]))
    assert missing.value.code == "invalid_setting" and missing.value.exit_code == 2
    with pytest.raises(ArtifactError, match="no model artifacts"):
        resolve_model_dirs(Settings(models=[tmp_path]))


def test_an_empty_models_folder_serves_the_demo_only_when_asked(
    artifacts: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LNSERVE_DEMO_IF_EMPTY (set by the image): a fresh, empty /models volume serves the demo and says so;
    a folder with an artifact, a missing path and the setting off keep their usual answers."""
    empty = tmp_path / "models"
    (empty / "lost+found").mkdir(parents=True)  # a fresh volume may hold a folder that is no artifact
    with caplog.at_level("WARNING", logger="lnserve.registry"):
        served = demo_if_empty(Settings(models=[empty], demo_if_empty=True))
    assert served.models == []
    assert [n for n, _, _ in resolve_model_dirs(served)] == ["demo-lngru"]
    assert f"{empty}: no model artifacts; serving the embedded demo model" in caplog.text
    off = Settings(models=[empty])
    assert demo_if_empty(off) is off
    with pytest.raises(ArtifactError, match="no model artifacts"):
        resolve_model_dirs(off)
    for models in (
        [artifacts["oe_order_gru"].parent],
        [empty, artifacts["oe_order_gru"]],
        [tmp_path / "typo"],
    ):
        given = Settings(models=models, demo_if_empty=True)
        assert demo_if_empty(given) is given


def test_the_app_serves_what_create_app_is_given(tmp_path: Path) -> None:
    """Every route and the middleware use what the factory was given (``lnserve serve --ray`` gives a
    replica's reload, galleries, engine and metrics text), never a default of their own beside it."""
    from lnserve.app.galleries.store import GalleryStore
    from lnserve.app.http.lifecycle import Lifecycle
    from lnserve.app.http.main import model_registry
    from lnserve.app.http.metrics import Metrics
    from lnserve.app.runtime.model_ref import ModelRef
    from lnserve.errors import LnserveError

    class GivenReloadFailed(LnserveError):
        code = "reload_failed"

    async def reload(name: str) -> Any:
        raise GivenReloadFailed(f"the given reload, for {name}")

    settings = Settings(galleries_dir=tmp_path / "default", reload_without_key=True)
    lifecycle, metrics = Lifecycle(), Metrics()
    registry = model_registry(settings, metrics=metrics, lifecycle=lifecycle)
    galleries = GalleryStore(tmp_path / "given", scorer="numpy")
    ref = ModelRef(name="toy", identity="a" * 64, family="order-embedding", method="order", dim=8)
    galleries.create("given-gallery", kind="images", model=ref)
    engine = {"name": "ray", "replicas": 7, "shards": 3, "replica": "r1"}
    given = create_app(
        settings,
        lifecycle=lifecycle,
        metrics=metrics,
        registry=registry,
        galleries=galleries,
        reload=reload,
        engine_info=lambda: engine,
        render_metrics=lambda: b"# the given metrics text\n",
    )

    async def main() -> None:
        transport = httpx.ASGITransport(app=given)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            info = (await c.get("/info")).json()
            assert info["engine"] == engine
            assert [g["name"] for g in info["galleries"]] == ["given-gallery"]
            assert [g["name"] for g in (await c.get("/galleries")).json()["galleries"]] == ["given-gallery"]
            scraped = await c.get("/metrics")
            assert scraped.status_code == 200 and scraped.content == b"# the given metrics text\n"
            r = await c.post("/models/demo-lngru/reload")
            assert r.status_code == 422 and r.json()["error"]["code"] == "reload_failed"
            assert r.json()["error"]["message"] == "the given reload, for demo-lngru"
            r = await c.post("/encode", json={"sentences": ["a dog"]})  # the given registry: never opened
            assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"

    asyncio.run(main())
    counted = metrics.render().decode()  # the middleware counted into the given metrics
    assert 'route="/info"' in counted and 'route="/models/{name}/reload"' in counted
    lifecycle.inflight = 5  # the given registry's batchers read the given lifecycle's count
    assert registry.in_flight() == 5
    assert not (tmp_path / "default").exists()


def test_create_app_serves_one_process_by_default(tmp_path: Path) -> None:
    """Without arguments: the engine is one process, ``/metrics`` is the app's own counts, a reload is the
    registry's (404 for a name it does not serve)."""

    async def main() -> None:
        app = create_app(Settings(galleries_dir=tmp_path, reload_without_key=True))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            assert (await c.get("/info")).json()["engine"] == {
                "name": "process",
                "replicas": 1,
                "shards": 1,
                "replica": None,
            }
            r = await c.post("/models/nope/reload")
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            assert 'route="/info"' in (await c.get("/metrics")).text

    asyncio.run(main())
