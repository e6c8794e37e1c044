"""Base class of every ACL-backed object: idempotent `close()`, `with`, `weakref.finalize` net.

Teardown order holds on every path:

* a child's finalizer arguments hold its parent, so the parent cannot be collected first;
* at interpreter exit `weakref.finalize` runs the newest finalizers first (children first);
* closing a parent explicitly first closes its live children, newest first.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

_R = TypeVar("_R", bound="Resource")
_adopting = threading.Lock()  # every `_adopt` (rare: objects are made once)


class Resource:
    """Something ACL must release exactly once."""

    _finalizer: weakref.finalize[Any, Any]
    _children: list[weakref.ref[Resource]]

    def _own(self, release: Callable[..., None], *args: Any) -> None:
        """Arrange for `release(*args)` at `close()`, garbage collection or exit (at most once).

        `args` must not reference `self`; include the parent object to keep it alive.
        """
        self._finalizer = weakref.finalize(self, release, *args)
        self._children = []

    def _adopt(self, child: Resource) -> None:
        """Make `close()` close `child` first (a child already collected was released then).
        Thread-safe: the sessions of a device host adopt into their one shared context."""
        with _adopting:
            self._children = [ref for ref in self._children if ref() is not None]
            self._children.append(weakref.ref(child))

    @property
    def closed(self) -> bool:
        """True once the ACL object was released."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Release the ACL object (live children first); later calls do nothing.

        Every release is attempted; the first failure is raised afterwards.
        """
        children = [ref() for ref in reversed(self._children)]
        releases: list[Callable[[], object]] = [c.close for c in children if c is not None]
        releases.append(self._finalizer)
        first: BaseException | None = None
        for release in releases:
            try:
                release()
            except Exception as exc:
                first = first or exc
        self._children = []
        if first is not None:
            raise first

    def _abandon(self) -> None:
        """Release after a failed constructor; the constructor's error is the one to report."""
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def close_all(resources: list[Resource]) -> None:
    """Close `resources` in the given order, every one even if some fail, then empty the list;
    the first failure is raised afterwards."""
    first: BaseException | None = None
    for resource in resources:
        try:
            resource.close()
        except Exception as exc:
            first = first or exc
    resources.clear()
    if first is not None:
        raise first
