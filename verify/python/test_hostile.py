"""Hostile inputs to the Python module: a FIFO, a Unix socket, a directory or a device given as a
strategy file is refused at once with reshard.Error naming the file and what it is. A FIFO
without a writer used to block the call forever in open(2); each call runs in a child process
under a timeout, so that a hang fails the test instead of stopping the run."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import sys
    import reshard
    path, which = sys.argv[1], sys.argv[2]
    try:
        reshard.rank_list_for_transform(0, **{which: path})
    except reshard.Error as e:
        print(e)
        sys.exit(0)
    sys.exit(3)
""")


def _make(kind, directory):
    if kind == "/dev/zero":
        return kind
    path = os.path.join(str(directory), kind)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(str(directory))  # a relative name: socket paths are limited to 108 bytes
        try:
            s.bind(kind)
        finally:
            os.chdir(cwd)
            s.close()  # the file stays: nothing listens, open(2) of it fails with ENXIO
    else:
        os.mkdir(path)
    return path


@pytest.mark.parametrize("which", ["src_strategy_file", "dst_strategy_file"])
@pytest.mark.parametrize("kind,what", [("fifo", "is a FIFO"), ("socket", "is a socket"),
                                       ("directory", "is a directory"), ("/dev/zero", "is a character device")])
def test_rank_list_for_transform_refuses_what_is_not_a_regular_file(tmp_path, which, kind, what):
    path = _make(kind, tmp_path)
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, path, which], capture_output=True, text=True,
                           timeout=20)  # a hang guard only: the call returns at once
    except subprocess.TimeoutExpired:
        pytest.fail("rank_list_for_transform(%s=%s) hung" % (which, path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert path in r.stdout and what + ", not a regular file" in r.stdout, r.stdout
