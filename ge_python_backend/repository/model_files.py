"""What the repository's writer (`scaffold`) and its readers (`validate`, `compare`, `inspect`,
`template`) share about a version directory's two files: the `model.py` template, and the `.om`
opened as a runtime `Session`."""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ge_python_backend.errors import GeBackendError, UserError

if TYPE_CHECKING:
    from ge_python_backend.runtime import Session
    from ge_python_backend.runtime.dvpp import ImageInput


@contextlib.contextmanager
def open_session(
    om_path: Path,
    runtime: str | None,
    input_shape_order: Sequence[str] | None = None,
    device_id: int = 0,
    aipp_config: Path | None = None,
    max_output_bytes: int | None = None,
    image: ImageInput | None = None,
) -> Iterator[Session]:
    """A runtime `Session` on `om_path` with `runtime` (None: the one the `.om`'s container is
    made for, `runtime.selected_runtime`; `input_shape_order`, `aipp_config`,
    `max_output_bytes` and `image`: the parameters, for dims, dynamic-AIPP, dynamic-shape and
    image-input models); failures to open it become one-line `UserError`s."""
    from ge_python_backend.runtime import Session, selected_runtime

    try:
        session = Session(
            om_path,
            device_id=device_id,
            runtime=runtime,
            input_shape_order=input_shape_order,
            aipp_config=aipp_config,
            max_output_bytes=max_output_bytes,
            image=image,
        )
    except UserError:
        raise
    except GeBackendError as exc:
        chosen = selected_runtime(runtime, om_path)
        raise UserError(f"cannot open {om_path} with the {chosen} runtime: {exc}") from None
    try:
        yield session
    finally:
        session.close()


def model_template() -> str:
    """The text of `model_templates/model.py`, shipped as package data of
    `ge_python_backend.templates`."""
    resource = importlib.resources.files("ge_python_backend.templates") / "model.py"
    try:
        return resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"the packaged model.py template is missing: {exc}") from None
