"""The stubs' and the device host's allocator: a freed batch's arrays go back to the system."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# After freeing an 8 MiB array (mapped of its own), allocate 4 MiB: glibc's own threshold has
# risen to 8 MiB and serves it from the heap, which keeps it once freed; with the threshold fixed
# it is mapped of its own again.
PROBE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ge_python_backend.allocator import map_large_blocks

    fixed = map_large_blocks() if sys.argv[1] == "fix" else None
    first = np.ones(1 << 20)  # 8 MiB
    del first
    second = np.ones(1 << 19)  # 4 MiB
    address = second.ctypes.data
    heap = [
        [int(a, 16) for a in line.split()[0].split("-")]
        for line in open("/proc/self/maps")
        if line.rstrip().endswith("[heap]")  # one line or more
    ]
    print(json.dumps({"fixed": fixed, "in_heap": any(lo <= address < hi for lo, hi in heap)}))
    """
)


def probe(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_large_blocks_are_mapped_of_their_own_once_fixed() -> None:
    assert probe("keep") == {"fixed": None, "in_heap": True}  # glibc's own rising threshold
    assert probe("fix") == {"fixed": True, "in_heap": False}
    # a threshold the user set is left as it is
    assert probe("fix", {"MALLOC_MMAP_THRESHOLD_": "33554432"}) == {"fixed": False, "in_heap": True}
