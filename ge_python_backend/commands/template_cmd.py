"""`ge-python-model template`: write the template `model.py` into a directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.errors import UserError
from ge_python_backend.repository.model_files import model_template

HELP = "write the template model.py into a directory (next to the .om)"

DESCRIPTION = """\
Write ge-python-backend's model.py into DIR, for people who lay out the model repository by hand.
Next to an .om in a version directory it is a complete Triton model: without a config.pbtxt,
Triton asks it for the inputs, outputs and batching (auto-complete, from the .om).

examples:
  mkdir -p models/resnet/1 && cp resnet.om models/resnet/1/
  ge-python-model template models/resnet/1
  ge-python-model serve models --emulator
"""


def register(subparsers: Any) -> None:
    """Add the `template` subcommand."""
    parser = add_command(subparsers, "template", run, HELP, DESCRIPTION)
    parser.add_argument("directory", type=Path, help="where to write model.py")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a model.py that differs from it"
    )


def run(args: argparse.Namespace) -> int:
    """Write DIR/model.py (an identical one is left as it is)."""
    if not args.directory.is_dir():
        raise UserError(f"{args.directory} is not a directory (create it first)")
    target = args.directory / "model.py"
    text = model_template()
    if target.exists() and target.read_text(encoding="utf-8") != text and not args.overwrite:
        raise UserError(f"{target} exists and differs from the template; pass --overwrite")
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0
