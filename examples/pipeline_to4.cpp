// examples/pipeline_to4.cpp: a checkpoint of a 2-stage pipeline on 8 ranks, converted to 4 ranks
// without pipeline (MindSpore's model transformation tutorial, "pipeline parallel model
// transformation").
//
// Training, 8 ranks, pipeline_stages=2 and enable_parallel_optimizer: stage 0 (ranks 0-3) holds
// layer1, stage 1 (ranks 4-7) layer2 and layer3, with their optimizer states (moments.*). Each
// stage's strategy file describes its own 4 devices only, so every rank saves its own:
// src_pipeline_strategys/src_strategy_<r>.ckpt. merge_pipeline_strategies merges them into one
// file (each stage once; parameter names become "<stage>-<name>"), which transform_checkpoints
// then reads like any source strategy. A stage's ranks are global: stage 1's local rank 0 is
// rank 4.
//
//   parameter        shape      stage  training (4 ranks a stage)       retraining (4 ranks)
//   layer1.weight    [784,512]  0      dev[1,2,2] map[1,0]              dev[1,4,1] map[1,0]
//   layer1.bias      [512]      0      dev[1,2,2] map[0]   opt(2,2)     dev[1,4,1] map[0]   opt(1,4)
//   layer2.weight    [512,512]  1      dev[4,1,1] map[1,0] opt(1,4)     dev[4,1,1] map[1,0] opt(1,4)
//   layer2.bias      [512]      1      dev[4,1,1] map[0]   opt(1,4)     dev[4,1,1] map[0]   opt(1,4)
//   layer3.weight    [512,10]   1      dev[2,2,1] map[1,0] opt(2,2)     dev[2,2,1] map[1,0] opt(2,2)
//   layer3.bias      [10]       1      dev[2,2,1] map[0]                dev[2,2,1] map[0]
//   moments.layerN.weight: the optimizer's states, with their weight's layouts
//   learning_rate, global_step: in no strategy, copied from source rank t % 8
//
// Usage: example_pipeline_to4 [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "pipeline_to4", [](const fs::path& work) {
    network net = mlp();  // 784 -> 512 -> 512 -> 10
    strategy train{{matmul("Default/network/layer1/MatMul-op0", {1, 2}, {2, 2}, 0),
                    matmul("Default/network/layer2/MatMul-op1", {4, 1}, {1, 1}, 1),
                    matmul("Default/network/layer3/MatMul-op2", {2, 2}, {2, 1}, 1)},
                   {{"layer1.weight", stored({1, 2, 2}, {1, 0}), 0},
                    {"layer1.bias", stored({1, 2, 2}, {0}, 2, 2), 0},
                    {"layer2.weight", stored({4, 1, 1}, {1, 0}, 1, 4), 1},
                    {"layer2.bias", stored({4, 1, 1}, {0}, 1, 4), 1},
                    {"layer3.weight", stored({2, 2, 1}, {1, 0}, 2, 2), 1},
                    {"layer3.bias", stored({2, 2, 1}, {0}), 1}}};
    strategy retrain{{matmul("Default/network/layer1/MatMul-op0", {1, 4}, {4, 1}),
                      matmul("Default/network/layer2/MatMul-op1", {4, 1}, {1, 1}),
                      matmul("Default/network/layer3/MatMul-op2", {2, 2}, {2, 1})},
                     {{"layer1.weight", stored({1, 4, 1}, {1, 0})},
                      {"layer1.bias", stored({1, 4, 1}, {0}, 1, 4)},
                      {"layer2.weight", stored({4, 1, 1}, {1, 0}, 1, 4)},
                      {"layer2.bias", stored({4, 1, 1}, {0}, 1, 4)},
                      {"layer3.weight", stored({2, 2, 1}, {1, 0}, 2, 2)},
                      {"layer3.bias", stored({2, 2, 1}, {0})}}};
    // The optimizer's states: one per weight, laid out as the weight.
    for (const char* w : {"layer1.weight", "layer2.weight", "layer3.weight"}) {
      std::string m("moments.");
      m.append(w);
      net.push_back({m, io::dtype::float32, net[index_of(net, w)].shape});
      for (strategy* s : {&train, &retrain})
        for (std::size_t i = 0, n = s->layouts.size(); i < n; ++i)
          if (s->layouts[i].name == w) s->layouts.push_back({m, s->layouts[i].stored, s->layouts[i].stage});
    }

    // 1. What the pipeline job saved: one strategy file per rank (the stage's), 8 checkpoints
    //    each holding its stage's parameters; and the retraining network's strategy.
    fs::create_directories(work / "src_pipeline_strategys");
    for (index_t r = 0; r < 8; ++r)
      write_strategy(work / "src_pipeline_strategys" / numbered("src_strategy_", r, ".ckpt"), net, train,
                     static_cast<std::uint32_t>(r / 4));
    save_distributed(work / "src_checkpoints_pipeline", "checkpoint_", net, train);
    write_strategy(work / "dst_strategy.ckpt", net, retrain);
    std::printf("wrote src_checkpoints_pipeline/rank_<r>/checkpoint_<r>.ckpt (8 ranks, 2 stages),\n"
                "  src_pipeline_strategys/src_strategy_<r>.ckpt (8 files, one per rank) and dst_strategy.ckpt\n\n");

    // 2. Merge the stages' strategies: one file, every layout renamed "<stage>-<name>".
    io::merge_pipeline_strategies(work / "src_pipeline_strategys", work / "src_strategy.ckpt");
    const io::strategy_file merged = io::read_strategy(work / "src_strategy.ckpt");
    int bad = 0;
    std::printf("merge_pipeline_strategies -> src_strategy.ckpt:");
    for (const auto& [name, l] : merged.layouts) std::printf(" %s", name.c_str());
    std::printf("\n");
    for (const auto& e : train.layouts) {
      const std::string want = numbered("", e.stage, "-").append(e.name);
      if (std::none_of(merged.layouts.begin(), merged.layouts.end(), [&](const auto& m) { return m.first == want; })) {
        std::printf("  MISMATCH: the merged strategy lacks '%s'\n", want.c_str());
        ++bad;
      }
    }
    if (merged.layouts.size() != train.layouts.size()) {
      std::printf("  MISMATCH: the merged strategy has %zu layouts, expected %zu\n", merged.layouts.size(),
                  train.layouts.size());
      ++bad;
    }

    // 3. Convert to the 4 ranks of the retraining network.
    for (index_t t = 0; t < 4; ++t)
      std::printf("target rank %lld reads source ranks %s\n", static_cast<long long>(t),
                  list(io::rank_list_for_transform(t, work / "src_strategy.ckpt", work / "dst_strategy.ckpt")).c_str());
    const io::transform_summary sum =
        io::transform_checkpoints(work / "src_checkpoints_pipeline", work / "dst_checkpoints", "checkpoint_",
                                  work / "src_strategy.ckpt", work / "dst_strategy.ckpt");
    std::printf("\ntransform_checkpoints: %zu files, %zu sliced tensors, %zu copied parameters\n", sum.files, sum.sliced,
                sum.copied);

    // 4. Every target rank holds every parameter of both stages, sliced by the retraining strategy.
    bad += check_distributed(work / "dst_checkpoints", "checkpoint_", net, retrain);
    return verdict(bad, "2-stage pipeline on 8 ranks -> 4 ranks without pipeline, every value");
  });
}
