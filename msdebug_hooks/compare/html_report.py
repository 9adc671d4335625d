"""A comparison as one self-contained HTML page: the layer tree coloured by divergence, the loss curves of both runs,
the first divergence pinned at the top.

``write_html_report(path, comparison, losses=...)`` takes a :class:`~msdebug_hooks.compare.layers.LayerComparison`
(what ``compare_layers`` returns; the port check and bisect have one) and the loss series of the runs. The page needs
no server and no network: CSS, the script and the loss chart (SVG) are inline, the data is written into the page.
It reads without JavaScript (the tree is plain nested lists); the script adds folding and brings the marked layer
into view.

Colour: a layer is coloured by the largest ``|a-b|/|b|`` of its forward outputs and those of the layers below it
(a parameter's node by its gradient and start value), on a log scale from 1e-9 (green) through 1e-5 (yellow, the
float32 noise floor of a forward output) to 1e-1 and above (red); a record that cannot be compared, or whose NaN/Inf
disagree, is dark red; a node with no compared record is grey. Layers whose outputs stay below the floor start
folded, the path to the first divergence open. The first divergence is pinned in the banner (its name is also the
page's title and the ``data-first-divergence`` attribute of ``<body>``) and its row is filled in magenta, a colour
the scale never uses.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from msdebug_hooks._files import atomic_write_text

#: the marked row's colour (outside the green-yellow-red scale)
MARK_COLOUR = "#ff00c8"
_LOW, _HIGH = -9.0, -1.0   # log10 of the error at the scale's green and red ends
_OPEN_ABOVE = 1e-5         # a node whose error is above this starts unfolded

LossInput = Union[Mapping[str, Any], Sequence[Any], None]


def error_colour(error: Optional[float]) -> str:
    """The node colour for an error: grey when none, dark red when not finite, else green -> yellow -> red."""
    if error is None:
        return "#d9d9d9"
    if not math.isfinite(error):
        return "#7f0000"
    level = _LOW if error <= 0 else min(max(math.log10(error), _LOW), _HIGH)
    hue = 120.0 * (1.0 - (level - _LOW) / (_HIGH - _LOW))
    return f"hsl({hue:.0f}, 75%, 55%)"


def _series(losses: LossInput) -> list:
    """``[(label, [(step, loss), ...]), ...]`` from ``{label: [loss, ...] | {step: loss} | LossSeries}`` or a
    sequence of ``LossSeries``."""
    if losses is None:
        return []
    items = losses.items() if isinstance(losses, Mapping) else ((getattr(s, "path", f"run {i + 1}"), s)
                                                                 for i, s in enumerate(losses))
    found = []
    for label, values in items:
        values = getattr(values, "losses", values)
        if isinstance(values, Mapping):
            points = sorted((int(step), float(loss)) for step, loss in values.items())
        else:
            points = [(step, float(loss)) for step, loss in enumerate(values, start=1)]
        found.append((str(label), points))
    return found


def loss_svg(losses: LossInput, *, width: int = 640, height: int = 240, parted: Optional[int] = None) -> str:
    """Both runs' loss curves as an inline SVG (empty string when there is nothing to draw)."""
    series = [(label, [(s, v) for s, v in points if math.isfinite(v)]) for label, points in _series(losses)]
    series = [(label, points) for label, points in series if points]
    if not series:
        return ""
    steps = [s for _, points in series for s, _ in points]
    values = [v for _, points in series for _, v in points]
    s0, s1 = min(steps), max(steps)
    v0, v1 = min(values), max(values)
    if v1 - v0 < 1e-12 * max(1.0, abs(v1)):
        v0, v1 = v0 - 0.5 * max(abs(v0), 1e-3), v1 + 0.5 * max(abs(v1), 1e-3)
    left, right, top, bottom = 60, 20, 20, 40

    def x(step: float) -> float:
        return left + (width - left - right) * (0.5 if s1 == s0 else (step - s0) / (s1 - s0))

    def y(value: float) -> float:
        return top + (height - top - bottom) * (1 - (value - v0) / (v1 - v0))

    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="losses" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="loss curves">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
             f'fill="#fafafa" stroke="#999"/>']
    for value in (v0, (v0 + v1) / 2, v1):
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">{value:.6g}</text>')
    for step in sorted({s0, s1, (s0 + s1) // 2}):
        parts.append(f'<text x="{x(step):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                     f'font-size="11">{step}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle" '
                 f'font-size="11">step</text>')
    if parted is not None and s0 <= parted <= s1:
        parts.append(f'<line x1="{x(parted):.1f}" y1="{top}" x2="{x(parted):.1f}" y2="{height - bottom}" '
                     f'stroke="{MARK_COLOUR}" stroke-dasharray="4 3"/>')
    for index, (label, points) in enumerate(series):
        colour = colours[index % len(colours)]
        dash = ' stroke-dasharray="6 3"' if index % 2 else ""
        coords = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{coords}"/>')
        parts += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"><title>{html.escape(label)} step '
                  f'{s}: {v:.8g}</title></circle>' for s, v in points]
        parts.append(f'<text x="{left + 10}" y="{top + 16 + 14 * index}" font-size="12" fill="{colour}">'
                     f'{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


class _Node:
    __slots__ = ("name", "path", "children", "records", "error")

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path
        self.children: dict = {}
        self.records: list = []
        self.error: Optional[float] = None


def _tree(comparison: Any) -> _Node:
    from msdebug_hooks.compare import attribution

    root = _Node("", "")
    for index, pair in enumerate(comparison.pairs):
        node = root
        parts = pair.record_a.name.split(".")
        for depth, part in enumerate(parts):
            node = node.children.setdefault(part, _Node(part, ".".join(parts[:depth + 1])))
        error = attribution.error_of(pair.entry())
        node.records.append((index, pair, error))
    _fold(root)
    return root


def _worst(errors: list) -> Optional[float]:
    return max(errors, key=lambda e: (not math.isfinite(e), e)) if errors else None


def _fold(node: _Node) -> tuple:
    """``(forward error, any error)`` of the subtree; the node shows the first when it has one."""
    below = [_fold(child) for child in node.children.values()]
    forward = [e for _, pair, e in node.records if pair.record_a.kind == "forward-output"]
    forward += [f for f, _ in below if f is not None]
    anything = [e for _, _, e in node.records] + [a for _, a in below if a is not None]
    node.error = _worst(forward) if forward else _worst(anything)
    return _worst(forward), _worst(anything)


def _size(error: Optional[float]) -> str:
    if error is None:
        return "-"
    return "not comparable" if not math.isfinite(error) else ("0" if error == 0 else f"{error:.1e}")


def _render(node: _Node, marked: Optional[str], out: list) -> None:
    for child in node.children.values():
        is_marked = marked is not None and child.path == marked
        on_path = marked is not None and (marked == child.path or marked.startswith(child.path + "."))
        kinds = sorted({pair.record_a.kind for _, pair, _ in child.records})
        opened = on_path or child.error is None or not math.isfinite(child.error) or child.error > _OPEN_ABOVE
        classes = "node" + (" marked" if is_marked else "") + (" open" if opened else "")
        attributes = ' id="first-divergence"' if is_marked else ""
        label = (f'<span class="swatch" style="background:{error_colour(child.error)}"></span>'
                 f'<span class="name">{html.escape(child.name)}</span> <span class="err">{_size(child.error)}</span>'
                 + (f' <span class="kinds">{html.escape(", ".join(kinds))}</span>' if kinds else "")
                 + (' <span class="pin">first divergence</span>' if is_marked else ""))
        out.append(f'<li class="{classes}" data-path="{html.escape(child.path)}"{attributes}>'
                   f'<div class="row">{label}</div>')
        if child.children:
            out.append("<ul>")
            _render(child, marked, out)
            out.append("</ul>")
        out.append("</li>")


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#222;background:#fff}
header{padding:14px 20px;background:#2b2d42;color:#fff}
header h1{font-size:18px;margin:0 0 4px}
.banner{margin:14px 20px;padding:12px 16px;border:3px solid #b00020;border-radius:6px;background:#fff4f4}
.banner.clean{border-color:#2ca02c;background:#f0fff0}
.banner h2{margin:0 0 6px;font-size:16px}
.banner pre{white-space:pre-wrap;margin:6px 0 0;font-size:12px}
section{margin:10px 20px}
h3{font-size:14px;margin:18px 0 6px}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:18px}
ul.tree{padding-left:0}
li.node>ul{display:none}
li.node.open>ul{display:block}
.row{padding:2px 4px;border-radius:3px;cursor:pointer;font-size:13px;white-space:nowrap}
.row:hover{background:#eef}
li.marked>.row{background:MARK;color:#fff;font-weight:bold}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:middle;
  border:1px solid #0003}
.err{color:#555;font-family:monospace}
li.marked>.row .err{color:#fff}
.kinds{color:#888;font-size:11px}
.pin{background:#fff;color:#b00020;border-radius:3px;padding:0 5px;margin-left:6px;font-size:11px}
.legend span{display:inline-block;padding:2px 8px;margin-right:4px;font-size:11px;border-radius:3px}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
tr.marked td{background:MARK;color:#fff}
ul.plain{font-size:13px}
""".replace("MARK", MARK_COLOUR)

_JS = """
(function(){
  document.querySelectorAll('li.node>.row').forEach(function(row){
    row.addEventListener('click',function(){row.parentElement.classList.toggle('open');});
  });
  var pinned=document.getElementById('first-divergence');
  if(pinned){var p=pinned.parentElement;while(p&&p.tagName){if(p.classList&&p.classList.contains('node'))
    p.classList.add('open');p=p.parentElement;}}
  document.body.setAttribute('data-ready','1');
  var n=document.querySelectorAll('li.node').length;
  var c=document.getElementById('node-count'); if(c){c.textContent=n+' nodes';}
})();
"""


def _pair_table(comparison: Any, marked_index: Optional[int]) -> str:
    from msdebug_hooks.compare import attribution

    rows = ["<table><tr><th>#</th><th>kind</th><th>A</th><th>B</th><th>matched by</th><th>verdict</th>"
            "<th>|a-b|/|b|</th><th>cosine</th></tr>"]
    for index, pair in enumerate(comparison.pairs):
        result = pair.result
        cosine = "" if result.cosine is None else f"{result.cosine:.6f}"
        error = attribution.error_of(pair.entry())
        rows.append(f'<tr{" class=marked" if index == marked_index else ""}><td>{pair.record_a.order}</td>'
                    f"<td>{html.escape(pair.record_a.kind)}</td><td>{html.escape(pair.record_a.name)}</td>"
                    f"<td>{html.escape(pair.record_b.name)}</td><td>{html.escape(pair.matched_by)}</td>"
                    f"<td>{html.escape(result.verdict)}</td>"
                    f'<td style="background:{error_colour(error)}">{_size(error)}</td><td>{cosine}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def _list(items: Iterable[str]) -> str:
    return '<ul class="plain">' + "".join(f"<li>{html.escape(item)}</li>" for item in items) + "</ul>"


def write_html_report(path: Union[str, Path], comparison: Any, losses: LossInput = None, *,
                      title: Optional[str] = None, headline: Optional[str] = None, marked: Optional[str] = None,
                      sources: Sequence[Mapping[str, Any]] = (), settings: Sequence[str] = (),
                      extra: Sequence[str] = (), parted_step: Optional[int] = None,
                      subtitle: Optional[str] = None, ok: Optional[bool] = None) -> Path:
    """Write the report of ``comparison`` (a ``LayerComparison``) to ``path`` and return it.

    ``losses``: ``{label: [loss per step from 1] | {step: loss} | LossSeries}``; ``marked``: the layer to pin
    (default: the record the comparison's finding names); ``headline``: the banner's sentence (default: the
    finding's); ``sources``: ``{"framework", "layer", "call", "definition"}`` dicts (the port check's source lines);
    ``settings``, ``extra``: lines listed under the banner; ``parted_step``: a step to mark on the loss chart;
    ``subtitle``: the line under the title (default: the two captures); ``ok``: whether the banner is green, the
    verdict the caller's exit code gives (default: the comparison's ``ok``), so the page never reads clean where
    the command fails."""
    finding = comparison.finding
    if ok is None:
        ok = bool(getattr(comparison, "ok", finding is None))
    marked_index = None if finding is None else finding.index
    if marked is None and finding is not None:
        marked = comparison.pairs[finding.index].record_a.name
    if headline is None:
        headline = comparison.headline() if hasattr(comparison, "headline") else (
            f"first divergence: {marked} ({finding.kind}): {finding.describe()}" if finding is not None
            else "no layer diverges")
    name = html.escape(marked or "")
    page_title = html.escape(title or "msdebug comparison") + (f": first divergence at {name}" if marked else
                                                               ": no divergence" if ok else ": differs")
    replay = getattr(comparison, "replay", None)
    details = [f"{s.get('framework')}: {s.get('layer')}\n  called at {s.get('call')}\n  defined in "
               f"{s.get('definition')}" for s in sources]
    banner_body = html.escape("\n".join(([replay.describe()] if replay is not None else []) + details))
    root = _tree(comparison)
    tree: list = []
    _render(root, marked, tree)
    legend = "".join(f'<span style="background:{error_colour(10.0 ** e)}">1e{e}</span>' for e in range(-9, 0, 2))
    if subtitle is None:
        subtitle = (f"A: {comparison.capture_a} ({comparison.framework_a}) \u00b7 B: {comparison.capture_b} "
                    f"({comparison.framework_b})")
    svg = loss_svg(losses, parted=parted_step)
    body = [f'<body data-first-divergence="{name}" data-ok="{str(ok).lower()}">',
            f"<header><h1>{page_title}</h1><div>{html.escape(subtitle)}</div></header>",
            f'<div class="banner{" clean" if ok and not marked else ""}" id="pinned"><h2>{html.escape(headline)}</h2>'
            + (f"<pre>{banner_body}</pre>" if banner_body else "") + "</div>"]
    if settings or extra:
        body.append("<section>" + (f"<h3>Settings that differ</h3>{_list(settings)}" if settings else "")
                    + (f"<h3>About the run</h3>{_list(extra)}" if extra else "") + "</section>")
    body.append(f'<section><h3>Layers <span id="node-count" class="kinds"></span></h3>'
                f'<div class="legend">|a-b|/|b|: {legend}<span style="background:{error_colour(math.inf)};color:#fff">'
                f'not comparable</span><span style="border:1px solid {MARK_COLOUR}">first divergence</span>'
                f'</div><ul class="tree">{"".join(tree)}</ul></section>')
    if svg:
        body.append(f"<section><h3>Loss</h3>{svg}</section>")
    unmatched = [f"only in A: {r.name}" for r in comparison.unmatched_a] + [f"only in B: {r.name}"
                                                                           for r in comparison.unmatched_b]
    if unmatched:
        body.append(f"<section><h3>Without a partner</h3>{_list(unmatched)}</section>")
    free = [f"{f.describe()}" for f in getattr(comparison, "unpaired_free", ())]
    if free:
        body.append(f"<section><h3>Parameter-free layers without a partner (a note, not a difference)</h3>"
                    f"{_list(free)}</section>")
    body.append(f"<section><h3>Every pair</h3>{_pair_table(comparison, marked_index)}</section>")
    data = json.dumps({"marked": marked, "headline": headline, "ok": ok}).replace("</", "<\\/")
    body.append(f'<script type="application/json" id="report-data">{data}</script><script>{_JS}</script></body>')
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{page_title}</title>'
            f"<style>{_CSS}</style></head>" + "\n".join(body) + "</html>\n")
    target = Path(path).expanduser()
    atomic_write_text(target, page, mode=0o644)
    return target
