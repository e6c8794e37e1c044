"""CPU emulator of pyACL: `from ge_python_backend.emulator import acl`.

`stats()` reports live resources and per-process counters; `set_faults` and `set_timing` replace
the `GE_EMULATOR_FAULTS` / `GE_EMULATOR_TIMING` specs read at import; `device_holders(directory,
device)` lists the processes holding a device of an emulated host (its ledger).
"""

from ge_python_backend.emulator import acl, faults, timing
from ge_python_backend.emulator._ledger import Holder, device_holders
from ge_python_backend.emulator._stats import stats
from ge_python_backend.emulator.faults import set_faults
from ge_python_backend.emulator.timing import set_timing

faults.load_from_env()
timing.load_from_env()

__all__ = ["Holder", "acl", "device_holders", "set_faults", "set_timing", "stats"]
