// examples/transform_8to3.cpp: a checkpoint trained on 8 ranks, converted to 3 (MindSpore's
// elastic training tutorial, scenario 1: "M and N need not be multiples"). MindSpore's own
// transform_checkpoints refuses this ("Cannot transform device_num from 8 to 3"); reshard plans
// every parameter with its layout algebra, so 8 -> 3 works like 8 -> 4.
//
// Training, 8 ranks: data parallel 2 x model parallel 4 with the parallel optimizer.
// Fine-tuning, 3 ranks: model parallel 3 for layer1 and layer2, whose input dims (784 and 512)
// do not divide by 3: their strategy gives explicit slice sizes (param_split_shape, MindSpore's
// manual split of dim 0); layer3 and the biases are replicated.
//
//   parameter       shape      training (8 ranks)                fine-tuning (3 ranks)
//   layer1.weight   [784,512]  dev[2,1,4] map[1,0] opt(4,2)      dev[1,3,1] map[1,0] split[262,261,261]
//   layer1.bias     [512]      dev[2,1,4] map[0]   opt(4,2)      dev[1,3,1] map[0]   (replicated)
//   layer2.weight   [512,512]  dev[2,4,1] map[1,0] opt(4,2)      dev[1,3,1] map[1,0] split[171,171,170]
//   layer2.bias     [512]      dev[2,4,1] map[0]                 dev[1,3,1] map[0]   (replicated)
//   layer3.weight   [512,10]   dev[2,4,1] map[1,0] opt(4,2)      dev[3,1,1] map[1,0] (replicated)
//   layer3.bias     [10]       dev[2,4,1] map[0]                 dev[3,1,1] map[0]   (replicated)
//   learning_rate, global_step: in no strategy, copied from source rank t % 8
//
// Usage: example_transform_8to3 [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "transform_8to3", [](const fs::path& work) {
    const network net = mlp();
    const strategy train = mlp_training();
    // Manual split of dim 0: the slice sizes, one per rank along the splitting axis.
    auto split = [](io::param_layout l, std::vector<std::int64_t> sizes) {
      l.param_split_shape = std::move(sizes);
      return l;
    };
    const strategy tune{
        {matmul("Default/network/layer1/MatMul-op0", {1, 3}, {3, 1}),
         matmul("Default/network/layer2/MatMul-op1", {1, 3}, {3, 1}),
         matmul("Default/network/layer3/MatMul-op2", {3, 1}, {1, 1})},
        {{"layer1.weight", split(stored({1, 3, 1}, {1, 0}), {262, 261, 261})},
         {"layer1.bias", stored({1, 3, 1}, {0})},
         {"layer2.weight", split(stored({1, 3, 1}, {1, 0}), {171, 171, 170})},
         {"layer2.bias", stored({1, 3, 1}, {0})},
         {"layer3.weight", stored({3, 1, 1}, {1, 0})},
         {"layer3.bias", stored({3, 1, 1}, {0})}}};

    // 1. What the training job saved, and the fine-tuning network's strategy.
    write_strategy(work / "src_strategy.ckpt", net, train);
    write_strategy(work / "dst_strategy.ckpt", net, tune);
    save_distributed(work / "src_checkpoints", "checkpoint_", net, train);
    std::printf("wrote src_checkpoints/rank_<r>/checkpoint_<r>.ckpt (8 ranks), src_strategy.ckpt, "
                "dst_strategy.ckpt (3 ranks)\n\n");

    // 2. The slices of the 3 ranks, their source ranks, and the conversion.
    for (index_t t = 0; t < 3; ++t) {
      const auto l = layout_of(net, tune.layouts[0]);
      std::printf("target rank %lld: layer1.weight %s, reads source ranks %s\n", static_cast<long long>(t),
                  reshard::to_string(reshard::box_of(l, t)).c_str(),
                  list(io::rank_list_for_transform(t, work / "src_strategy.ckpt", work / "dst_strategy.ckpt")).c_str());
    }
    const io::transform_summary sum = io::transform_checkpoints(
        work / "src_checkpoints", work / "dst_checkpoints", "checkpoint_", work / "src_strategy.ckpt",
        work / "dst_strategy.ckpt");
    std::printf("\ntransform_checkpoints: %zu files, %zu sliced tensors, %zu copied parameters\n", sum.files,
                sum.sliced, sum.copied);

    // 3. Every value of the 3 files.
    const int bad = check_distributed(work / "dst_checkpoints", "checkpoint_", net, tune);
    return verdict(bad, "8 ranks -> 3 ranks, uneven slices, every value");
  });
}
