"""Which models this host's processes hold on each device: the runtime's own records.

ACL tells a process its device's free memory, not who holds the rest. So every `Session` that
opens records what it placed on its device (its label, usually the Triton model and instance,
and the device bytes it holds) in a file per process and device: `device<N>-<pid>.json` in the
`placement` directory of `GE_PYTHON_BACKEND_RUN_DIR` (default `/dev/shm/ge-python-backend-<uid>`,
mode 0700; `processes.records_directory`), written
whole and replaced atomically. When a device refuses a process or a load, the error names the
holders (`holders`). A file whose process died (even by SIGKILL) is skipped and removed by pid
liveness. Standard library only: the Triton stub imports it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
from dataclasses import dataclass

from ge_python_backend.processes import (
    RUN_DIR_ENV,
    is_alive,
    records_directory,
    run_directory,
    this_process,
)
from ge_python_backend.runtime._resource import Resource

__all__ = [
    "RUN_DIR_ENV",
    "Holding",
    "Placement",
    "describe_holders",
    "holders",
    "place",
    "remove",
    "run_directory",
]

logger = logging.getLogger(__name__)

PLACEMENT_RECORDS = "placement"  # the kind of record (`records_directory`)


@dataclass(frozen=True)
class Holding:
    """One model a process holds on a device."""

    pid: int
    label: str
    bytes: int


_lock = threading.Lock()
_placed: dict[int, dict[int, tuple[str, int]]] = {}  # device -> token -> (label, bytes)
_tokens = itertools.count(1)


def place(device_id: int, label: str, nbytes: int) -> int:
    """Record that this process holds `nbytes` on `device_id` for `label`; a token for `remove`.
    A record that cannot be written is logged, not raised: serving does not depend on it."""
    with _lock:
        token = next(_tokens)
        _placed.setdefault(device_id, {})[token] = (label, nbytes)
        _write(device_id)
    return token


def remove(device_id: int, token: int) -> None:
    """Forget what `place` recorded (idempotent)."""
    with _lock:
        if _placed.get(device_id, {}).pop(token, None) is not None:
            _write(device_id)


class Placement(Resource):
    """A `place` record as an object: `close()` (or collection, or exit) removes it. Not an ACL
    object; a Resource so that it closes with the session that holds it."""

    def __init__(self, device_id: int, label: str, nbytes: int) -> None:
        self._own(remove, device_id, place(device_id, label, nbytes))


def holders(device_id: int) -> list[Holding]:
    """What every live process of this user records on `device_id`, largest first."""
    try:
        directory = records_directory(PLACEMENT_RECORDS)
        names = [n for n in os.listdir(directory) if n.startswith(f"device{device_id}-")]
    except OSError as error:
        logger.warning("cannot read the device placement records: %s", error)
        return []
    found = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path) as file:
                record = json.load(file)
            pid, started = int(record["pid"]), int(record["started"])
            models = [(str(m["label"]), int(m["bytes"])) for m in record["models"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours
        if not is_alive(pid, started):
            _remove_file(path)
            continue
        found += [Holding(pid, label, nbytes) for label, nbytes in models]
    return sorted(found, key=lambda h: -h.bytes)


def describe_holders(device_id: int, shown: int = 8) -> str:
    """The holders of `device_id` as one line, by label, largest first: `'resnet' (2 processes,
    1500.0 MiB), 'bert' (1 process, 400.0 MiB)` ("" when nobody recorded anything)."""
    by_label: dict[str, tuple[set[int], int]] = {}
    for holding in holders(device_id):
        pids, nbytes = by_label.get(holding.label, (set(), 0))
        by_label[holding.label] = (pids | {holding.pid}, nbytes + holding.bytes)
    ranked = sorted(by_label.items(), key=lambda item: -item[1][1])
    parts = [
        f"{label!r} ({len(pids)} process{'es' if len(pids) > 1 else ''}, {nbytes / 2**20:.1f} MiB)"
        for label, (pids, nbytes) in ranked[:shown]
    ]
    if len(ranked) > shown:
        parts.append(f"{len(ranked) - shown} more")
    return ", ".join(parts)


def _write(device_id: int) -> None:
    """Write this process's record of `device_id` (caller holds `_lock`)."""
    pid, started = this_process()
    models = [{"label": label, "bytes": nbytes} for label, nbytes in _placed[device_id].values()]
    try:
        directory = records_directory(PLACEMENT_RECORDS)
        path = os.path.join(directory, f"device{device_id}-{pid}.json")
        if not models:
            _remove_file(path)
            return
        temporary = f"{path}.{threading.get_ident()}.tmp"
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            json.dump({"pid": pid, "started": started, "models": models}, file)
        os.replace(temporary, path)
    except OSError as error:
        logger.warning("cannot record device %d's placement: %s", device_id, error)


def _remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # another process reaped it first
        os.unlink(path)
