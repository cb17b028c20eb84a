// examples/scenario.hpp: what the checkpoint examples share. Each of those examples plays one
// MindSpore scenario end to end: it writes what the training job would have saved (per-rank
// checkpoints and strategy files, with reshard's own writers), runs the workflow, then reads every
// file written and checks every value against the full tensors.
//
// The data: element e (the row-major index in the full tensor) of the k-th parameter of the
// network holds k * 2^20 + e, exact in float32 and int32 for tensors under 2^20 elements. Every
// value says where it belongs, so a wrong offset, a transposed block, a duplicated or a missing
// row shows up as a wrong value.
#pragma once

#include <reshard/io/transform.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

namespace scenario {

namespace fs = std::filesystem;
namespace io = reshard::io;
using reshard::box;
using reshard::index_list;
using reshard::index_t;

/// `prefix` `n` `suffix`: "rank_3", "checkpoint_3.ckpt".
inline std::string numbered(std::string_view prefix, index_t n, std::string_view suffix = "") {
  std::string s(prefix);
  s.append(std::to_string(n));
  s.append(suffix);
  return s;
}

/// `dir`/rank_<r>/<prefix><r>.ckpt: MindSpore's layout of a distributed checkpoint.
inline fs::path rank_file(const fs::path& dir, std::string_view prefix, index_t r, std::string_view ext = ".ckpt") {
  return dir / numbered("rank_", r) / numbered(prefix, r, ext);
}

// ---------------------------------------------------------------------------------------------
// the network and its strategies

/// A parameter of the network: its full tensor.
struct param {
  std::string name;
  io::dtype type;  ///< float32 or int32
  index_list shape;
};
using network = std::vector<param>;

/// A parameter's layout as a strategy file stores it, and the pipeline stage that holds it.
struct entry {
  std::string name;
  io::param_layout stored;
  std::uint32_t stage = 0;
};

/// What a strategy file holds: operator strategies (what the user wrote with shard(); the
/// transformation reads only their stage, in merge_pipeline_strategies) and parameter layouts.
struct strategy {
  std::vector<std::pair<std::string, io::node_strategy>> nodes;
  std::vector<entry> layouts;
};

/// A stored layout: device matrix, tensor map (one device axis per tensor dim, counted from the
/// right of the device matrix; -1 = not split) and optimizer sharding (step, size; 0 = none).
inline io::param_layout stored(std::vector<std::int64_t> dev, std::vector<std::int64_t> map, std::int32_t opt_step = 0,
                               std::int32_t opt_size = 0) {
  io::param_layout l;
  l.dev_matrix = std::move(dev);
  for (auto a : map) l.tensor_map.push_back({a});
  l.opt_weight_shard_step = opt_step;
  l.opt_weight_shard_size = opt_size;
  return l;
}

/// A MatMul node strategy ((a, b), (b, c)) of pipeline stage `stage`.
inline std::pair<std::string, io::node_strategy> matmul(std::string node, std::vector<std::uint32_t> x,
                                                        std::vector<std::uint32_t> w, std::uint32_t stage = 0) {
  return {std::move(node), io::node_strategy{stage, {std::move(x), std::move(w)}}};
}

// The three-layer perceptron of the seed documents (784 -> 512 -> 512 -> 10, float32).
inline network mlp() {
  return {
      {"layer1.weight", io::dtype::float32, {784, 512}}, {"layer1.bias", io::dtype::float32, {512}},
      {"layer2.weight", io::dtype::float32, {512, 512}}, {"layer2.bias", io::dtype::float32, {512}},
      {"layer3.weight", io::dtype::float32, {512, 10}},  {"layer3.bias", io::dtype::float32, {10}},
  };
}

// How 8 training ranks store mlp(). MatMul (i,j) x (j,k) with strategy ((a,b),(b,c)): device matrix
// [a,b,c]; the weight [j,k] has the map [1,0]. The data-parallel axis a splits no weight: the
// parallel optimizer splits dim 0 of each weight's slice between the 2 ranks 4 apart (step 4,
// size 2).
inline strategy mlp_training() {
  return {{matmul("Default/network/layer1/MatMul-op0", {2, 1}, {1, 4}),
           matmul("Default/network/layer2/MatMul-op1", {2, 4}, {4, 1}),
           matmul("Default/network/layer3/MatMul-op2", {2, 4}, {4, 1})},
          {{"layer1.weight", stored({2, 1, 4}, {1, 0}, 4, 2)},
           {"layer1.bias", stored({2, 1, 4}, {0}, 4, 2)},
           {"layer2.weight", stored({2, 4, 1}, {1, 0}, 4, 2)},
           {"layer2.bias", stored({2, 4, 1}, {0})},
           {"layer3.weight", stored({2, 4, 1}, {1, 0}, 4, 2)},
           {"layer3.bias", stored({2, 4, 1}, {0})}}};
}

inline std::size_t index_of(const network& net, std::string_view name) {
  for (std::size_t k = 0; k < net.size(); ++k)
    if (net[k].name == name) return k;
  reshard::report_error("scenario: no parameter '" + std::string(name) + "' in the network");
}

/// The layout of `e` in reshard's terms (global ranks; the full shape from the network).
inline reshard::layout layout_of(const network& net, const entry& e) {
  return io::to_layout(e.stored, net[index_of(net, e.name)].shape, e.stage, e.name);
}

/// The number of ranks of `s`: devices of one stage times the stages.
inline index_t ranks_of(const strategy& s) {
  index_t n = 1, stages = 1;
  for (auto d : s.layouts.front().stored.dev_matrix) n *= d;
  for (const auto& e : s.layouts) stages = std::max<index_t>(stages, e.stage + 1);
  return n * stages;
}

/// The strategy file that the ranks of pipeline stage `stage` save (everything when there is no
/// pipeline). JSON files also carry each parameter's full shape.
inline io::strategy_file file_of(const network& net, const strategy& s, std::uint32_t stage = 0, bool json = false) {
  io::strategy_file f;
  for (const auto& n : s.nodes)
    if (n.second.stage == stage) f.nodes.push_back(n);
  for (auto e : s.layouts)
    if (e.stage == stage) {
      if (json) {
        const auto& shape = net[index_of(net, e.name)].shape;
        e.stored.tensor_shape.assign(shape.begin(), shape.end());
      }
      f.layouts.emplace_back(e.name, e.stored);
    }
  return f;
}

inline void write_strategy(const fs::path& file, const network& net, const strategy& s, std::uint32_t stage = 0) {
  io::write_strategy(file, file_of(net, s, stage, io::is_json_strategy(file)));
}

// ---------------------------------------------------------------------------------------------
// the data

/// The value of element `e` of the k-th parameter's full tensor.
constexpr std::int64_t value_of(std::size_t k, index_t e) { return static_cast<std::int64_t>(k << 20) + e; }

/// The bytes of box `b` of the k-th parameter's full tensor, row-major.
inline std::vector<std::byte> content(const network& net, std::size_t k, const box& b) {
  const param& p = net[k];
  const std::size_t rank = p.shape.size(), elem = io::element_size(p.type);
  std::vector<std::byte> out(static_cast<std::size_t>(reshard::volume(b)) * elem);
  std::vector<index_t> at(rank, 0);  // position inside the box, last dim fastest
  for (std::size_t i = 0; i < out.size(); i += elem) {
    index_t e = 0;  // row-major index in the full tensor
    for (std::size_t d = 0; d < rank; ++d) e = e * p.shape[d] + b.offset[d] + at[d];
    if (p.type == io::dtype::float32) {
      const auto v = static_cast<float>(value_of(k, e));
      std::memcpy(out.data() + i, &v, 4);
    } else {
      const auto v = static_cast<std::int32_t>(value_of(k, e));
      std::memcpy(out.data() + i, &v, 4);
    }
    for (std::size_t d = rank; d-- > 0;) {
      if (++at[d] < b.extent[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

inline box whole(const index_list& shape) { return box{index_list(shape.size(), 0), shape}; }

/// learning_rate and global_step: in no strategy, the same on every rank.
constexpr float learning_rate = 0.01f;
constexpr std::int32_t global_step = 1875;

inline void write_extras(io::ckpt_writer& w) {
  w.write("learning_rate", io::dtype::float32, {}, std::as_bytes(std::span(&learning_rate, 1)));
  const std::vector<std::int64_t> one{1};
  w.write("global_step", io::dtype::int32, one, std::as_bytes(std::span(&global_step, 1)));
}

/// What the ranks of a job with strategy `s` save (MindSpore's integrated_save=False):
/// `dir`/rank_<r>/<prefix><r>.ckpt holds rank r's slice of every parameter of its pipeline
/// stage, then (with `extras`) learning_rate and global_step.
inline void save_distributed(const fs::path& dir, std::string_view prefix, const network& net, const strategy& s,
                             bool extras = true) {
  for (index_t r = 0; r < ranks_of(s); ++r) {
    fs::create_directories(dir / numbered("rank_", r));
    io::ckpt_writer w(rank_file(dir, prefix, r));
    for (const auto& e : s.layouts) {
      const reshard::layout l = layout_of(net, e);
      if (r < l.first_rank || r >= l.first_rank + reshard::num_ranks(l)) continue;  // another stage
      const box b = reshard::box_of(l, r);
      w.write(e.name, net[index_of(net, e.name)].type, b.extent.to_vector(), content(net, index_of(net, e.name), b));
    }
    if (extras) write_extras(w);
    w.commit();
  }
}

// ---------------------------------------------------------------------------------------------
// the checks

/// Checks the checkpoint (.ckpt or .safetensors) `file` written for rank `rank` of strategy `s`
/// (null: a file of full tensors). It must hold exactly the parameters the rank gets: the slice
/// of each parameter `s` lists on the rank's stage, the whole of each one `s` does not list
/// (and, with `extras`, learning_rate and global_step), each with its slice's dims and, element
/// for element, the full tensor's values there. Prints one line; returns the mismatches.
inline int check_file(const fs::path& file, const network& net, const strategy* s, index_t rank, bool extras = true) {
  int bad = 0;
  auto fail = [&](const std::string& what) {
    if (bad++ < 5) std::printf("  MISMATCH %s: %s\n", file.string().c_str(), what.c_str());
  };
  io::checkpoint_reader ck(file);
  std::size_t expected = 0;
  for (std::size_t k = 0; k < net.size(); ++k) {
    const param& p = net[k];
    box b = whole(p.shape);
    bool listed = false, here = false;
    if (s)
      for (const auto& e : s->layouts) {
        if (e.name != p.name) continue;
        listed = true;
        const reshard::layout l = layout_of(net, e);
        if (rank >= l.first_rank && rank < l.first_rank + reshard::num_ranks(l)) here = true, b = reshard::box_of(l, rank);
      }
    const io::tensor_ref* t = ck.find(p.name);
    if (listed && !here) {  // a parameter of another pipeline stage
      if (t) fail("'" + p.name + "' belongs to another pipeline stage");
      continue;
    }
    ++expected;
    if (!t) {
      fail("'" + p.name + "' is missing");
      continue;
    }
    if (t->type != p.type || t->dims != b.extent.to_vector()) {
      fail("'" + p.name + "' is " + std::string(io::ms_name(t->type)) + " " +
           reshard::to_string(index_list(t->dims.begin(), t->dims.end())) + ", expected " +
           std::string(io::ms_name(p.type)) + " " + reshard::to_string(b.extent) + " (the box " + reshard::to_string(b) +
           ")");
      continue;
    }
    std::vector<std::byte> got;
    for (auto piece : t->pieces) got.insert(got.end(), piece.begin(), piece.end());
    if (got != content(net, k, b)) fail("'" + p.name + "' differs from the full tensor's box " + reshard::to_string(b));
  }
  if (extras) {
    expected += 2;
    const io::tensor_ref* lr = ck.find("learning_rate");
    const io::tensor_ref* step = ck.find("global_step");
    float lrv = 0;
    std::int32_t stepv = 0;
    if (lr && lr->content_size() == 4) std::memcpy(&lrv, lr->pieces.front().data(), 4);
    if (step && step->content_size() == 4) std::memcpy(&stepv, step->pieces.front().data(), 4);
    if (lrv != learning_rate || stepv != global_step) fail("learning_rate or global_step is missing or differs");
  }
  if (ck.entries().size() != expected)
    fail("holds " + std::to_string(ck.entries().size()) + " parameters, expected " + std::to_string(expected));
  std::printf("  %-40s %zu parameters  %s\n", file.filename().string().c_str(), ck.entries().size(),
              bad ? "MISMATCH" : "ok");
  return bad;
}

/// check_file for every rank of `s`: `dir`/rank_<t>/<prefix><t><ext>.
inline int check_distributed(const fs::path& dir, std::string_view prefix, const network& net, const strategy& s,
                             bool extras = true, std::string_view ext = ".ckpt") {
  int bad = 0;
  for (index_t t = 0; t < ranks_of(s); ++t) bad += check_file(rank_file(dir, prefix, t, ext), net, &s, t, extras);
  return bad;
}

/// True if files `a` and `b` hold the same bytes.
inline bool same_bytes(const fs::path& a, const fs::path& b) {
  const io::mapped_file fa(a, "scenario"), fb(b, "scenario");
  const auto x = fa.bytes(), y = fb.bytes();
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

/// "{0, 4}"
inline std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s.append(", ");
    s.append(std::to_string(v[i]));
  }
  s.append("}");
  return s;
}

/// Prints `bad` mismatches, or "verified: `what`"; the exit code.
inline int verdict(int bad, std::string_view what) {
  if (bad) {
    std::printf("\nFAILED: %d mismatches\n", bad);
    return 1;
  }
  std::printf("\nverified: %.*s\n", static_cast<int>(what.size()), what.data());
  return 0;
}

/// Runs `body` in a work directory: argv[1] if given (kept afterwards), else a fresh temporary
/// one, removed at the end. An exception (a reshard::error names the file, the parameter and the
/// reason) is printed and exits 1.
inline int run(int argc, char** argv, std::string_view name, const std::function<int(const fs::path&)>& body) {
  const bool keep = argc > 1;
  std::string tmp("reshard_");
  tmp.append(name).append("_").append(std::to_string(::getpid()));
  const fs::path work = keep ? fs::path(argv[1]) : fs::temp_directory_path() / tmp;
  int rc = 1;
  try {
    fs::remove_all(work);
    fs::create_directories(work);
    rc = body(work);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(name.size()), name.data(), e.what());
    rc = 1;
  }
  std::error_code ec;
  if (!keep) fs::remove_all(work, ec);
  return rc;
}

}  // namespace scenario
