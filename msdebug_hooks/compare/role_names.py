"""The parameter-free roles a layer plays, told from its class name and, for a layer built of parameter-free
children (a composite, :mod:`.composites`), from its children's.

Plain Python over the layout table: importing this module imports neither MindSpore nor PyTorch.
"""
from __future__ import annotations

from typing import Mapping, Optional

from msdebug_hooks.compare.layouts import LAYOUTS

ACTIVATION, POOLING, DROPOUT, IDENTITY, RESHAPE = "activation", "pooling", "dropout", "identity", "reshape"
#: a parameter-free layer of no role above (a ``Pad`` cell): unpaired it is a note too, but it pairs by role with none
OTHER = "other"
#: roles whose output holds the input's values (in eval, or with p = 0 for dropout)
VALUE_PRESERVING = (DROPOUT, IDENTITY, RESHAPE)
_ACTIVATION_NAMES = frozenset(name.lower() for layout in LAYOUTS if not layout.params and not layout.atomic
                              for name in layout.mindspore + layout.pytorch)
_RESHAPE_NAMES = ("flatten", "unflatten", "reshape")


def role_of(class_name: Optional[str]) -> Optional[str]:
    """The role of a layer class by its name (None: a layer with no parameter-free role)."""
    if not class_name:
        return None
    name = class_name.lower()
    if name in _ACTIVATION_NAMES:
        return ACTIVATION
    if name == "identity":
        return IDENTITY
    if "drop" in name:
        return DROPOUT
    if "pool" in name:
        return POOLING
    if name in _RESHAPE_NAMES:
        return RESHAPE
    return None


def roles_together(roles: list) -> Optional[str]:
    """The role of a layer whose children play ``roles``: activation when one is an activation, else pooling when
    one pools, else their common role (:data:`OTHER` when they differ); None when one has no role or there is none."""
    if not roles or any(role is None for role in roles):
        return None
    for wanted in (ACTIVATION, POOLING):
        if wanted in roles:
            return wanted
    return roles[0] if len(set(roles)) == 1 else OTHER


def child_names(layer: str, types: Mapping[str, str]) -> list:
    """The direct children of ``layer`` a capture's layer types name, in creation order."""
    depth = layer.count(".") + 1
    return [name for name in types if name.startswith(layer + ".") and name.count(".") == depth]


def layer_role(layer: Optional[str], types: Mapping[str, str]) -> Optional[str]:
    """The role of ``layer`` of a capture (``types``: layer name -> class name): its class's (:func:`role_of`), else,
    for a layer whose children all play one, theirs together (:func:`roles_together`): mindcv's ``Swish``, which
    holds a ``Sigmoid``, is an activation."""
    if layer is None:
        return None
    own = role_of(types.get(layer))
    if own is not None:
        return own
    return roles_together([layer_role(child, types) for child in child_names(layer, types)])
