"""The naming table of ``docs/compare-pytorch.md``, written from the layout table (one source).

``python -m msdebug_hooks.compare.layout_docs docs/compare-pytorch.md`` rewrites the part between the markers
``<!-- layout-table:start -->`` and ``<!-- layout-table:end -->``; ``--check`` only says whether it is current
(exit 1 when not). ``tests/compare/test_layer_layouts.py`` fails when the document and the table differ.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from msdebug_hooks.compare.layouts import LAYOUTS, SAME, LayerLayout

START = "<!-- layout-table:start (written by python -m msdebug_hooks.compare.layout_docs; do not edit) -->"
END = "<!-- layout-table:end -->"


def _classes(names: tuple) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _params(layout: LayerLayout) -> str:
    if not layout.params:
        return "none"
    shown = []
    for rule in layout.params:
        pair = f"`{rule.mindspore}`" if rule.mindspore == rule.pytorch else f"`{rule.mindspore}` -> `{rule.pytorch}`"
        extra = f", {rule.transform}" if rule.transform != SAME else ""
        default = f", {rule.default} without it" if rule.default else ""
        shown.append(f"{pair} {rule.shape}{extra}{default}")
    return "; ".join(shown)


def render() -> str:
    """The markdown between the markers."""
    layers = [layout for layout in LAYOUTS if layout.params or layout.atomic]
    activations = [layout for layout in LAYOUTS if not (layout.params or layout.atomic)]
    lines = ["| layer | MindSpore 2.10 | PyTorch | parameters: MindSpore -> PyTorch, shape | returns |",
             "|---|---|---|---|---|"]
    for layout in layers:
        lines.append(f"| {layout.layer} | {_classes(layout.mindspore)} | {_classes(layout.pytorch)} | "
                     f"{_params(layout)} | {layout.returns} |")
    pairs = ", ".join(f"`{a.mindspore[0]}`" + ("" if a.mindspore == a.pytorch else f" / `{a.pytorch[0]}`")
                      for a in activations)
    lines.append(f"| activations | {pairs} | (same) | none | one tensor, the input's shape |")
    lines += ["", "Conventions a port has to translate (the weights convert without them, the results do not):", ""]
    layers_of: dict = {}  # one line per convention, naming every layer it applies to
    for layout in layers + activations:
        for note in layout.conventions:
            layers_of.setdefault(note, []).append(layout.layer)
    lines += [f"- **{', '.join(names)}**: {note}" for note, names in layers_of.items()]
    return "\n".join(lines)


def replace_section(text: str, table: str) -> Optional[str]:
    """``text`` with the part between the markers replaced by ``table``; None when the markers are missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[:start + len(START)] + "\n" + table + "\n" + text[end:]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("document", help="the markdown file holding the markers")
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the table is not current")
    args = parser.parse_args(argv)
    path = Path(args.document)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"document={args.document!r} is not readable: {exc}", file=sys.stderr)
        return 2
    updated = replace_section(text, render())
    if updated is None:
        print(f"document={args.document!r} lacks the markers: a line {START!r} and, below it, {END!r}",
              file=sys.stderr)
        return 2
    if args.check:
        print("current" if updated == text else f"{path} differs from the layout table: rerun without --check")
        return 0 if updated == text else 1
    path.write_text(updated, encoding="utf-8")
    print(f"{path}: layout table written ({len(LAYOUTS)} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
