"""The device host: one process per NPU owns the device and every model placed on it.

Triton's Python backend runs each model instance in a stub process of its own; a stub that opens
the device holds a process slot (pyACL allows 64 per device) and the device memory of opening it.
With the model parameter `device_host` on, the stub opens no device: `client.RemoteSession`
(stub side: standard library, numpy and the ground floor only; no `acl`) hands its requests to
the device host of its NPU (`host.py`, `ge-python-model device-host --device N`), which serves
each Triton instance with a runtime `Session` in its own process. Control messages travel over
a Unix stream socket (`protocol.py`), tensors through shared memory the host gives each
connection (`buffers.py`). See docs/internals/design/device-host.md.

Importing this package imports nothing else.
"""
