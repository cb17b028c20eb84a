#!/usr/bin/python3
"""Reference results for reshard's dtype casts (include/reshard/io/cast.hpp), made independently.

  cast_reference.py DIR [--random N] [--seed S]

Writes little-endian binary files into DIR (an existing directory):

  f16_to_f32.u32     numpy float16 -> float32 of all 65,536 Float16 bit patterns, in order
  f32_in.u32         Float32 inputs: every Float16 value, every midpoint between adjacent Float16
                     values and that midpoint +-1 Float32 ulp, every midpoint between adjacent
                     BFloat16 values +-1 ulp, then N random bit patterns (numpy default_rng(S))
  f32_to_f16.u16     numpy astype(float16) of f32_in
  f32_to_bf16.u16    bit arithmetic: round the top 16 bits to nearest even; NaN -> (x >> 16) | 0x40
  f16_to_bf16.u16    all 65,536 Float16 patterns to BFloat16 by that bit arithmetic on the exact
                     numpy float32 values
  bf16_to_f16.u16    all 65,536 BFloat16 patterns (exact as float32: bits << 16) to float16 by numpy
  f64_in.u64         Float64 inputs: the Float16 midpoints and values just above / below them (the
                     cases a double rounding through Float32 gets wrong), N / 4 random patterns,
                     N / 8 random values of magnitude 2^-30 .. 2^20
  f64_to_f16.u16     numpy astype(float16) of f64_in (numpy rounds double -> half directly)
  f64_bf16_in.u64    Float64 inputs: N / 20 (at least 1000) of the values at and next to BFloat16
                     midpoints, then random patterns and moderate values
  f64_to_bf16.u16    exact rational rounding (fractions.Fraction, ties to even) of f64_bf16_in;
                     NaN -> sign | 0x7FC0 (compare only NaN-ness and sign)

Exit status 0, or 2 on bad usage.
"""
import argparse
import math
import os
import sys
from fractions import Fraction

import numpy as np


def bf16_bits_reference(x):
    """Round Float32 bit patterns (uint32 array) to BFloat16 bits, in 64-bit integers."""
    x = x.astype(np.uint64)
    absx = x & 0x7FFFFFFF
    rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    nan = (x >> 16) | 0x40
    return np.where(absx > 0x7F800000, nan, rounded).astype(np.uint16)


def round_fraction(d, frac_bits, bias):
    """Bits of the binary format (1 sign, exponent with `bias`, `frac_bits` fraction bits) nearest
    to the float `d`, ties to even, with subnormals and overflow to infinity; NaN -> quiet NaN."""
    exp_all_ones = (2 * bias + 1)
    sign = (1 << (exp_all_ones.bit_length() + frac_bits)) if math.copysign(1.0, d) < 0 else 0
    if math.isnan(d):
        return sign | (exp_all_ones << frac_bits) | (1 << (frac_bits - 1))
    if math.isinf(d):
        return sign | (exp_all_ones << frac_bits)
    v = Fraction(abs(d))
    if v == 0:
        return sign
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    emin = 1 - bias
    e = max(e, emin)
    n = round(v / Fraction(2) ** (e - frac_bits))  # Fraction.__round__: ties to even
    bits = ((e + bias - 1) << frac_bits) + n
    if bits >= exp_all_ones << frac_bits:
        bits = exp_all_ones << frac_bits
    return sign | bits


def write(path, array):
    array.astype(array.dtype.newbyteorder("<")).tofile(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--random", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=20261124)
    a = p.parse_args()
    if not os.path.isdir(a.dir):
        print(f"cast_reference.py: {a.dir} is not a directory", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    out = lambda name: os.path.join(a.dir, name)

    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f16_values = all16.view(np.float16)
    f16_as_f32 = f16_values.astype(np.float32)
    write(out("f16_to_f32.u32"), f16_as_f32.view(np.uint32))

    # Midpoints between adjacent finite Float16 values (0x7BFF's upper neighbour is 65536), exact
    # in float64 and in float32 (12 significant bits).
    pos = f16_values[:0x7C00].astype(np.float64)
    upper = np.append(pos[1:], 65536.0)
    mids = ((pos + upper) / 2).astype(np.float32)
    mids = np.concatenate([mids, -mids]).view(np.uint32)
    f16_ties = np.concatenate([mids, mids + 1, mids - 1])
    b = np.arange(65536, dtype=np.uint32) << 16
    bf16_ties = np.concatenate([b | 0x8000, (b | 0x8000) + 1, (b | 0x8000) - 1])
    rand32 = rng.integers(0, 2**32, size=a.random, dtype=np.uint64).astype(np.uint32)
    f32_in = np.concatenate([f16_as_f32.view(np.uint32), f16_ties, bf16_ties, rand32]).astype(np.uint32)
    write(out("f32_in.u32"), f32_in)
    with np.errstate(all="ignore"):
        write(out("f32_to_f16.u16"), f32_in.view(np.float32).astype(np.float16).view(np.uint16))
    write(out("f32_to_bf16.u16"), bf16_bits_reference(f32_in))

    write(out("f16_to_bf16.u16"), bf16_bits_reference(f16_as_f32.view(np.uint32)))
    with np.errstate(all="ignore"):
        bf16_as_f32 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
        write(out("bf16_to_f16.u16"), bf16_as_f32.astype(np.float16).view(np.uint16))

    # Float64 inputs near midpoints: a double rounding through Float32 would land on the midpoint
    # and then tie to even.
    f16_mid64 = ((pos + upper) / 2)
    bf16_pos = (np.arange(0x7F80, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
    bf16_upper = np.append(bf16_pos[1:], 2.0**128)
    bf16_mid64 = (bf16_pos + bf16_upper) / 2
    def near_midpoints(mids):
        out = []
        for eps in (2.0**-30, 2.0**-40, 2.0**-52):
            out += [mids * (1 + eps), mids * (1 - eps)]
        out = np.concatenate(out)
        out = out[np.isfinite(out)]
        return np.concatenate([out, -out, mids, -mids])

    rand64 = rng.integers(0, 2**64, size=a.random // 4, dtype=np.uint64)
    # also random values of moderate magnitude, where the results are not all zero or infinity
    moderate = rng.standard_normal(a.random // 8) * np.exp2(rng.integers(-30, 20, size=a.random // 8))
    f64_in = np.concatenate([near_midpoints(f16_mid64[1:]).view(np.uint64), rand64,
                             moderate.view(np.uint64)]).astype(np.uint64)
    write(out("f64_in.u64"), f64_in)
    with np.errstate(all="ignore"):
        write(out("f64_to_f16.u16"), f64_in.view(np.float64).astype(np.float16).view(np.uint16))
    # The rational reference is slow: a sample of the BFloat16 midpoint neighbours and of random
    # patterns.
    bf16_near = near_midpoints(bf16_mid64[1:])
    k = max(a.random // 20, 1000)
    sample = rng.choice(bf16_near, size=min(k, bf16_near.size), replace=False)
    f64_bf16_in = np.concatenate([sample.view(np.uint64), rand64[:k // 2], moderate[:k // 2].view(np.uint64)])
    write(out("f64_bf16_in.u64"), f64_bf16_in)
    ref = np.array([round_fraction(float(d), 7, 127) for d in f64_bf16_in.view(np.float64)], dtype=np.uint16)
    write(out("f64_to_bf16.u16"), ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
