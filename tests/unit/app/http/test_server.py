"""``lnserve.app.http.server``: the socket ``lnserve serve`` listens on."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from pathlib import Path

import httpx
import pytest

from lnserve.app.http.errors import AddressInUseError, BindError
from lnserve.app.http.main import create_app
from lnserve.app.http.server import LnserveServer, bind_socket, uvicorn_config
from lnserve.app.settings import Settings


def test_accepted_connections_have_nodelay_so_responses_are_not_held_back() -> None:
    """With Nagle on, a response written as headers then body waited ~40 ms for the client's delayed ACK:
    asyncio sets TCP_NODELAY on accepted connections only when the listening socket says it is TCP."""

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Capture(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = bind_socket("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Capture, sock=listening)
        async with server:
            _, writer = await asyncio.open_connection(*listening.getsockname())
            try:
                return await asyncio.wait_for(accepted, 30)
            finally:
                writer.close()

    assert asyncio.run(main()) == 1


def test_a_taken_port_and_a_foreign_address_are_clear_errors() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(AddressInUseError, match=rf"127\.0\.0\.1:{port} is already in use") as info:
            bind_socket("127.0.0.1", port)
        assert info.value.exit_code == 2
    # TEST-NET-1 (192.0.2.0/24) is documentation-only: never an address of this machine
    with pytest.raises(BindError, match=r"cannot listen on 192\.0\.2\.1:"):
        bind_socket("192.0.2.1", 0)


def test_uvicorn_runs_on_httptools_and_uvloop_where_they_install() -> None:
    """Both are dependencies (Linux, macOS): the C parser and libuv loop cost the event loop less per
    request than h11 and asyncio; ``lnserve serve`` names them in its "listening on" line."""
    from lnserve.app.http.server import fast_paths

    assert fast_paths() == ("httptools", "uvloop")


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_either_parser_runs_our_protocol_with_the_head_limits(parser: str) -> None:
    """``http_parser`` picks the parser; either way uvicorn runs lnserve's protocol class (never uvicorn's
    own, which answers refusals in text/plain and has no head limits), with the settings' limits (the
    Ray replicas' direct ingress builds its server from this same configuration)."""
    from lnserve.app.http.head_limits import H11HeadLimits, HttpToolsHeadLimits
    from lnserve.app.http.main import create_app
    from lnserve.app.http.server import uvicorn_config
    from lnserve.app.settings import Settings

    settings = Settings(http_parser=parser, max_url_bytes=1000, max_header_bytes=5000)
    protocol = uvicorn_config(create_app(settings), settings).http
    assert isinstance(protocol, type)
    assert issubclass(protocol, HttpToolsHeadLimits if parser == "httptools" else H11HeadLimits)
    assert (protocol.max_url_bytes, protocol.max_header_bytes) == (1000, 5000)


def test_sockets_that_share_the_port_bind_it_together_and_others_find_it_taken() -> None:
    """The direct ingress's replicas (``reuse_port``) share one port; a server that does not share it,
    such as the driver's check before it starts Ray, finds the port taken while any of them listens."""
    first = bind_socket("127.0.0.1", 0, reuse_port=True)
    try:
        first.listen()
        port = first.getsockname()[1]
        second = bind_socket("127.0.0.1", port, reuse_port=True)
        try:
            second.listen()
            assert second.getsockname()[1] == port
            with pytest.raises(AddressInUseError):
                bind_socket("127.0.0.1", port)
        finally:
            second.close()
    finally:
        first.close()


@pytest.mark.parametrize("with_server", [True, False])
def test_lnserve_serve_freezes_start_up_once_the_models_have_loaded_the_lifespan_alone_never(
    tmp_path: Path, with_server: bool
) -> None:
    """What start-up left alive (modules, the app, the models) is frozen out of the garbage collector's
    passes once every model has loaded: unfrozen, a full pass walked ~150,000 objects holding the GIL,
    stalling the event loop 40-120 ms every few seconds under load. Only ``lnserve serve``'s own server
    freezes (``LnserveServer``): a process that runs the app's lifespan without it (a test) is left as is."""

    async def main() -> int:
        settings = Settings(galleries_dir=tmp_path)
        app = create_app(settings)
        if with_server:
            LnserveServer(uvicorn_config(app, settings), app.state.lifecycle, drain_timeout_s=1.0)
        transport = httpx.ASGITransport(app=app)
        client = httpx.AsyncClient(transport=transport, base_url="http://t")
        async with client as c, app.router.lifespan_context(app):
            deadline = time.monotonic() + 120  # a deadline, not a count: a busy machine loads slowly
            while (await c.get("/ready")).status_code != 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert (await c.get("/ready")).status_code == 200
            return gc.get_freeze_count()  # ready and loaded() are one step apart, with no await between

    gc.unfreeze()
    try:
        frozen = asyncio.run(main())
    finally:
        gc.unfreeze()
    assert (frozen > 10_000) if with_server else frozen == 0
