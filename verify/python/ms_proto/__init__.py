"""MindSpore message definitions for reshard's cross-checks.

The .proto files beside this module were written from docs/formats.md. load() runs
`protoc --python_out` on them into a fresh temporary directory (removed at exit) and imports the
generated modules; no generated code is kept in the repository.
"""

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
_loaded = None


def load():
    """Returns a namespace with checkpoint, checkpoint_packed, strategy, strategy_packed."""
    global _loaded
    if _loaded is not None:
        return _loaded
    protoc = os.environ.get("PROTOC") or shutil.which("protoc") or "/usr/bin/protoc"
    out = tempfile.mkdtemp(prefix="reshard_ms_proto_")
    atexit.register(shutil.rmtree, out, True)
    protos = sorted(f for f in os.listdir(_HERE) if f.endswith(".proto"))
    subprocess.run([protoc, "--python_out=" + out, "-I" + _HERE] + [os.path.join(_HERE, p) for p in protos],
                   check=True)
    sys.path.insert(0, out)
    modules = {p[:-len(".proto")]: importlib.import_module(p[:-len(".proto")] + "_pb2") for p in protos}
    _loaded = types.SimpleNamespace(**modules)
    return _loaded
