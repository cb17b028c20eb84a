"""Importing torch 1.13's distributed checkpoint modules under Python 3.11 (Debian's python3-torch),
shared by verify/data/dcp/make_fixtures.py and the tests that run real torch (test_dcp_write.py)."""

import dataclasses


def patch_tensor_properties_default():
    """pytorch#91795 at import time: torch 1.13's ShardedTensorMetadata declares
    `tensor_properties: TensorProperties = field(default=TensorProperties())`, a mutable default
    that Python 3.11's dataclasses refuse. Upstream's fix is `field(default_factory=
    TensorProperties)`; this wraps dataclasses.field to make that substitution while torch's
    modules are imported, and never edits the installed package."""
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
