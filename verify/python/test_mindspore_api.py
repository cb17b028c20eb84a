"""A script written against MindSpore's checkpoint-transformation functions runs unchanged with
`import reshard as ms`: the same names, parameters and defaults, called the way MindSpore's
documentation calls them, positionally and by keyword."""

import inspect
import os

import pytest

import ms_scenario
import reshard

MINDSPORE_SIGNATURES = {
    "transform_checkpoints": [("src_checkpoints_dir", inspect.Parameter.empty),
                              ("dst_checkpoints_dir", inspect.Parameter.empty),
                              ("ckpt_prefix", inspect.Parameter.empty), ("src_strategy_file", None),
                              ("dst_strategy_file", None), ("process_num", 1), ("output_format", "ckpt")],
    "transform_checkpoint_by_rank": [("rank_id", inspect.Parameter.empty),
                                     ("checkpoint_files_map", inspect.Parameter.empty),
                                     ("save_checkpoint_file_name", inspect.Parameter.empty),
                                     ("src_strategy_file", None), ("dst_strategy_file", None)],
    "rank_list_for_transform": [("rank_id", inspect.Parameter.empty), ("src_strategy_file", None),
                                ("dst_strategy_file", None)],
    "merge_pipeline_strategys": [("src_strategy_dirs", inspect.Parameter.empty),
                                 ("dst_strategy_file", inspect.Parameter.empty)],
}


@pytest.mark.parametrize("name", sorted(MINDSPORE_SIGNATURES))
def test_signatures(name):
    params = inspect.signature(getattr(reshard, name)).parameters.values()
    positional = [(p.name, p.default) for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == MINDSPORE_SIGNATURES[name]
    # reshard's additions are keyword-only
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in params
               if p.kind != inspect.Parameter.POSITIONAL_OR_KEYWORD)


def test_mindspore_script(tmp_path):
    train = ms_scenario.gen("retrain_8to4", str(tmp_path / "job"))
    assert train == 0
    base = str(tmp_path / "job")
    src_checkpoints_dir = os.path.join(base, "src")
    src_strategy_file = os.path.join(base, "src_strategy.ckpt")
    dst_strategy_file = os.path.join(base, "dst_strategy.ckpt")

    # ---- the script, as written for MindSpore
    import reshard as ms

    dst_checkpoints_dir = os.path.join(base, "transformed")
    ms.transform_checkpoints(src_checkpoints_dir, dst_checkpoints_dir, "checkpoint_", src_strategy_file,
                             dst_strategy_file)

    by_rank_dir = os.path.join(base, "by_rank")
    for rank_id in range(4):
        rank_list = ms.rank_list_for_transform(rank_id, src_strategy_file, dst_strategy_file)
        checkpoint_files_map = {}
        for rank in rank_list:
            rank_dir = os.path.join(src_checkpoints_dir, "rank_{}".format(rank))
            checkpoint_files_map[rank] = os.path.join(rank_dir, sorted(os.listdir(rank_dir))[-1])
        save_checkpoint_path = os.path.join(by_rank_dir, "rank_{}".format(rank_id))
        os.makedirs(save_checkpoint_path, exist_ok=True)
        save_checkpoint_file_name = os.path.join(save_checkpoint_path, "checkpoint_{}.ckpt".format(rank_id))
        ms.transform_checkpoint_by_rank(rank_id, checkpoint_files_map, save_checkpoint_file_name,
                                        src_strategy_file, dst_strategy_file)

    keywords_dir = os.path.join(base, "keywords")
    ms.transform_checkpoints(src_checkpoints_dir=src_checkpoints_dir, dst_checkpoints_dir=keywords_dir,
                             ckpt_prefix="checkpoint_", src_strategy_file=src_strategy_file,
                             dst_strategy_file=dst_strategy_file, process_num=2, output_format="ckpt")
    # ---- end of the script

    for out in (dst_checkpoints_dir, by_rank_dir, keywords_dir):
        assert ms_scenario.check(base, out) == 0


def test_mindspore_pipeline_script(tmp_path):
    assert ms_scenario.gen("pipeline_to4", str(tmp_path / "job")) == 0
    base = str(tmp_path / "job")

    # ---- the script, as written for MindSpore
    import reshard as ms

    src_strategy_dirs = os.path.join(base, "stages")
    src_strategy_file = os.path.join(base, "merged_strategy.ckpt")
    ms.merge_pipeline_strategys(src_strategy_dirs, src_strategy_file)
    ms.transform_checkpoints(os.path.join(base, "src"), os.path.join(base, "out"), "checkpoint_",
                             src_strategy_file, os.path.join(base, "dst_strategy.ckpt"))
    # ---- end of the script

    assert ms_scenario.check(base, os.path.join(base, "out")) == 0
