// examples/transform_8to4.cpp: the MindSpore tutorial's checkpoint transformation, on files.
//
// A network trained on 8 ranks is fine-tuned on 4 ranks with another strategy and optimizer
// sharding (see examples/plan_8to4.cpp for how the MatMul strategies become these layouts). This
// program writes what the training job would have saved: 8 per-rank checkpoints
// (rank_<r>/net.ckpt) and the two strategy files (protobuf, as MindSpore saves them). It then
// calls reshard::io::transform_checkpoints, reads the 4 checkpoints it wrote and checks every
// value against the full tensors.
//
//   layer1.weight          [784,512] float32  train dev[2,1,2,2] map[2,1]   tune dev[2,2,1] map[1,0] + optimizer sharding
//   moments.layer1.weight  [784,512] float32  (the optimizer's state: same layouts)
//   layer1.bias            [512]     float16  train dev[2,1,2,2] map[0]     tune replicated
//   learning_rate, global_step: in no strategy, copied unchanged from source rank t % 8
//
// Usage: example_transform_8to4 [WORK_DIR]   (default: a fresh temporary directory, removed at
// the end; with WORK_DIR the files are kept there, e.g. for `reshard inspect`)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "scenario.hpp"  // stored(), rank_file(), numbered(); the data here is its own (float16 bias)

namespace {

namespace fs = std::filesystem;
namespace io = reshard::io;
using reshard::box;
using reshard::index_list;
using reshard::index_t;
using scenario::numbered;
using scenario::rank_file;
using scenario::stored;

// The value of element (i, j) of each full tensor: exact in its dtype, different per tensor.
float weight_value(index_t i, index_t j) { return static_cast<float>(i * 512 + j); }
float moment_value(index_t i, index_t j) { return -static_cast<float>(i * 512 + j) - 0.5f; }
std::uint16_t bias_bits(index_t j) {  // float16 bits of j / 4 for j < 512: build them exactly
  const double v = static_cast<double>(j) / 4.0;
  if (v == 0) return 0;
  int e = 0;
  double m = v;
  while (m >= 2) m /= 2, ++e;
  while (m < 1) m *= 2, --e;
  return static_cast<std::uint16_t>((e + 15) << 10 | static_cast<int>((m - 1) * 1024));
}

struct param {
  std::string name;
  io::dtype type;
  index_list shape;
  io::param_layout train, tune;
};

// The content of box `b` of a tensor, row-major, from its element function.
std::vector<std::byte> content(const param& p, const box& b) {
  std::vector<std::byte> out;
  const index_t rows = p.shape.size() == 2 ? b.extent[0] : 1;
  const index_t cols = b.extent[b.extent.size() - 1];
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) {
      const index_t i = p.shape.size() == 2 ? b.offset[0] + r : 0, j = b.offset[b.offset.size() - 1] + c;
      if (p.type == io::dtype::float16) {
        const std::uint16_t v = bias_bits(j);
        const auto* q = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), q, q + 2);
      } else {
        const float v = p.name == "layer1.weight" ? weight_value(i, j) : moment_value(i, j);
        const auto* q = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), q, q + 4);
      }
    }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool keep = argc > 1;
  const fs::path work = keep ? fs::path(argv[1])
                             : fs::temp_directory_path() / ("reshard_transform_8to4_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);

  const std::vector<param> params{
      {"layer1.weight", io::dtype::float32, {784, 512}, stored({2, 1, 2, 2}, {2, 1}), stored({2, 2, 1}, {1, 0}, 2, 2)},
      {"moments.layer1.weight", io::dtype::float32, {784, 512}, stored({2, 1, 2, 2}, {2, 1}),
       stored({2, 2, 1}, {1, 0}, 2, 2)},
      {"layer1.bias", io::dtype::float16, {512}, stored({2, 1, 2, 2}, {0}), stored({2, 2, 1}, {-1})},
  };

  // 1. What the training job saved: two strategy files and 8 checkpoints.
  io::strategy_file train, tune;
  train.nodes.push_back({"Default/network/layer1/MatMul-op0", {0, {{2, 1}, {1, 2}}}});
  tune.nodes.push_back({"Default/network/layer1/MatMul-op0", {0, {{2, 2}, {2, 1}}}});
  for (const auto& p : params) {
    train.layouts.emplace_back(p.name, p.train);
    tune.layouts.emplace_back(p.name, p.tune);
  }
  io::write_strategy(work / "train_strategy.ckpt", train);
  io::write_strategy(work / "tune_strategy.ckpt", tune);

  for (index_t r = 0; r < 8; ++r) {
    fs::create_directories(work / "train" / numbered("rank_", r));
    io::ckpt_writer w(work / "train" / numbered("rank_", r) / "net.ckpt", {.crc = true});
    for (const auto& p : params) {
      const auto l = io::to_layout(p.train, p.shape, 0, p.name);
      const box b = reshard::box_of(l, r);
      const auto bytes = content(p, b);
      w.write(p.name, p.type, b.extent.to_vector(), bytes);
    }
    const float lr = 0.01f;
    const std::int32_t step = 1000;
    w.write("learning_rate", io::dtype::float32, {}, std::as_bytes(std::span(&lr, 1)));
    const std::vector<std::int64_t> one{1};
    w.write("global_step", io::dtype::int32, one, std::as_bytes(std::span(&step, 1)));
    w.commit();
  }
  std::printf("wrote %s: 8 per-rank checkpoints (rank_<r>/net.ckpt) and the strategies\n"
              "  train_strategy.ckpt (8 ranks) and tune_strategy.ckpt (4 ranks, optimizer sharding)\n\n",
              (work / "train").string().c_str());

  // 2. Which source ranks each target rank needs (the minimal lists), then the transform.
  for (index_t t = 0; t < 4; ++t) {
    const auto ranks = io::rank_list_for_transform(t, work / "train_strategy.ckpt", work / "tune_strategy.ckpt");
    std::string s;
    for (auto r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
    std::printf("target rank %lld reads source ranks {%s}\n", static_cast<long long>(t), s.c_str());
  }
  const io::transform_summary sum = io::transform_checkpoints(
      work / "train", work / "tune", "checkpoint_", work / "train_strategy.ckpt", work / "tune_strategy.ckpt");
  std::printf("\ntransform_checkpoints: %zu files, %zu sliced tensors, %zu copied parameters, %llu bytes read, "
              "%llu written\n\n",
              sum.files, sum.sliced, sum.copied, static_cast<unsigned long long>(sum.bytes_read),
              static_cast<unsigned long long>(sum.bytes_written));

  // 3. Check every target file against the full tensors.
  int bad = 0;
  for (index_t t = 0; t < 4; ++t) {
    const fs::path f = rank_file(work / "tune", "checkpoint_", t);
    io::ckpt_file ck(f);
    std::printf("%s:\n", f.lexically_relative(work).string().c_str());
    for (const auto& p : params) {
      const auto l = io::to_layout(p.tune, p.shape, 0, p.name);
      const box b = reshard::box_of(l, t);
      const auto& e = ck.at(p.name);
      const auto got = io::gather(e);
      const bool ok = e.type == p.type && e.dims == b.extent.to_vector() && got == content(p, b);
      std::printf("  %-22s %-8s dims %-10s = full%s  %s\n", p.name.c_str(), std::string(io::ms_name(e.type)).c_str(),
                  reshard::to_string(index_list(e.dims.begin(), e.dims.end())).c_str(), reshard::to_string(b).c_str(),
                  ok ? "ok" : "MISMATCH");
      bad += !ok;
    }
    const auto& lr = ck.at("learning_rate");
    const auto& step = ck.at("global_step");
    float lrv = 0;
    std::int32_t stepv = 0;
    std::memcpy(&lrv, io::gather(lr).data(), 4);
    std::memcpy(&stepv, io::gather(step).data(), 4);
    const bool ok = lrv == 0.01f && stepv == 1000 && ck.entries().size() == params.size() + 2;
    std::printf("  learning_rate %g, global_step %d (copied from source rank %lld)  %s\n", static_cast<double>(lrv),
                stepv, static_cast<long long>(t % 8), ok ? "ok" : "MISMATCH");
    bad += !ok;
  }
  if (!keep) fs::remove_all(work);
  if (bad) {
    std::printf("\n%d mismatches\n", bad);
    return 1;
  }
  std::printf("\nevery value of the 4 target checkpoints equals the full tensors sliced by the target strategy\n");
  return 0;
}
