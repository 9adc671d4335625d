"""The zoo's cases and what each must answer with the port check at its default options.

Per architecture:

* ``<arch>/aligned``: every real difference set equal (``zoo.differences``): a noise-only pair, must exit 0;
* ``<arch>/published``: mindcv as published: must exit 1 and name every real difference -- as a ``SETTING`` on each
  of its layers or as the first divergence at one of them -- and nothing else (a setting on any other layer, or a
  first divergence outside the differences' layers, is a false alarm); with no real difference it must exit 0;
* ``<arch>/only-<key>`` (architectures with several differences): aligned but for that one difference, judged the
  same way, so a difference the first divergence hides in the published port is still named;
* ``<arch>/<plant>``: a bug planted in the aligned port (``zoo.plants``): the first divergence at the plant's layer
  with its kind and replay verdict, and no setting on any other layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zoo.architectures import ARCHITECTURES
from zoo.differences import DIFFERENCES
from zoo.plants import plants_for

#: architectures too heavy for a routine run (VGG-11 needs 224x224 and 133M parameters: minutes per case)
HEAVY = ("vgg11",)


@dataclass(frozen=True)
class ZooCase:
    name: str
    arch: str
    variant: str                        # "aligned" | "published" | "only" | "plant"
    kept: tuple = ()                    # keys of the differences left as published
    plant: Optional[str] = None         # index into plants_for(arch), as a string key "<i>:<key>"
    planted: str = ""                   # what the case plants, in words

    @property
    def expect_ok(self) -> bool:
        return self.variant != "plant" and not self.kept

    def plant_object(self):
        if self.plant is None:
            return None
        return plants_for(self.arch)[int(self.plant.split(":")[0])]


def cases_for(arch: str) -> list:
    differences = DIFFERENCES[arch]
    keys = tuple(d.key for d in differences)
    found = [ZooCase(f"{arch}/aligned", arch, "aligned", planted="every real difference set equal"),
             ZooCase(f"{arch}/published", arch, "published", kept=keys,
                     planted="mindcv as published: " + (", ".join(keys) if keys else "no real difference"))]
    if len(differences) > 1:
        found += [ZooCase(f"{arch}/only-{d.key}", arch, "only", kept=(d.key,), planted=d.what) for d in differences]
    for index, plant in enumerate(plants_for(arch)):
        found.append(ZooCase(f"{arch}/{plant.key}", arch, "plant", plant=f"{index}:{plant.key}",
                             planted=plant.what))
    return found


def all_cases(heavy: bool = False) -> list:
    return [case for arch in ARCHITECTURES if heavy or arch.name not in HEAVY for case in cases_for(arch.name)]


def cases_by_name(heavy: bool = True) -> dict:
    return {case.name: case for case in all_cases(heavy)}
