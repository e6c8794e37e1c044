"""The key that closes Triton's model-repository API (index, load, unload) to all but our tools.

Triton's load takes file overrides (`file:1/model.py`): whoever may call it runs code as the
server's user, and may unload any model. Triton restricts an API to requests carrying a header
of a given value (`--http-restricted-api=model-repository:<header>=<value>`, since 2.40;
`--grpc-restricted-protocol=...`, since 2.33, whose gRPC metadata key is
`triton-grpc-protocol-<header>`). Each `TritonServer` start makes a fresh random key (`new_key`),
restricts the API with it (`server_options`) and leaves it for this user's own tools in a 0600
file per port in the run directory (`publish`); `TritonClient` sends it (`request_headers`),
found by `find_key`: `GE_PYTHON_BACKEND_REPOSITORY_KEY` (the Kubernetes manifests set it from a
Secret), else the file of a server of this machine at that port.

Triton 2.51 takes the options on its command line only (no file, no environment variable), which
every local user reads in `/proc/<pid>/cmdline`: `TritonServer` overwrites the key there once
Triton has parsed it, where it may write the process's memory
(docs/guides/reliability/other-users.md).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket

from ge_python_backend.environment import REPOSITORY_KEY
from ge_python_backend.processes import run_directory

ENV = REPOSITORY_KEY.name
HEADER = "ge-repository-key"
# Triton's prefix of the metadata key a restricted gRPC protocol expects
# (src/grpc/grpc_server.h kRestrictedProtocolHeaderTemplate).
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
RESTRICTED = "model-repository"
OPTIONS = ("--http-restricted-api", "--grpc-restricted-protocol")
FIRST_RELEASE = "2.40 (NGC 23.11)"  # the first with both options


def new_key() -> str:
    """A fresh random key: 256 bits, hex (safe in a header, a shell word and a file)."""
    return secrets.token_hex(32)


def server_options(key: str) -> list[str]:
    """The `tritonserver` options restricting the model-repository API of HTTP and gRPC to
    requests that carry `key`."""
    return [f"{option}={RESTRICTED}:{HEADER}={key}" for option in OPTIONS]


def request_headers(key: str | None, protocol: str) -> dict[str, str]:
    """The header (HTTP) or metadata (gRPC) carrying `key`; none without a key."""
    if key is None:
        return {}
    return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + HEADER: key}


def key_path(port: int) -> str:
    """The file holding the key of this user's server listening on `port`."""
    return os.path.join(run_directory(), f"repository-key-{port}")


def publish(key: str, ports: tuple[int, ...]) -> None:
    """Write `key` for this user's tools, one file (0600) per port, each whole or not at all;
    OSError when the run directory cannot take them (full, not private)."""
    for port in ports:
        path = key_path(port)
        partial = f"{path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "w") as file:
                file.write(key + "\n")
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise


def withdraw(key: str, ports: tuple[int, ...]) -> None:
    """Remove the files `publish` wrote for `ports` that still hold `key` (not a later
    server's on the same port)."""
    for port in ports:
        with contextlib.suppress(OSError):
            path = key_path(port)
            if _read(path) == key:
                os.unlink(path)


def find_key(url: str) -> str | None:
    """The key for the server at `url` (HOST:PORT): `GE_PYTHON_BACKEND_REPOSITORY_KEY`, else
    the one a server of this user left for `PORT` when HOST is an address of this machine (a
    key is never sent elsewhere); None when there is none."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    host, _, port = url.rpartition(":")
    if not port.isdigit() or not _is_local(host.strip("[]")):
        return None
    try:
        return _read(key_path(int(port)))
    except OSError:  # none written, or a run directory that is not ours
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip() or None
    except FileNotFoundError:
        return None


def _is_local(host: str) -> bool:
    """Whether `host` is an address of this machine (it can be bound to)."""
    try:
        infos = socket.getaddrinfo(host or "127.0.0.1", 0, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind(address)
            except OSError:
                continue
            return True
    return False
