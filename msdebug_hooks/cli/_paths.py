"""``--output FILE`` checked when the options are parsed: its directory must already exist (nothing is created)."""
from __future__ import annotations

import argparse
from pathlib import Path


def output_file(text: str) -> str:
    """argparse ``type=`` for a file the command writes; a bad one is argparse's one-line error and exit 2."""
    if not text:
        raise argparse.ArgumentTypeError("an empty file name")
    target = Path(text).expanduser()
    if target.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    parent = target.parent
    if not parent.exists():
        raise argparse.ArgumentTypeError(f"directory {parent} does not exist (create it first)")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{parent} is a file, not a directory")
    return text
