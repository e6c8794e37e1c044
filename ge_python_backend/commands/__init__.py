"""The `ge-python-model` subcommands, one module each (`cli.COMMAND_MODULES`); `add_command`
makes the parser of one. It imports argparse only, so a command that needs no extra (`emulator`,
`template`) stays available without tritonclient (`options` imports the client)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_command(
    subparsers: Any,
    name: str,
    run: Callable[[argparse.Namespace], int],
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """The parser of subcommand `name`, which `run` carries out: `help` is its line in the list
    of commands, `description` (with its examples) is printed as written above its options."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)
    return parser


def size_text(nbytes: int) -> str:
    """`nbytes` as the commands print a byte count: in bytes, KiB or MiB."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} bytes"
