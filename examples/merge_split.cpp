// examples/merge_split.cpp: a distributed checkpoint merged into one file of full tensors, and
// that file split again (MindSpore's load_distributed_checkpoint / merge_sliced_parameter, then
// transform_checkpoints with src_strategy_file=None).
//
// The tutorial's network trained on 8 ranks, fine-tuned on 4 with the parallel optimizer:
//
//   parameter              shape      training (8 ranks)         fine-tuning (4 ranks)
//   layer1.weight          [784,512]  dev[2,1,2,2] map[2,1]      dev[2,2,1] map[1,0] opt(2,2)
//   moments.layer1.weight  [784,512]  dev[2,1,2,2] map[2,1]      dev[2,2,1] map[1,0] opt(2,2)
//   layer1.bias            [512]      dev[2,1,2,2] map[1]        dev[2,2,1] map[0]   (replicated)
//   position_ids           [1,512]    dev[2,1,2,2] map[-1,1]     dev[2,2,1] map[-1,-1] (int32)
//   learning_rate, global_step: in no strategy
//
//   1. merge_checkpoints: the 8 files -> full.ckpt;
//   2. split_checkpoint: full.ckpt -> the 4 fine-tuning ranks; the same files, byte for byte, as
//      transform_checkpoints from the 8 ranks directly; and as safetensors files;
//   3. split_checkpoint: full.ckpt -> the 8 training ranks: the files saved at the start, byte for
//      byte.
//
// Usage: example_merge_split [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "merge_split", [](const fs::path& work) {
    const network net{
        {"layer1.weight", io::dtype::float32, {784, 512}},
        {"moments.layer1.weight", io::dtype::float32, {784, 512}},
        {"layer1.bias", io::dtype::float32, {512}},
        {"position_ids", io::dtype::int32, {1, 512}},
    };
    const strategy train{{matmul("Default/network/layer1/MatMul-op0", {2, 1}, {1, 2})},
                         {{"layer1.weight", stored({2, 1, 2, 2}, {2, 1})},
                          {"moments.layer1.weight", stored({2, 1, 2, 2}, {2, 1})},
                          {"layer1.bias", stored({2, 1, 2, 2}, {1})},
                          {"position_ids", stored({2, 1, 2, 2}, {-1, 1})}}};
    const strategy tune{{matmul("Default/network/layer1/MatMul-op0", {2, 2}, {2, 1})},
                        {{"layer1.weight", stored({2, 2, 1}, {1, 0}, 2, 2)},
                         {"moments.layer1.weight", stored({2, 2, 1}, {1, 0}, 2, 2)},
                         {"layer1.bias", stored({2, 2, 1}, {0})},
                         {"position_ids", stored({2, 2, 1}, {-1, -1})}}};
    save_distributed(work / "src_checkpoints", "checkpoint_", net, train);
    write_strategy(work / "train_strategy.ckpt", net, train);
    write_strategy(work / "tune_strategy.ckpt", net, tune);
    std::printf("wrote src_checkpoints/rank_<r>/checkpoint_<r>.ckpt (8 ranks), train_strategy.ckpt, "
                "tune_strategy.ckpt\n");
    int bad = 0;
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) std::printf("  MISMATCH: %s\n", what.c_str());
      bad += !ok;
    };

    // 1. Merge: every parameter whole, in one file.
    std::printf("\n1. merge_checkpoints -> full.ckpt\n");
    io::merge_checkpoints(work / "src_checkpoints", work / "full.ckpt", work / "train_strategy.ckpt");
    bad += check_file(work / "full.ckpt", net, nullptr, 0);

    // 2. Split by the fine-tuning strategy: the same as converting the 8 ranks directly.
    std::printf("\n2. split_checkpoint full.ckpt -> 4 fine-tuning ranks (ckpt, then safetensors)\n");
    io::split_checkpoint(work / "full.ckpt", work / "tune_split", work / "tune_strategy.ckpt");
    bad += check_distributed(work / "tune_split", "checkpoint_", net, tune);
    io::transform_checkpoints(work / "src_checkpoints", work / "tune_direct", "checkpoint_",
                              work / "train_strategy.ckpt", work / "tune_strategy.ckpt");
    for (index_t t = 0; t < 4; ++t)
      expect(same_bytes(rank_file(work / "tune_split", "checkpoint_", t), rank_file(work / "tune_direct", "checkpoint_", t)),
             numbered("split and direct transform differ for rank ", t));
    io::split_checkpoint(work / "full.ckpt", work / "tune_safetensors", work / "tune_strategy.ckpt", "checkpoint_",
                         {.format = io::checkpoint_format::safetensors});
    bad += check_distributed(work / "tune_safetensors", "checkpoint_", net, tune, true, ".safetensors");

    // 3. Split by the training strategy: the files the training ranks saved.
    std::printf("\n3. split_checkpoint full.ckpt -> the 8 training ranks\n");
    io::split_checkpoint(work / "full.ckpt", work / "train_again", work / "train_strategy.ckpt");
    bad += check_distributed(work / "train_again", "checkpoint_", net, train);
    for (index_t r = 0; r < 8; ++r)
      expect(same_bytes(rank_file(work / "train_again", "checkpoint_", r), rank_file(work / "src_checkpoints", "checkpoint_", r)),
             numbered("split back to training, rank ", r, " differs from the file it saved"));
    return verdict(bad, "merged to full tensors and split to 4 ranks and back to 8, every value");
  });
}
