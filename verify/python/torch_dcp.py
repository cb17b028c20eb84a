"""Helpers for the tests and fixture scripts that run real PyTorch Distributed Checkpoint (DCP)
code with Debian's python3-torch (1.13) on Python 3.11: verify/data/dcp/make_fixtures.py,
verify/data/dcp/make_read_items.py and verify/python/test_dcp_torch.py import it.

    import torch_dcp
    torch_dcp.patch_tensor_properties_default()   # before importing torch's DCP modules

It imports nothing from torch itself, so importing this module is cheap."""

import dataclasses


def patch_tensor_properties_default():
    """pytorch#91795 at import time: torch 1.13's ShardedTensorMetadata declares
    `tensor_properties: TensorProperties = field(default=TensorProperties())`, a mutable default
    that Python 3.11's dataclasses refuse. Upstream's fix is `field(default_factory=
    TensorProperties)`; this wraps dataclasses.field to make that substitution while torch's
    modules are imported, and never edits the installed package. Calling it again is harmless
    (the modules are imported once)."""
    original = dataclasses.field

    def field(*args, **kwargs):
        default = kwargs.get("default", dataclasses.MISSING)
        if type(default).__name__ == "TensorProperties" and dataclasses.is_dataclass(default):
            del kwargs["default"]
            kwargs["default_factory"] = type(default)
        return original(*args, **kwargs)

    dataclasses.field = field
    try:
        import torch.distributed._shard.sharded_tensor  # noqa: F401
        import torch.distributed._shard.checkpoint  # noqa: F401
    finally:
        dataclasses.field = original


def sharded_from_full(full, spec):
    """The ShardedTensor of `spec` (a torch sharding spec) on this process (torch.distributed
    initialized) whose local shards hold their boxes of the full tensor `full` (every process
    passes the same). Call patch_tensor_properties_default() first."""
    from torch.distributed._shard import sharded_tensor

    st = sharded_tensor.empty(spec, *full.shape, dtype=full.dtype)
    for shard in st.local_shards():
        md = shard.metadata
        shard.tensor.copy_(full[tuple(slice(o, o + s) for o, s in zip(md.shard_offsets, md.shard_sizes))])
    return st
