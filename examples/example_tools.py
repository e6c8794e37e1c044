"""Steps the examples share: run `ge-python-model` commands (build.py) and query Triton (client.py).

An example imports it after putting examples/ on `sys.path`:

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from example_tools import compile_om, scaffold  # noqa: E402

build.py steps (each command is printed as it runs; a failing one raises `CalledProcessError`):
* `build_parser`: the arguments of a one-model build.py: REPOSITORY, `--name`, `--workdir`;
* `cli`: the `ge-python-model` of this interpreter's environment (else the one on PATH);
* `run`: print a command and run it;
* `compile_om`: `ge-python-model emulator compile` an ONNX (framework 5, soc Ascend310P3);
* `scaffold`: `ge-python-model scaffold` an `.om` into a repository (replacing an existing one).

client.py helpers:
* `infer`: one HTTP request with one input tensor;
* `top5`: the five most likely classes of a row of logits.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tritonclient.http as httpclient

# -- build.py -------------------------------------------------------------------------------


def build_parser(description: str, name: str) -> argparse.ArgumentParser:
    """A build.py parser: REPOSITORY, `--name` (default `name`), `--workdir` (build/<name>)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("repository", type=Path, help="Triton model repository to write into")
    parser.add_argument("--name", default=name, help=f"model name (default: {name})")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(f"build/{name}"),
        help="where the .onnx/.om go",
    )
    return parser


def cli() -> str:
    """The `ge-python-model` of this interpreter's environment (else the one on PATH)."""
    local = Path(sys.executable).parent / "ge-python-model"
    found = str(local) if local.is_file() else shutil.which("ge-python-model")
    if found is None:
        raise SystemExit("ge-python-model not found: install the project (make setup)")
    return found


def run(*command: str) -> None:
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def compile_om(onnx_path: Path, output: Path, **flags: str) -> Path:
    """`ge-python-model emulator compile` `onnx_path` into `<output>.om`; the `.om` path.

    `flags` are ATC's (e.g. `input_shape=...`), passed as `--<name> <value>` in their order.
    Without a precision flag the model keeps float32 (`--precision_mode must_keep_origin_dtype`):
    the examples' tests check the served answers against onnxruntime's float32 to 1e-4, which
    ATC's default force_fp16 does not meet (its float16 rounding is covered by the project's tests).
    """
    if "precision_mode" not in flags and "precision_mode_v2" not in flags:
        flags = {**flags, "precision_mode": "must_keep_origin_dtype"}
    options = [item for name, value in flags.items() for item in (f"--{name}", value)]
    run(
        cli(),
        "emulator",
        "compile",
        "--model",
        str(onnx_path),
        "--framework",
        "5",
        "--output",
        str(output),
        *options,
        "--soc_version",
        "Ascend310P3",
    )
    return output.parent / f"{output.name}.om"


def scaffold(
    om: Path,
    repository: Path,
    name: str,
    *,
    version: int | None = None,
    runtime: str = "emulator",
    max_output_bytes: int | None = None,
    image_input: str | None = None,
) -> None:
    """`ge-python-model scaffold` `om` into `<repository>/<name>/`, replacing an existing one
    (`max_output_bytes`: for data-dependent outputs; `image_input`: the YUV420SP AIPP input
    that takes JPEG files)."""
    run(
        cli(),
        "scaffold",
        str(om),
        "--repository",
        str(repository),
        "--name",
        name,
        *(["--version", str(version)] if version is not None else []),
        *(["--max-output-bytes", str(max_output_bytes)] if max_output_bytes else []),
        *(["--image-input", image_input] if image_input else []),
        "--runtime",
        runtime,
        "--overwrite",
    )


# -- client.py ------------------------------------------------------------------------------


def infer(
    url: str,
    model: str,
    name: str,
    data: np.ndarray,
    datatype: str,
    outputs: Sequence[str] | None = None,
) -> httpclient.InferResult:
    """One HTTP request with `data` as input `name`; asks for `outputs` if given (else all)."""
    import tritonclient.http as httpclient  # not needed by the build steps

    with httpclient.InferenceServerClient(url) as client:
        request = httpclient.InferInput(name, list(data.shape), datatype)
        request.set_data_from_numpy(data)
        if outputs is None:
            return client.infer(model, [request])
        requested = [httpclient.InferRequestedOutput(output) for output in outputs]
        return client.infer(model, [request], outputs=requested)


def top5(logits: np.ndarray) -> list[tuple[int, float]]:
    """(class, softmax probability) of the five most likely classes."""
    shifted = np.exp(logits - logits.max())
    probabilities = shifted / shifted.sum()
    best = np.argsort(probabilities)[::-1][:5]
    return [(int(c), float(probabilities[c])) for c in best]
