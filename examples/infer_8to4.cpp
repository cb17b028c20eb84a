// examples/infer_8to4.cpp: trained on 8 ranks, inference on 4 (MindSpore's elastic training and
// inference tutorial, scenario 3: M ranks train, N ranks infer).
//
// Training, 8 ranks: data parallel 2 x model parallel 4, with the parallel optimizer
// (enable_parallel_optimizer): each weight's model-parallel slice is split again between the two
// data-parallel replicas. The job saves the network's parameters only (no optimizer states:
// CheckpointConfig(saved_network=net)), one file per rank, and src_strategy.ckpt.
// Inference, 4 ranks: model parallel 4, no optimizer; model.infer_predict_layout saves the
// strategy, here as JSON (dst_strategy.json, which also carries the full shapes).
//
//   parameter       shape      training (8 ranks)                  inference (4 ranks)
//   layer1.weight   [784,512]  dev[2,1,4] map[1,0] opt(4,2)        dev[1,1,4] map[1,0]   columns
//   layer1.bias     [512]      dev[2,1,4] map[0]   opt(4,2)        dev[1,1,4] map[0]
//   layer2.weight   [512,512]  dev[2,4,1] map[1,0] opt(4,2)        dev[1,4,1] map[1,0]   rows
//   layer2.bias     [512]      dev[2,4,1] map[0]   (replicated)    dev[1,4,1] map[0]     (replicated)
//   layer3.weight   [512,10]   dev[2,4,1] map[1,0] opt(4,2)        dev[1,4,1] map[1,0]   rows
//   layer3.bias     [10]       dev[2,4,1] map[0]   (replicated)    dev[1,4,1] map[0]     (replicated)
//
// As the tutorial's model_transformation_infer.py does, every inference rank converts its own
// file: rank_list_for_transform says which training files it needs, and
// transform_checkpoint_by_rank is given exactly those. Each inference rank t holds the model
// slice t; in training that slice is split between ranks t and t + 4, so the list is {t, t + 4}.
//
// Usage: example_infer_8to4 [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "infer_8to4", [](const fs::path& work) {
    const network net = mlp();
    const strategy train = mlp_training();  // 8 ranks, optimizer sharding (see scenario.hpp)
    const strategy infer{
        {matmul("Default/network/layer1/MatMul-op0", {1, 1}, {1, 4}),
         matmul("Default/network/layer2/MatMul-op1", {1, 4}, {4, 1}),
         matmul("Default/network/layer3/MatMul-op2", {1, 4}, {4, 1})},
        {{"layer1.weight", stored({1, 1, 4}, {1, 0})},
         {"layer1.bias", stored({1, 1, 4}, {0})},
         {"layer2.weight", stored({1, 4, 1}, {1, 0})},
         {"layer2.bias", stored({1, 4, 1}, {0})},
         {"layer3.weight", stored({1, 4, 1}, {1, 0})},
         {"layer3.bias", stored({1, 4, 1}, {0})}}};

    // 1. What the training job saved, and what compiling the inference network saved.
    const fs::path src_strategy = work / "src_strategy.ckpt", dst_strategy = work / "dst_strategy.json";
    write_strategy(src_strategy, net, train);
    write_strategy(dst_strategy, net, infer);
    save_distributed(work / "src_checkpoints", "checkpoint_", net, train, /*extras=*/false);
    std::printf("wrote src_checkpoints/rank_<r>/checkpoint_<r>.ckpt (8 ranks), src_strategy.ckpt, dst_strategy.json\n\n");

    // 2. Each inference rank: its rank list, then its own file from exactly those source files.
    int bad = 0;
    for (index_t t = 0; t < 4; ++t) {
      const std::vector<std::int64_t> ranks = io::rank_list_for_transform(t, src_strategy, dst_strategy);
      std::map<std::int64_t, fs::path> files;
      for (auto r : ranks) files.emplace(r, rank_file(work / "src_checkpoints", "checkpoint_", r));
      const fs::path out = rank_file(work / "dst_checkpoints", "checkpoint_", t);
      io::transform_checkpoint_by_rank(t, files, out, src_strategy, dst_strategy);
      std::printf("inference rank %lld: rank_list_for_transform = %s\n", static_cast<long long>(t), list(ranks).c_str());
      if (ranks != std::vector<std::int64_t>{t, t + 4}) {
        std::printf("  MISMATCH: expected {%lld, %lld}\n", static_cast<long long>(t), static_cast<long long>(t + 4));
        ++bad;
      }
    }

    // 3. Every inference file holds exactly the network's parameters, sliced by the inference
    //    strategy, equal to the full tensors there.
    std::printf("\ndst_checkpoints:\n");
    bad += check_distributed(work / "dst_checkpoints", "checkpoint_", net, infer, /*extras=*/false);
    return verdict(bad, "8 training ranks -> 4 inference ranks, each from the files its rank list names");
  });
}
