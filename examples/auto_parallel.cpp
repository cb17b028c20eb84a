// examples/auto_parallel.cpp: saving and loading in (semi-)auto-parallel mode (MindSpore's
// distributed save/load tutorial, "auto parallel"). Each rank holds slices of the parameters, as
// the strategy says, and saves them in its own directory; the strategy file says how to put them
// together. Two ways to load:
//   a. the same network on the same 8 ranks resumes training: each rank loads its own file.
//      transform_checkpoints with the same strategy on both sides reads only that file and
//      writes it back byte for byte;
//   b. integrated save (CheckpointConfig(integrated_save=True)): one checkpoint of full tensors,
//      which any network loads, e.g. on one device for inference: merge_checkpoints.
//
//   parameter       shape      strategy (8 ranks)                       MatMul strategy
//   layer1.weight   [784,512]  dev[2,1,2,2] map[2,1]  (last axis repeats) ((2,1),(1,2))
//   layer1.bias     [512]      dev[2,1,2,2] map[1]
//   layer2.weight   [512,512]  dev[2,2,2]   map[1,0]                      ((2,2),(2,2))
//   layer2.bias     [512]      dev[2,2,2]   map[0]
//   layer3.weight   [512,10]   dev[8,1,1]   map[1,0]  (data parallel)     ((8,1),(1,1))
//   layer3.bias     [10]       dev[8,1,1]   map[0]
//   moments.layerN.weight: the optimizer's states, with their weight's layouts
//
// Usage: example_auto_parallel [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "auto_parallel", [](const fs::path& work) {
    network net = mlp();  // 784 -> 512 -> 512 -> 10
    strategy train{{matmul("Default/network/layer1/MatMul-op0", {2, 1}, {1, 2}),
                    matmul("Default/network/layer2/MatMul-op1", {2, 2}, {2, 2}),
                    matmul("Default/network/layer3/MatMul-op2", {8, 1}, {1, 1})},
                   {{"layer1.weight", stored({2, 1, 2, 2}, {2, 1})},
                    {"layer1.bias", stored({2, 1, 2, 2}, {1})},
                    {"layer2.weight", stored({2, 2, 2}, {1, 0})},
                    {"layer2.bias", stored({2, 2, 2}, {0})},
                    {"layer3.weight", stored({8, 1, 1}, {1, 0})},
                    {"layer3.bias", stored({8, 1, 1}, {0})}}};
    for (const char* w : {"layer1.weight", "layer2.weight", "layer3.weight"}) {
      std::string m("moments.");
      m.append(w);
      net.push_back({m, io::dtype::float32, net[index_of(net, w)].shape});
      train.layouts.push_back({m, train.layouts[index_of(net, w)].stored});
    }

    // 1. What the job saved: rank_<r>/checkpoint_<r>.ckpt with rank r's slices, and the strategy.
    save_distributed(work / "src_checkpoints", "checkpoint_", net, train);
    write_strategy(work / "strategy.ckpt", net, train);
    std::printf("wrote src_checkpoints/rank_<r>/checkpoint_<r>.ckpt (8 ranks) and strategy.ckpt\n");
    int bad = 0;
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) std::printf("  MISMATCH: %s\n", what.c_str());
      bad += !ok;
    };

    // a. Resume on the same ranks: each rank needs its own file only, and gets it back unchanged.
    std::printf("\na. the same strategy on the same 8 ranks\n");
    for (index_t t = 0; t < 8; ++t) {
      const auto ranks = io::rank_list_for_transform(t, work / "strategy.ckpt", work / "strategy.ckpt");
      expect(ranks == std::vector<std::int64_t>{t}, numbered("rank ", t, " should need its own file only, not ") + list(ranks));
    }
    io::transform_checkpoints(work / "src_checkpoints", work / "resumed", "checkpoint_", work / "strategy.ckpt",
                              work / "strategy.ckpt");
    bad += check_distributed(work / "resumed", "checkpoint_", net, train);
    for (index_t t = 0; t < 8; ++t)
      expect(same_bytes(rank_file(work / "resumed", "checkpoint_", t), rank_file(work / "src_checkpoints", "checkpoint_", t)),
             numbered("resumed rank ", t, " should be its saved file, byte for byte"));

    // b. Integrated: one file of full tensors.
    std::printf("\nb. integrated: one checkpoint of full tensors\n");
    const io::transform_summary m =
        io::merge_checkpoints(work / "src_checkpoints", work / "integrated.ckpt", work / "strategy.ckpt");
    std::printf("  merge_checkpoints read %zu of the 8 files (one replica of each slice)\n", m.source_files);
    bad += check_file(work / "integrated.ckpt", net, nullptr, 0);
    expect(m.source_files == 4, "layer1.weight has 4 distinct slices: 4 files are needed, and enough");
    return verdict(bad, "auto-parallel save, load on the same ranks and integrated, every value");
  });
}
