"""``GET /``: the front door a browser sees. What is served (version, state, models, galleries), where to go
next, and a form that encodes a sentence or searches a gallery. One self-contained page: no CDN, no build
step, nothing loaded from elsewhere. ``POST /`` (TEI) lives in ``routes.tei``."""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from ...serving.galleries import why_unusable
from ..deps import GalleriesDep, RegistryDep
from .models import lnserve_version

router = APIRouter(tags=["front"])

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{margin-bottom:.2rem}table{border-collapse:collapse;margin:.5rem 0 1rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}.ok{color:#176f2c}.bad{color:#a4161a}code{background:#f4f4f4;padding:0 .2rem}
form{border:1px solid #ccc;padding:1rem;border-radius:.4rem}input[type=text]{width:28rem;max-width:100%}
#result{margin-top:1rem;white-space:pre-wrap}nav a{margin-right:1rem}
"""

# the form: /encode or /retrieve on the same origin (with the page's own credentials), results as a table
_SCRIPT = """
const form = document.getElementById('try');
const out = document.getElementById('result');
function cell(row, text) {
  const td = document.createElement('td'); td.textContent = text; row.appendChild(td);
}
function table(head, rows) {
  const t = document.createElement('table'); const h = t.insertRow();
  head.forEach(x => { const th = document.createElement('th'); th.textContent = x; h.appendChild(th); });
  rows.forEach(r => { const tr = t.insertRow(); r.forEach(x => cell(tr, x)); }); return t;
}
form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = document.getElementById('text').value;
  const job = form.querySelector('input[name=job]:checked').value;
  const gallery = document.getElementById('gallery').value;
  const k = parseInt(document.getElementById('k').value, 10) || 5;
  const [path, body] = job === 'encode'
    ? ['/encode', {sentences: [text]}]
    : ['/retrieve', {gallery: gallery, query: {text: text}, k: k}];
  out.replaceChildren(); out.textContent = 'working...';
  const r = await fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json'},
                               body: JSON.stringify(body)});
  const data = await r.json();
  out.replaceChildren();
  if (!r.ok) { out.textContent = r.status + ' ' + data.error.code + ': ' + data.error.message; return; }
  if (job === 'encode') {
    const v = data.vectors[0];
    out.appendChild(table(['model', 'dim', 'tokens', 'unknown words', 'first values'],
      [[data.model, data.dim, data.token_counts[0], data.unk_counts[0],
        v.slice(0, 6).map(x => x.toFixed(4)).join(', ') + ', ...']]));
  } else {
    const score = 'score (' + data.score.direction.replaceAll('_', ' ') + ')';
    out.appendChild(table(['rank', 'id', score, 'payload'],
      data.results.map((hit, i) => [i + 1, hit.id, hit.score.toFixed(4), JSON.stringify(hit.payload)])));
  }
  out.dataset.done = job;
});
"""


def _state(value: str | None) -> str:
    ok = value in ("ready", "ok")
    return f'<span class="{"ok" if ok else "bad"}">{escape(str(value))}</span>'


def _models(models: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td><code>{escape(m['name'])}</code>{' (default)' if m['default'] else ''}</td>"
        f"<td>{_state(m['state'])}</td><td>{escape(str(m['family']))}</td>"
        f"<td>{escape(', '.join(f'{k}: {v}' for k, v in m['cells'].items()))}</td><td>{m['dim']}</td>"
        f"<td>{escape(m['backend'])} ({escape(', '.join(m['providers']) or '-')})</td>"
        f"<td>{escape(str(m['precision']))}</td></tr>"
        for m in models
    )
    head = (
        "<tr><th>model</th><th>state</th><th>family</th><th>cells</th><th>dim</th><th>backend</th>"
        "<th>precision</th></tr>"
    )
    return f'<table id="models">{head}{rows}</table>'


def _galleries(galleries: list[dict[str, Any]]) -> str:
    """Each gallery with whether the form can search it here, and why not (``data-usable``)."""
    if not galleries:
        return "<p>No galleries yet (<code>POST /galleries</code> makes one).</p>"
    rows = "".join(
        f'<tr data-gallery="{escape(g["name"], quote=True)}" data-usable="{"no" if g["why"] else "yes"}">'
        f"<td><code>{escape(g['name'])}</code></td><td>{_state(g['state'])}</td>"
        f"<td>{_usable(g['why'])}</td>"
        f"<td>{escape(str(g['kind']))}</td><td>{escape(str(g['model']))}</td><td>{g['count']}</td>"
        f"<td>{escape(str(g['metric']))}</td></tr>"
        for g in galleries
    )
    head = (
        "<tr><th>gallery</th><th>state</th><th>usable here</th><th>kind</th><th>model</th><th>items</th>"
        "<th>metric</th></tr>"
    )
    return f'<table id="galleries">{head}{rows}</table>'


def _usable(why: str | None) -> str:
    if why is None:
        return '<span class="ok">yes</span>'
    return f'<span class="bad">no</span>: {escape(why)}'


def _form(galleries: list[dict[str, Any]]) -> str:
    """The form; its gallery menu offers only the galleries a query can search here, images first, the first
    one selected (a gallery of a model this server does not serve answered 422 ``gallery_mismatch``)."""
    usable = [g["name"] for g in galleries if g["why"] is None and g["kind"] == "images"]
    usable += [g["name"] for g in galleries if g["why"] is None and g["kind"] != "images"]
    options = "".join(
        f'<option value="{escape(n, quote=True)}"{" selected" if i == 0 else ""}>{escape(n)}</option>'
        for i, n in enumerate(usable)
    )
    return f"""<form id="try">
<p><label>Sentence <input type="text" id="text" value="a red circle on the left" required></label></p>
<p><label><input type="radio" name="job" value="encode" checked> encode it</label>
<label><input type="radio" name="job" value="retrieve" {"" if usable else "disabled"}> search</label>
<select id="gallery">{options}</select> <label>top <input type="number" id="k" value="5" min="1"
max="1000" style="width:4rem"></label></p>
<p><button type="submit" id="go">Run</button></p>
<div id="result"></div>
</form>"""


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def front(registry: RegistryDep, store: GalleriesDep) -> HTMLResponse:
    """The front page (``POST /`` is TEI's feature extraction / sentence similarity)."""
    models = registry.describe()
    galleries = [
        {**g.summary(), "why": why_unusable(registry, g)} for g in await run_in_threadpool(store.list)
    ]
    return HTMLResponse(_page(models, galleries, "ready" if registry.ready else "loading"))


def _page(models: list[dict[str, Any]], galleries: list[dict[str, Any]], state: str) -> str:
    """The whole page: what is served, where to go next, the form."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>lnserve</title><style>{_STYLE}</style></head>
<body>
<h1>lnserve</h1>
<p>Sentence (and image) encoders of the layer-normalisation era, served over HTTP. Version
<code id="version">{escape(lnserve_version())}</code>, <span id="state">{_state(state)}</span>.</p>
<nav><a href="/docs">API reference (/docs)</a><a href="/redoc">/redoc</a><a href="/metrics">/metrics</a>
<a href="/info">/info</a><a href="/v1/models">/v1/models</a></nav>
<p>Guides: the README and <code>docs/</code> in the repository (HTTP API, clients, CLI, converting
checkpoints, retrieval and galleries, settings); <code>mkdocs serve</code> there browses them.</p>
<h2>Models</h2>{_models(models)}
<h2>Galleries</h2>{_galleries(galleries)}
<h2>Try it</h2>{_form(galleries)}
<script>{_SCRIPT}</script>
</body></html>"""
