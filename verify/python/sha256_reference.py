#!/usr/bin/python3
"""hashlib's SHA-256 of DIR/m0 .. DIR/m<N-1>, one hex digest a line (verify/io/sha256.cpp).

  sha256_reference.py DIR N
"""
import hashlib
import os
import sys

d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "m%d" % i), "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest())
