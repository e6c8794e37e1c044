"""The package's `logging` records, forwarded into Triton's log through `pb_utils.Logger`.

Inside the Python backend stub, stderr is not Triton's log; `pb_utils.Logger` is. The handler is
installed once per stub process on the `ge_python_backend` logger, at INFO (Triton's `--log-info`
and `--log-verbose` decide what Triton itself prints).
"""

from __future__ import annotations

import logging
from typing import Any

PACKAGE_LOGGER = "ge_python_backend"


class TritonLogHandler(logging.Handler):
    """Sends each record to Triton's log at the matching level."""

    def __init__(self, pb_utils: Any) -> None:
        super().__init__()
        self.pb_utils = pb_utils
        self._logger = pb_utils.Logger
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            if record.levelno >= logging.ERROR:
                self._logger.log_error(message)
            elif record.levelno >= logging.WARNING:
                self._logger.log_warn(message)
            elif record.levelno >= logging.INFO:
                self._logger.log_info(message)
            else:
                self._logger.log_verbose(message)
        except Exception:
            self.handleError(record)  # logging's own report on stderr; never raises


def forward_to_triton(pb_utils: Any) -> None:
    """Install the handler on the package logger (once per process and `pb_utils`)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    installed = [h for h in logger.handlers if isinstance(h, TritonLogHandler)]
    if any(h.pb_utils is pb_utils for h in installed):
        return
    for handler in installed:
        logger.removeHandler(handler)
    logger.addHandler(TritonLogHandler(pb_utils))
    logger.setLevel(logging.INFO)
    logger.propagate = False
