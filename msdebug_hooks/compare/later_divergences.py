"""Divergences after the first: layers downstream of the first divergence that still differ when run on the
reference's own inputs, so a port with several real differences names each one, not only the first.

Downstream of the first divergence every layer's output differs, most of them only because their inputs do. The
replay tells the two apart: the port's layer is run on the inputs the reference's layer was given in the step
(:func:`.layer_replay.replay_verdict`); a layer that then still differs beyond the noise floor and by about as
much as observed (the replay's ``own``) computes differently on its own -- a second real difference -- while one
that then agrees (``inherited``) only passes the first one on. A second difference small beside what the layer
inherits reads ``inherited`` and is not listed: the rule errs toward silence, never toward a false name.

Which layers: every paired forward output after the first divergence's that diverges and has one shape on both
sides (a pair compared squeezed, ``[N, C, 1, 1]`` against ``[N, C]``, is not replayed), in the order they ran; a
layer is listed once, innermost first: a container is not replayed once a layer inside it is listed (its own
difference explains the container's), nor is the first divergence's layer or a container of it. At most
:data:`MOST` replays per check (each runs one layer); a layer that cannot be replayed is counted, never listed as
agreeing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT, read_capture
from msdebug_hooks.compare.layer_replay import INHERITED, OWN, replay_verdict
from msdebug_hooks.compare.port_tree import record_layer

#: the most replays one check runs for later divergences
MOST = 300


@dataclass
class LaterDivergences:
    """The layers after the first divergence that diverge on their own (name, replay verdict), in the order they
    ran; how many diverging layers were replayed, could not be, or were left out past :data:`MOST`."""

    own: list = field(default_factory=list)       # [(MindSpore layer, ReplayVerdict)]
    replayed: int = 0
    unknown: int = 0
    left_out: int = 0
    seconds: float = 0.0                           # what the replays took

    @property
    def layers(self) -> list:
        return [layer for layer, _ in self.own]

    def line(self) -> str:
        """One report line; empty when nothing downstream diverges on its own and every replay could look."""
        if not self.own and not self.unknown and not self.left_out:
            return ""
        shown = ", ".join(f"{layer} ({verdict.own_error:.1e} on the same inputs)" if verdict.own_error is not None
                          else layer for layer, verdict in self.own[:12])
        text = (f"also diverging on their own after it (each run on PyTorch's inputs to it; {self.replayed} "
                f"diverging layer(s) replayed): " + (shown if shown else "none")
                + (f" and {len(self.own) - 12} more" if len(self.own) > 12 else ""))
        if self.unknown:
            text += f"; {self.unknown} could not be replayed"
        if self.left_out:
            text += f"; {self.left_out} more not replayed (at most {MOST})"
        return text

    def as_dict(self) -> dict:
        return {"own": [{"layer": layer, **verdict.as_dict()} for layer, verdict in self.own],
                "replayed": self.replayed, "unknown": self.unknown, "left_out": self.left_out,
                "seconds": round(self.seconds, 3)}


def _within(layer: str, outer: str) -> bool:
    return layer == outer or layer.startswith(outer + ".")


def later_divergences(report: Any, model_a: Any, cells: Mapping[str, Any],
                      marked: Optional[str]) -> LaterDivergences:
    """The later own divergences of ``report`` (a ``LayerComparison`` with a finding), replaying ``model_a``'s layers
    (``cells``: layer name -> cell) on B's recorded inputs; ``marked``: the first divergence's layer."""
    found = LaterDivergences()
    finding = report.finding
    if finding is None or model_a is None:
        return found
    start = report.pairs[finding.index].record_a.order
    listed = [marked] if marked else []
    candidates = []
    for pair in report.pairs:
        if pair.record_a.kind != FORWARD_OUTPUT or pair.record_a.order <= start or not report.diverges(pair) \
                or tuple(pair.record_a.shape) != tuple(pair.record_b.shape):
            continue
        layer = record_layer(pair.record_a.name, cells)
        if layer is not None:
            candidates.append((layer, pair))
    if not candidates:
        return found
    started = time.perf_counter()
    cap_a, cap_b = read_capture(report.capture_a), read_capture(report.capture_b)
    for layer, pair in candidates:
        if any(_within(done, layer) for done in listed):   # the layer, or one inside it, is already named
            continue
        if found.replayed >= MOST:
            found.left_out += 1
            continue
        verdict = replay_verdict(pair, cap_a, cap_b, report.step_a, report.step_b, model_a=model_a)
        found.replayed += 1
        if verdict.verdict == OWN:
            found.own.append((layer, verdict))
            listed.append(layer)
        elif verdict.verdict != INHERITED:   # not replayed: counted, never read as agreeing
            found.unknown += 1
    found.seconds = time.perf_counter() - started
    return found
