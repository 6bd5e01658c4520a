"""zerostate: the state service's client for Python, over the C API
(libzerostate_client.so, loaded with ctypes; see zerostate._capi).

`zerostate.torch` holds the PyTorch engine (DeepSpeed-style initialize)."""

from zerostate.client import Client, Job, ZerostateError, connect

__all__ = ["Client", "Job", "ZerostateError", "connect"]
