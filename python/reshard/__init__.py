"""reshard: layouts of distributed tensors, minimal redistribution plans, and MindSpore checkpoint
conversion, from Python.

The algebra (in memory, numpy arrays of any dtype):

    Layout(dev_matrix, tensor_map, shape, ...)    MindSpore's convention; Layout.dtensor, Layout.jax,
                                                  Layout.full for the others
    plan(src, dst)                                a minimal plan: .transfers (numpy), .cost(bytes)
    rank_list(src, dst, rank)                     the source ranks a target rank needs
    check_plan(src, dst, transfers)               the verdict on any system's plan, as a dict
    check_rank_list(src, dst, rank, ranks)        is a rank list enough, which ranks are superfluous
    check_dcp_read_items(items)                   the verdict on PyTorch DCP's read items, as a dict
    convert(plan, shards)                         executes a plan on numpy arrays
    split(full, layout), merge(shards, layout)    full tensor <-> pieces

Checkpoints, with MindSpore's function names, parameters and defaults:

    transform_checkpoints(src_checkpoints_dir, dst_checkpoints_dir, ckpt_prefix, ...)
    transform_checkpoint_by_rank(rank_id, checkpoint_files_map, save_checkpoint_file_name, ...)
    rank_list_for_transform(rank_id, src_strategy_file=None, dst_strategy_file=None)
    check_rank_list_for_transform(rank_id, rank_list, src_strategy_file=None, dst_strategy_file=None)
    merge_pipeline_strategys(src_strategy_dirs, dst_strategy_file)

and load_checkpoint_by_rank (one target rank's parameters as numpy arrays, no file written),
merge_checkpoints, split_checkpoint, convert_checkpoint; verify_checkpoints, verify_merged_checkpoint,
verify_split_checkpoint and verify_converted_checkpoint check what each wrote against its sources.

PyTorch DCP: a directory holding .metadata (what torch.distributed.checkpoint saves) is a source of
every checkpoint function (its chunks are its layout: give no source strategy), and
transform_checkpoint_by_rank and load_checkpoint_by_rank take it in place of their {rank: file}
map. Its byte items (pickled Python objects) are left out, named in the summary's warnings
(load_checkpoint_by_rank: as UserWarnings).

Progress: the checkpoint functions take `progress=`: None (the default) shows a tqdm bar on a
terminal when tqdm is importable (nothing otherwise, nor when standard error is not a terminal),
False shows nothing, True a tqdm bar always, and a callable is called with a Progress (rank,
parameter, bytes_done, bytes_total, files_done, files_total) as parameters are written.

Selection, renames and casts: every checkpoint function takes the keyword arguments
`include=` and `exclude=` (a glob or a list of globs over the source names), `rename=`
({regex: replacement}, the first regex found in a name renames it), `rename_map=` ({old: new})
and `dtype=` ("bfloat16": every floating-point parameter; {"*.norm*": "float32"}: by glob; or a
list of both), as the program's --include, --exclude, --rename, --rename-map and --dtype. The globs
match the source names, before any renaming. Every function that writes checkpoints takes
output_format="hf" (a Hugging Face checkpoint directory, shards of at most `max_shard_size`
bytes): transform_checkpoints and split_checkpoint write one per target rank,
<dst>/rank_<t>/<ckpt_prefix><t>/. output_format="dcp" (merge_checkpoints, convert_checkpoint,
transform_checkpoints, split_checkpoint) writes one PyTorch DCP directory of every target rank (the
output path itself), its .metadata naming torch 2's modules, or torch 1.13's with dcp_torch="1.13"
(dcp_torch without output_format="dcp", or another value, is a ValueError). The verify functions take the same keyword arguments as the run
they check (but max_shard_size: they compare tensors, whatever the shards) and return a dict:
ok, files, tensors, bytes, seconds and mismatches ([{file, parameter, what}]).

Errors are exceptions: reshard.Error (a ValueError) for bad input (layouts, strategies, files),
OSError and its subclasses (FileNotFoundError, FileExistsError, PermissionError, ...) when the
file system refuses. Ctrl-C (KeyboardInterrupt), or an exception raised by a progress callback,
abandons a checkpoint workflow: no output file is left.
"""

import os as _os

from ._reshard import (  # noqa: F401
    Error,
    Layout,
    Plan,
    Progress,
    Replicate,
    Shard,
    __version__,
    check_plan,
    check_rank_list,
    convert,
    merge,
    plan,
    rank_list,
    split,
)
from . import _reshard as _core

for _t in (Error, Layout, Plan, Progress, Replicate, Shard):
    _t.__module__ = "reshard"

__all__ = [
    "Error", "Layout", "Plan", "Progress", "Replicate", "Shard", "__version__", "check_plan", "check_rank_list",
    "check_dcp_read_items", "check_rank_list_for_transform", "convert", "merge", "plan", "rank_list", "split", "transform_checkpoints",
    "transform_checkpoint_by_rank", "rank_list_for_transform",
    "merge_pipeline_strategys", "merge_pipeline_strategies", "load_checkpoint_by_rank", "merge_checkpoints",
    "split_checkpoint", "convert_checkpoint", "verify_checkpoints", "verify_merged_checkpoint",
    "verify_split_checkpoint", "verify_converted_checkpoint",
]


def _path(p, what, must_exist=False, optional=False):
    if p is None:
        if optional:
            return ""
        raise TypeError("%s is required" % what)
    try:
        s = _os.fspath(p)
    except TypeError:
        raise TypeError("%s must be a path (str or os.PathLike), not %s" % (what, type(p).__name__)) from None
    if isinstance(s, bytes):
        s = _os.fsdecode(s)
    if not s and optional:
        return ""
    if must_exist and not _os.path.exists(s):
        raise FileNotFoundError(2, "%s %s does not exist" % (what, s), s)
    return s


def _int(v, what, least=None):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy
            if isinstance(v, numpy.integer):
                v = int(v)
            else:
                raise TypeError
        except (ImportError, TypeError):
            raise TypeError("%s must be an int, not %s" % (what, type(v).__name__)) from None
    if least is not None and v < least:
        raise ValueError("%s must be >= %d, not %d" % (what, least, v))
    return v


def _is_dcp(p):
    """Is the path `p` a PyTorch DCP checkpoint (a directory holding .metadata)?"""
    return _os.path.isdir(p) and _os.path.exists(_os.path.join(p, ".metadata"))


def _files_map(checkpoint_files_map, op):
    """A dict {source rank: checkpoint file}, checked; or a PyTorch DCP checkpoint directory (a
    path), passed on as its path."""
    if isinstance(checkpoint_files_map, (str, bytes, _os.PathLike)):
        d = _path(checkpoint_files_map, "checkpoint_files_map", True)
        if not _is_dcp(d):
            raise Error("%s: checkpoint_files_map %s is not a PyTorch DCP checkpoint (a directory holding "
                        ".metadata); give a dict {source rank: checkpoint file} for other checkpoints" % (op, d))
        return d
    if not isinstance(checkpoint_files_map, dict):
        raise TypeError("checkpoint_files_map must be a dict {source rank: checkpoint file} or the path of a "
                        "PyTorch DCP checkpoint directory, not %s" % type(checkpoint_files_map).__name__)
    return {_int(r, "checkpoint_files_map key", 0): _path(f, "checkpoint file of source rank %s" % r, True)
            for r, f in checkpoint_files_map.items()}


class _Bar:
    """A tqdm bar over the bytes written, fed by progress callbacks."""

    def __init__(self, desc, always):
        import tqdm
        self.bar = tqdm.tqdm(desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                             disable=None if not always else False)

    def __call__(self, p):
        if self.bar.total != p.bytes_total:
            self.bar.total = p.bytes_total
        self.bar.update(p.bytes_done - self.bar.n)
        self.bar.set_postfix_str("files %d/%d" % (p.files_done, p.files_total), refresh=False)

    def close(self):
        self.bar.close()


def _run(fn, progress, desc, *args, opts=None):
    """Calls fn(*args, progress_callback, opts) with `progress` resolved (see the module's doc)."""
    bar = None
    if progress is None or progress is True:
        try:
            bar = _Bar(desc, progress is True)
        except ImportError:
            if progress is True:
                raise
        callback = bar
    elif progress is False:
        callback = None
    elif callable(progress):
        callback = progress
    else:
        raise TypeError("progress must be None, True, False or a callable, not %s" % type(progress).__name__)
    try:
        return fn(*args, callback, opts or {})
    finally:
        if bar is not None:
            bar.close()


def _format(output_format):
    """The format of the per-rank outputs (transform_checkpoints, split_checkpoint)."""
    if output_format not in ("ckpt", "safetensors", "hf", "dcp"):
        raise ValueError("output_format must be 'ckpt', 'safetensors', 'hf' or 'dcp', not %r" % (output_format,))
    return output_format


def _prefix(ckpt_prefix):
    if not isinstance(ckpt_prefix, str):
        raise TypeError("ckpt_prefix must be a str, not %s" % type(ckpt_prefix).__name__)
    return ckpt_prefix


def _strings(v, what):
    """A glob or a list of globs -> [str]."""
    if v is None:
        return None
    if isinstance(v, str):
        return [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise TypeError("%s must be a str or a list of str, not %r" % (what, v))
    return list(v)


def _pairs(v, what):
    """{key: value} or [(key, value), ...] of str -> [(str, str)], in order."""
    if v is None:
        return None
    items = list(v.items()) if isinstance(v, dict) else v
    try:
        pairs = [(k, x) for k, x in items]
    except (TypeError, ValueError):
        raise TypeError("%s must be a dict or a list of (str, str) pairs, not %r" % (what, v)) from None
    if not all(isinstance(k, str) and isinstance(x, str) for k, x in pairs):
        raise TypeError("%s must map str to str, not %r" % (what, v))
    return pairs


def _opts(output_format=None, max_shard_size=None, include=None, exclude=None, rename=None, rename_map=None,
          dtype=None, dcp_torch=None):
    """The keyword arguments shared by the checkpoint functions, checked, as the C++ side takes them.

    include / exclude: a glob or a list of globs over the source names (fnmatch: *, ?, [...]).
    rename: {regex: replacement} (or a list of pairs), the first regex found in a name renames it.
    rename_map: {old name: new name}. dtype: a dtype name (every floating-point parameter cast to
    it), a {glob: dtype} dict (the first glob that matches a source name), or a list of both.
    dcp_torch: "2" or "1.13", the torch whose module paths a DCP output's .metadata names."""
    o = {"format": output_format, "include": _strings(include, "include"), "exclude": _strings(exclude, "exclude"),
         "rename": _pairs(rename, "rename"), "rename_map": None, "dtype_all": None, "dtype_named": None}
    if rename_map is not None:
        o["rename_map"] = dict(_pairs(rename_map, "rename_map"))
    if max_shard_size is not None:
        if output_format != "hf":
            raise ValueError("max_shard_size applies to output_format='hf' only")
        o["max_shard_bytes"] = _int(max_shard_size, "max_shard_size", 1)
    if dcp_torch is not None:
        if output_format != "dcp":
            raise ValueError("dcp_torch applies to output_format='dcp' only, not output_format=%r" % (output_format,))
        if dcp_torch not in ("1.13", "2"):
            raise ValueError("dcp_torch must be '1.13' or '2', not %r" % (dcp_torch,))
        o["dcp_torch"] = dcp_torch
    if dtype is not None:
        named = []
        for d in (dtype if isinstance(dtype, (list, tuple)) else [dtype]):
            if isinstance(d, str):
                if o["dtype_all"] is not None and o["dtype_all"] != d:
                    raise ValueError("dtype: two dtypes for all parameters: %r and %r" % (o["dtype_all"], d))
                o["dtype_all"] = d
            elif isinstance(d, dict):
                named += _pairs(d, "dtype")
            else:
                raise TypeError("dtype must be a dtype name, a {glob: dtype} dict or a list of them, not %r" % (d,))
        o["dtype_named"] = named
    return o


# ------------------------------------------------------------------------------------------------
# MindSpore's four functions

def transform_checkpoints(src_checkpoints_dir, dst_checkpoints_dir, ckpt_prefix, src_strategy_file=None,
                          dst_strategy_file=None, process_num=1, output_format="ckpt", *, progress=None,
                          force=False, max_shard_size=None, include=None, exclude=None, rename=None, rename_map=None,
                          dtype=None, dcp_torch=None):
    """Converts the distributed checkpoint `src_checkpoints_dir` (rank_<r>/<last *.ckpt or *.safetensors>
    for every source rank r) from the layouts of `src_strategy_file` to those of `dst_strategy_file`,
    writing `dst_checkpoints_dir`/rank_<t>/<ckpt_prefix><t>.ckpt (or .safetensors, per `output_format`)
    for every target rank t. A strategy file of None: the tensors whole on one rank. With
    output_format="hf" every target rank gets a Hugging Face checkpoint directory
    `dst_checkpoints_dir`/rank_<t>/<ckpt_prefix><t>/ (shards of at most `max_shard_size` bytes).

    reshard converts any M source ranks to any N target ranks (no divisibility between them), with
    uneven shards, optimizer sharding and pipeline stages. `process_num` is the number of target
    files written in parallel (threads; 0 = one per core). Outputs appear all together or not at
    all: on an error or KeyboardInterrupt no output file is left. Existing outputs are an error
    unless `force`. `include`, `exclude`, `rename`, `rename_map` and `dtype` select, rename and cast
    parameters (see the module's doc). Returns a summary dict (files, bytes_written, seconds, ...)."""
    return _run(_core._transform_checkpoints, progress, "transform_checkpoints",
                _path(src_checkpoints_dir, "src_checkpoints_dir", True), _path(dst_checkpoints_dir, "dst_checkpoints_dir"),
                _prefix(ckpt_prefix), _path(src_strategy_file, "src_strategy_file", True, True),
                _path(dst_strategy_file, "dst_strategy_file", True, True), _int(process_num, "process_num", 0),
                bool(force),
                opts=_opts(_format(output_format), max_shard_size, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def transform_checkpoint_by_rank(rank_id, checkpoint_files_map, save_checkpoint_file_name, src_strategy_file=None,
                                 dst_strategy_file=None, *, progress=None, force=False, output_format=None,
                                 max_shard_size=None, include=None, exclude=None, rename=None, rename_map=None,
                                 dtype=None):
    """Writes target rank `rank_id`'s checkpoint `save_checkpoint_file_name` (ckpt, or safetensors if
    the name ends in .safetensors; with output_format="hf" a Hugging Face checkpoint directory) from
    `checkpoint_files_map` ({source rank: checkpoint file}, or the path of a PyTorch DCP checkpoint
    directory, which takes no src_strategy_file).

    The files needed are rank_list_for_transform(rank_id, ...), which reshard keeps minimal: one
    source rank per distinct piece of data (any replica of a piece also does). Returns a summary dict."""
    return _run(_core._transform_checkpoint_by_rank, progress, "transform_checkpoint_by_rank",
                _int(rank_id, "rank_id", 0), _files_map(checkpoint_files_map, "transform_checkpoint_by_rank"),
                _path(save_checkpoint_file_name, "save_checkpoint_file_name"),
                _path(src_strategy_file, "src_strategy_file", True, True),
                _path(dst_strategy_file, "dst_strategy_file", True, True), bool(force),
                opts=_opts(_by_name_or_hf(output_format, dcp=False), max_shard_size, include, exclude, rename,
                           rename_map, dtype))


def rank_list_for_transform(rank_id, src_strategy_file=None, dst_strategy_file=None):
    """The source ranks whose checkpoints target rank `rank_id` needs, ascending.

    Minimal in reshard: one source rank per distinct piece of data the target needs (the target
    rank itself where it holds the piece), plus rank_id % M, from which the parameters no strategy
    lists are copied."""
    return _core._rank_list_for_transform(_int(rank_id, "rank_id", 0),
                                          _path(src_strategy_file, "src_strategy_file", True, True),
                                          _path(dst_strategy_file, "dst_strategy_file", True, True))


def check_dcp_read_items(items, max_problems=100):
    """The verdict on PyTorch DCP's read items (the dict of docs/formats.md#dcp-read-items, as the
    Python lines there return it, or the path of a JSON file holding it), as `reshard check-plan
    --dcp --json` prints it: ok, problem_count, and per tensor ok, complete, sound, problems and the
    figures (items, meeting_pairs, read_bytes, target_bytes, other_rank_bytes, max_other_rank_bytes)."""
    limit = _int(max_problems, "max_problems", 0)
    if isinstance(items, dict):
        import json
        try:
            text = json.dumps(items)
        except (TypeError, ValueError) as e:
            raise Error("check_dcp_read_items: items is not JSON: %s" % e) from None
        return _core._check_dcp_read_items(text, False, limit)
    return _core._check_dcp_read_items(_path(items, "items", True), True, limit)


def check_rank_list_for_transform(rank_id, rank_list, src_strategy_file=None, dst_strategy_file=None):
    """The verdict on `rank_list` (MindSpore's: the source ranks whose checkpoints target rank
    `rank_id` reads) against every parameter of the strategies, as `reshard check-rank-list
    --json` prints it: sufficient, minimal_list, missing (parameters and boxes), superfluous,
    kept (none of which can be spared) and rank_list (rank_list_for_transform's)."""
    return _core._check_rank_list_for_transform(_int(rank_id, "rank_id", 0),
                                                [_int(r, "rank_list entry", 0) for r in rank_list],
                                                _path(src_strategy_file, "src_strategy_file", True, True),
                                                _path(dst_strategy_file, "dst_strategy_file", True, True))


def merge_pipeline_strategys(src_strategy_dirs, dst_strategy_file):
    """Merges the per-stage strategy files of a pipeline (every file of the directory
    `src_strategy_dirs`, all protobuf or all JSON) into `dst_strategy_file` (JSON if it ends in
    .json, else protobuf), parameter names becoming "<stage>-<name>"; an existing file is replaced."""
    src = _path(src_strategy_dirs, "src_strategy_dirs", True)
    dst = _path(dst_strategy_file, "dst_strategy_file")
    parent = _os.path.dirname(dst)
    if parent:
        _os.makedirs(parent, exist_ok=True)
    _core._merge_pipeline_strategies(src, dst, True)


merge_pipeline_strategies = merge_pipeline_strategys


# ------------------------------------------------------------------------------------------------
# more

def load_checkpoint_by_rank(rank_id, checkpoint_files_map, src_strategy_file=None, dst_strategy_file=None, *,
                            progress=None, include=None, exclude=None, rename=None, rename_map=None, dtype=None):
    """Target rank `rank_id`'s parameters as a dict {name: numpy array}, in the order its checkpoint
    file would hold them: what transform_checkpoint_by_rank would write, read into memory with no
    file written. Only the bytes the rank needs are read. BFloat16 arrays are ml_dtypes.bfloat16
    when ml_dtypes is importable, else uint16 (the same bits). `checkpoint_files_map` may be the
    path of a PyTorch DCP checkpoint directory (no src_strategy_file; no dst_strategy_file: the full
    tensors). The run's warnings (the DCP byte items left out, casts that do not apply) are raised
    as UserWarnings."""
    params, summary = _run(_core._load_checkpoint_by_rank, progress, "load_checkpoint_by_rank",
                           _int(rank_id, "rank_id", 0), _files_map(checkpoint_files_map, "load_checkpoint_by_rank"),
                           _path(src_strategy_file, "src_strategy_file", True, True),
                           _path(dst_strategy_file, "dst_strategy_file", True, True),
                           opts=_opts(None, None, include, exclude, rename, rename_map, dtype))
    import warnings
    for w in summary.get("warnings", []):  # the summary, which holds them elsewhere, is not returned
        warnings.warn("load_checkpoint_by_rank: " + w, stacklevel=2)
    return params


def merge_checkpoints(src_checkpoints_dir, dst_checkpoint_file, src_strategy_file=None, *, progress=None,
                      force=False, output_format=None, max_shard_size=None, include=None, exclude=None, rename=None,
                      rename_map=None, dtype=None, dcp_torch=None):
    """Merges the distributed checkpoint `src_checkpoints_dir` into one checkpoint of full tensors:
    ckpt or safetensors by `dst_checkpoint_file`'s name, or with output_format="hf" a Hugging Face
    checkpoint in the directory `dst_checkpoint_file` (shards of at most `max_shard_size` bytes)."""
    return _run(_core._merge_checkpoints, progress, "merge_checkpoints",
                _path(src_checkpoints_dir, "src_checkpoints_dir", True), _path(dst_checkpoint_file, "dst_checkpoint_file"),
                _path(src_strategy_file, "src_strategy_file", True, True), bool(force),
                opts=_opts(_by_name_or_hf(output_format), max_shard_size, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def split_checkpoint(checkpoint_file, dst_checkpoints_dir, dst_strategy_file, ckpt_prefix="checkpoint_",
                     process_num=1, output_format="ckpt", *, progress=None, force=False, max_shard_size=None,
                     include=None, exclude=None, rename=None, rename_map=None, dtype=None, dcp_torch=None):
    """Splits a checkpoint of full tensors by `dst_strategy_file` into
    `dst_checkpoints_dir`/rank_<t>/<ckpt_prefix><t>.ckpt (or .safetensors; with output_format="hf"
    the Hugging Face checkpoint directories `dst_checkpoints_dir`/rank_<t>/<ckpt_prefix><t>/)."""
    return _run(_core._split_checkpoint, progress, "split_checkpoint",
                _path(checkpoint_file, "checkpoint_file", True), _path(dst_checkpoints_dir, "dst_checkpoints_dir"),
                _path(dst_strategy_file, "dst_strategy_file", True), _prefix(ckpt_prefix),
                _int(process_num, "process_num", 0), bool(force),
                opts=_opts(_format(output_format), max_shard_size, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def convert_checkpoint(src_file, dst_file, *, progress=None, force=False, output_format=None, max_shard_size=None,
                       include=None, exclude=None, rename=None, rename_map=None, dtype=None, dcp_torch=None):
    """Converts one checkpoint between ckpt and safetensors (by the file names), or with
    output_format="hf" into a Hugging Face checkpoint in the directory `dst_file`."""
    return _run(_core._convert_checkpoint, progress, "convert_checkpoint",
                _path(src_file, "src_file", True), _path(dst_file, "dst_file"), bool(force),
                opts=_opts(_by_name_or_hf(output_format), max_shard_size, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def _by_name_or_hf(output_format, dcp=True):
    """The format of one output (merge, convert; transform_checkpoint_by_rank: not dcp, whose
    .metadata lists every rank's chunks)."""
    if output_format not in ((None, "hf", "dcp") if dcp else (None, "hf")):
        raise ValueError("output_format must be None (ckpt or safetensors, by the file's name)%s, not %r"
                         % (", 'hf' or 'dcp'" if dcp else " or 'hf' (a PyTorch DCP checkpoint lists every rank's "
                            "chunks: write it with transform_checkpoints)", output_format))
    return output_format


# ------------------------------------------------------------------------------------------------
# checking what the functions above wrote

def verify_checkpoints(src_checkpoints_dir, dst_checkpoints_dir, ckpt_prefix, src_strategy_file=None,
                       dst_strategy_file=None, process_num=1, output_format="ckpt", *, progress=None, include=None,
                       exclude=None, rename=None, rename_map=None, dtype=None, dcp_torch=None):
    """Checks what transform_checkpoints wrote to `dst_checkpoints_dir` against its sources: every
    target tensor is made again and compared byte for byte. Give it the arguments of the run
    (output_format, include, exclude, rename, rename_map, dtype): the tensors expected are those the
    run wrote. Returns {ok, files, tensors, bytes, seconds, mismatches: [{file, parameter, what}]};
    a difference is a mismatch, not an exception (bad sources are errors, as for the run)."""
    return _run(_core._verify_checkpoints, progress, "verify_checkpoints",
                _path(src_checkpoints_dir, "src_checkpoints_dir", True),
                _path(dst_checkpoints_dir, "dst_checkpoints_dir", True), _prefix(ckpt_prefix),
                _path(src_strategy_file, "src_strategy_file", True, True),
                _path(dst_strategy_file, "dst_strategy_file", True, True), _int(process_num, "process_num", 0),
                opts=_opts(_format(output_format), None, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def verify_merged_checkpoint(src_checkpoints_dir, dst_checkpoint_file, src_strategy_file=None, *, progress=None,
                             output_format=None, include=None, exclude=None, rename=None, rename_map=None,
                             dtype=None, dcp_torch=None):
    """Checks what merge_checkpoints wrote to `dst_checkpoint_file` (a file, or with
    output_format="hf" a Hugging Face directory) against its sources, as verify_checkpoints does."""
    return _run(_core._verify_merged_checkpoint, progress, "verify_merged_checkpoint",
                _path(src_checkpoints_dir, "src_checkpoints_dir", True),
                _path(dst_checkpoint_file, "dst_checkpoint_file", True),
                _path(src_strategy_file, "src_strategy_file", True, True),
                opts=_opts(_by_name_or_hf(output_format), None, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def verify_split_checkpoint(checkpoint_file, dst_checkpoints_dir, dst_strategy_file, ckpt_prefix="checkpoint_",
                            process_num=1, output_format="ckpt", *, progress=None, include=None, exclude=None,
                            rename=None, rename_map=None, dtype=None, dcp_torch=None):
    """Checks what split_checkpoint wrote to `dst_checkpoints_dir` against `checkpoint_file`, as
    verify_checkpoints does."""
    return _run(_core._verify_split_checkpoint, progress, "verify_split_checkpoint",
                _path(checkpoint_file, "checkpoint_file", True), _path(dst_checkpoints_dir, "dst_checkpoints_dir", True),
                _path(dst_strategy_file, "dst_strategy_file", True), _prefix(ckpt_prefix),
                _int(process_num, "process_num", 0),
                opts=_opts(_format(output_format), None, include, exclude, rename, rename_map, dtype,
                           dcp_torch))


def verify_converted_checkpoint(src_file, dst_file, *, progress=None, output_format=None, include=None, exclude=None,
                                rename=None, rename_map=None, dtype=None, dcp_torch=None):
    """Checks what convert_checkpoint wrote to `dst_file` against `src_file`, as verify_checkpoints
    does."""
    return _run(_core._verify_converted_checkpoint, progress, "verify_converted_checkpoint",
                _path(src_file, "src_file", True), _path(dst_file, "dst_file", True),
                opts=_opts(_by_name_or_hf(output_format), None, include, exclude, rename, rename_map, dtype,
                           dcp_torch))
