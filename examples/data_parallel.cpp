// examples/data_parallel.cpp: saving and loading in data-parallel mode (MindSpore's distributed
// save/load tutorial, "data parallel"). Every rank holds every parameter whole, so each of the 8
// ranks saves the same full network. Loading on another number of ranks must give every rank the
// tensors once: not the 8 copies stacked, not one copy read 8 times.
//
// Two ways to describe the saved checkpoint:
//   a. no strategy file (DATA_PARALLEL saves none; MindSpore's None): the source is one rank,
//      rank_0, the file every rank would load. Loaded by a 4-rank auto-parallel network.
//   b. a strategy that says so: every layout dev[8], every dim unsplit (what a semi-auto job
//      whose operators are all data parallel saves). Loaded by 2 data-parallel ranks, each
//      reading only its own file, and merged into one file of full tensors.
//
// Usage: example_data_parallel [WORK_DIR]   (default: a temporary directory, removed at the end)
#include "scenario.hpp"

using namespace scenario;

int main(int argc, char** argv) {
  return run(argc, argv, "data_parallel", [](const fs::path& work) {
    const network net = mlp();  // 784 -> 512 -> 512 -> 10
    // Every parameter unsplit on n devices: data parallel.
    auto replicated = [&](std::int64_t n) {
      strategy s;
      for (const auto& p : net) s.layouts.push_back({p.name, stored({n}, std::vector<std::int64_t>(p.shape.size(), -1))});
      return s;
    };
    const strategy dp8 = replicated(8), dp2 = replicated(2);
    // The auto-parallel network that loads it on 4 ranks (with the parallel optimizer).
    const strategy auto4{{},
                         {{"layer1.weight", stored({1, 4, 1}, {1, 0})},
                          {"layer1.bias", stored({1, 4, 1}, {0}, 1, 4)},
                          {"layer2.weight", stored({4, 1, 1}, {1, 0}, 1, 4)},
                          {"layer2.bias", stored({4, 1, 1}, {0}, 1, 4)},
                          {"layer3.weight", stored({2, 2, 1}, {1, 0}, 2, 2)},
                          {"layer3.bias", stored({2, 2, 1}, {0})}}};
    std::uint64_t network_bytes = 0;  // the tensor bytes of the whole network
    for (const auto& p : net) network_bytes += static_cast<std::uint64_t>(reshard::volume(p.shape)) * 4;
    const std::uint64_t extras_bytes = 8;  // learning_rate and global_step

    // 1. The data-parallel job: each of the 8 ranks saves the whole network.
    save_distributed(work / "dp_checkpoints", "checkpoint_", net, dp8);
    write_strategy(work / "dp8_strategy.ckpt", net, dp8);
    write_strategy(work / "dp2_strategy.ckpt", net, dp2);
    write_strategy(work / "auto4_strategy.ckpt", net, auto4);
    std::printf("wrote dp_checkpoints/rank_<r>/checkpoint_<r>.ckpt: 8 ranks, each the whole network (%llu bytes)\n",
                static_cast<unsigned long long>(network_bytes));
    int bad = 0;
    auto expect = [&](bool ok, const char* what) {
      if (!ok) std::printf("  MISMATCH: %s\n", what);
      bad += !ok;
    };

    // a. No source strategy: rank_0 is the whole network; 4 auto-parallel ranks slice it.
    std::printf("\na. no source strategy -> 4 auto-parallel ranks\n");
    const io::transform_summary a = io::transform_checkpoints(work / "dp_checkpoints", work / "auto4_checkpoints",
                                                              "checkpoint_", {}, work / "auto4_strategy.ckpt");
    for (const auto& w : a.warnings) std::printf("  warning: %s\n", w.c_str());
    bad += check_distributed(work / "auto4_checkpoints", "checkpoint_", net, auto4);
    expect(a.source_files == 1, "the transform should read rank_0 only");
    expect(a.warnings.size() == 1, "the transform should warn that rank_1 .. rank_7 are not read");

    // b. The replicated strategy: 2 data-parallel ranks, each from its own file only.
    std::printf("\nb. dev[8] replicated -> 2 data-parallel ranks\n");
    for (index_t t = 0; t < 2; ++t) {
      const auto ranks = io::rank_list_for_transform(t, work / "dp8_strategy.ckpt", work / "dp2_strategy.ckpt");
      std::printf("  target rank %lld reads source ranks %s\n", static_cast<long long>(t), list(ranks).c_str());
      expect(ranks == std::vector<std::int64_t>{t}, "a data-parallel rank needs its own file only");
    }
    const io::transform_summary b = io::transform_checkpoints(work / "dp_checkpoints", work / "dp2_checkpoints",
                                                              "checkpoint_", work / "dp8_strategy.ckpt",
                                                              work / "dp2_strategy.ckpt");
    std::printf("  transform_checkpoints: %zu source files, %llu tensor bytes read\n", b.source_files,
                static_cast<unsigned long long>(b.bytes_read));
    bad += check_distributed(work / "dp2_checkpoints", "checkpoint_", net, dp2);
    expect(b.source_files == 2, "2 target ranks should read 2 source files");
    expect(b.bytes_read == 2 * (network_bytes + extras_bytes), "each target should read the network once");
    for (index_t t = 0; t < 2; ++t)
      expect(same_bytes(rank_file(work / "dp2_checkpoints", "checkpoint_", t),
                        rank_file(work / "dp_checkpoints", "checkpoint_", t)),
             "a data-parallel target file should be its source file, byte for byte");

    // ... and merged into one file of full tensors: the same bytes as any one rank's file.
    const io::transform_summary m =
        io::merge_checkpoints(work / "dp_checkpoints", work / "merged.ckpt", work / "dp8_strategy.ckpt");
    std::printf("  merge_checkpoints: %zu source file(s), %llu tensor bytes read\n", m.source_files,
                static_cast<unsigned long long>(m.bytes_read));
    bad += check_file(work / "merged.ckpt", net, nullptr, 0);
    expect(m.bytes_read == network_bytes + extras_bytes, "the merge should read the network once");
    expect(same_bytes(work / "merged.ckpt", rank_file(work / "dp_checkpoints", "checkpoint_", 0)),
           "the merged file should be rank 0's file, byte for byte");
    return verdict(bad, "a data-parallel checkpoint loads on 4 auto-parallel and on 2 data-parallel ranks, once each");
  });
}
