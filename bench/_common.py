"""What bench/disk.py and bench/dcp.py share: the sizes and the model they generate."""

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
NPARAMS = 16


def model(size_bytes, row_multiple):
    """[(name, [R, C])]: NPARAMS equal float32 parameters layer<i>.weight of about size_bytes in
    all; R a multiple of row_multiple (every row split of the caller divides it), C a multiple of 4
    (1024 from 16 MiB a parameter, 256 from 256 KiB, else 32)."""
    elems = size_bytes / 4 / NPARAMS
    cols = 1024 if elems >= 4 * MiB else 256 if elems >= 64 * KiB else 32
    rows = max(row_multiple, round(elems / cols / row_multiple) * row_multiple)
    return [("layer%d.weight" % i, [rows, cols]) for i in range(NPARAMS)]
