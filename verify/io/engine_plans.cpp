// verify/io/engine_plans.cpp: the checkpoint engine executes the core's plans (law E1), and its
// checkpoint plan is what the dry run reports and the run does (laws E2, E3).
//
// Random MindSpore strategies (tuple maps, optimizer sharding, uneven param_split_shape, pipeline
// stages on either side, any M and N) are written as real files whose every element says which
// source file it was read from: element g of a parameter in the file of source rank r holds
// (r << 32) | g, so replicas differ. After transform_checkpoints, each output tensor must equal,
// byte for byte, `convert` of the parameter's plan (transform_replica_policy: each replicated slice
// from the source rank nearest the target) applied to those shards: the
// engine read exactly the plan's transfers, from exactly the plan's senders, and put them where
// the plan says. transform_checkpoint_by_rank of one target, given only the files
// rank_list_for_transform names, must write the same file, and load_checkpoint_by_rank must fill
// memory with the same tensors.
#include <reshard/io/cast.hpp>
#include <reshard/io/execute.hpp>
#include <reshard/io/plan_executor.hpp>
#include <reshard/io/plan_file.hpp>
#include <reshard/io/plan_wire.hpp>
#include <reshard/io/transform.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io_test_util.hpp"
#include "reshard.hpp"

namespace fs = std::filesystem;
using namespace reshard::io;
using reshard::box;
using reshard::index_list;
using reshard::index_t;
using reshard::layout;

namespace {

// One side of a scenario: a device matrix per stage and the parameters' stored layouts.
struct side {
  std::vector<std::int64_t> dev;  // the same device matrix for every parameter
  index_t stages = 1;
  index_t stage_ranks() const {
    return std::accumulate(dev.begin(), dev.end(), index_t{1}, std::multiplies<>());
  }
};

struct param {
  std::string name;
  index_list shape;
  std::uint32_t src_stage = 0;
  param_layout src;
  std::optional<std::pair<std::uint32_t, param_layout>> dst;  // none: whole on every target
};

// Device axes (right-counted) of `dev` used by `map`.
std::vector<bool> used_axes(const std::vector<std::int64_t>& dev, const std::vector<std::vector<std::int64_t>>& map) {
  std::vector<bool> used(dev.size(), false);
  for (const auto& e : map)
    for (auto a : e)
      if (a >= 0) used[dev.size() - 1 - static_cast<std::size_t>(a)] = true;
  return used;
}

// A random stored layout of a `dims`-d tensor on `dev`: entries unsplit, one axis or a tuple of
// two; maybe optimizer sharding. Returns the layout and, per dim, the slice count it needs the
// shape to divide into (dim 0 times the optimizer parts).
std::pair<param_layout, std::vector<index_t>> gen_stored(const std::vector<std::int64_t>& dev, std::size_t dims) {
  param_layout l;
  l.dev_matrix = dev;
  std::vector<std::int64_t> free_axes(dev.size());
  std::iota(free_axes.begin(), free_axes.end(), 0);
  std::vector<index_t> need(dims, 1);
  for (std::size_t i = 0; i < dims; ++i) {
    const int kind = *rc::gen::inRange(0, 5);  // 0,1: unsplit; 2,3: one axis; 4: a tuple
    std::vector<std::int64_t> entry;
    const std::size_t take = kind >= 4 ? 2 : kind >= 2 ? 1 : 0;
    for (std::size_t k = 0; k < take && !free_axes.empty(); ++k) {
      const auto at = static_cast<std::size_t>(*rc::gen::inRange<std::size_t>(0, free_axes.size()));
      entry.push_back(free_axes[at]);
      free_axes.erase(free_axes.begin() + static_cast<std::ptrdiff_t>(at));
    }
    if (entry.empty()) entry.push_back(-1);
    for (auto a : entry)
      if (a >= 0) need[i] *= dev[dev.size() - 1 - static_cast<std::size_t>(a)];
    if (entry.size() > 1) l.tuple_form = true;
    l.tensor_map.push_back(entry);
  }
  // optimizer sharding over the repeat axes: none, the whole group, or a divisor of it
  const auto used = used_axes(dev, l.tensor_map);
  index_t group = 1;
  for (std::size_t a = 0; a < dev.size(); ++a)
    if (!used[a]) group *= dev[a];
  if (dims > 0 && group > 1 && *rc::gen::inRange(0, 3) == 0) {
    std::vector<index_t> divisors;
    for (index_t d = 2; d <= group; ++d)
      if (group % d == 0) divisors.push_back(d);
    const bool whole = *rc::gen::arbitrary<bool>();
    const index_t parts = whole ? group : *rc::gen::elementOf(divisors);
    l.opt_weight_shard_size = whole ? -1 : static_cast<std::int32_t>(parts);
    l.opt_weight_shard_step = 1;
    need[0] *= parts;
  }
  return {l, need};
}

struct scenario {
  side src, dst;
  std::vector<param> params;
  index_t M() const { return src.stages * src.stage_ranks(); }
  index_t N() const { return dst.stages * dst.stage_ranks(); }
};

std::vector<std::int64_t> gen_dev() {
  const auto axes = *rc::gen::inRange<std::size_t>(1, 4);
  std::vector<std::int64_t> dev;
  for (std::size_t a = 0; a < axes; ++a) dev.push_back(*rc::gen::inRange<std::int64_t>(1, 5));
  return dev;
}

scenario gen_scenario() {
  scenario s;
  s.src.dev = gen_dev();
  s.dst.dev = gen_dev();
  s.src.stages = *rc::gen::inRange<index_t>(1, 3);
  s.dst.stages = *rc::gen::inRange<index_t>(1, 3);
  const auto count = *rc::gen::inRange<std::size_t>(1, 4);
  for (std::size_t k = 0; k < count; ++k) {
    param p;
    p.name = "p" + std::to_string(k);
    const auto dims = *rc::gen::inRange<std::size_t>(1, 4);
    p.src_stage = static_cast<std::uint32_t>(*rc::gen::inRange<index_t>(0, s.src.stages));
    auto [sl, sneed] = gen_stored(s.src.dev, dims);
    p.src = sl;
    std::vector<index_t> need = sneed;
    if (k == 0 || *rc::gen::inRange(0, 5) != 0) {  // the target strategy lists at least one
      auto [dl, dneed] = gen_stored(s.dst.dev, dims);
      p.dst = {static_cast<std::uint32_t>(*rc::gen::inRange<index_t>(0, s.dst.stages)), dl};
      for (std::size_t i = 0; i < dims; ++i) need[i] = std::lcm(need[i], dneed[i]);
    }
    for (std::size_t i = 0; i < dims; ++i) p.shape.push_back(need[i] * *rc::gen::inRange<index_t>(1, 3));
    // uneven dim-0 slices in the source (MindSpore's param_split_shape), without optimizer
    // sharding: random positive lengths, one per slice of dim 0
    const index_t slices0 = sneed[0];
    if (p.src.opt_weight_shard_size == 0 && slices0 > 1 && *rc::gen::inRange(0, 4) == 0) {
      index_t total = 0;
      for (index_t j = 0; j < slices0; ++j) {
        const auto len = *rc::gen::inRange<std::int64_t>(1, 4);
        p.src.param_split_shape.push_back(len);
        total += len;
      }
      if (p.dst) {  // the target must still divide dim 0: scale the lengths
        const index_t unit = need[0] / std::gcd(need[0], total) ;
        for (auto& v : p.src.param_split_shape) v *= unit;
        total *= unit;
      }
      p.shape[0] = total;
    }
    s.params.push_back(std::move(p));
  }
  // the strategies' stage counts: the highest stage listed, + 1
  s.src.stages = s.dst.stages = 1;
  for (const auto& p : s.params) {
    s.src.stages = std::max<index_t>(s.src.stages, index_t{p.src_stage} + 1);
    if (p.dst) s.dst.stages = std::max<index_t>(s.dst.stages, index_t{p.dst->first} + 1);
  }
  return s;
}

layout src_layout(const param& p) { return to_layout(p.src, p.shape, p.src_stage, p.name); }
layout dst_layout(const scenario& s, const param& p) {
  if (!p.dst) {
    layout l = reshard::full_layout(p.shape);  // whole on every one of the N targets
    l.dev_matrix = {s.N()};
    return l;
  }
  return to_layout(p.dst->second, p.shape, p.dst->first, p.name);
}

std::string stored_name(const side& sd, std::uint32_t stage, const std::string& name) {
  return sd.stages > 1 ? std::to_string(stage) + "-" + name : name;
}

// The bytes of box `b` of a parameter of shape `shape` as source rank r holds them.
std::vector<std::byte> tagged(index_t r, const index_list& shape, const box& b) {
  std::vector<std::int64_t> v;
  v.reserve(static_cast<std::size_t>(reshard::volume(b)));
  const std::size_t n = shape.size();
  std::vector<index_t> idx(n, 0);
  for (index_t e = 0; e < reshard::volume(b); ++e) {
    index_t g = 0;
    for (std::size_t i = 0; i < n; ++i) g = g * shape[i] + b.offset[i] + idx[i];
    v.push_back((r << 32) | g);
    for (std::size_t i = n; i-- > 0;) {
      if (++idx[i] < b.extent[i]) break;
      idx[i] = 0;
    }
  }
  std::vector<std::byte> out(v.size() * 8);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The tags narrowed (hashed) to `type`'s element size: random bit patterns (NaNs, infinities and
// subnormals among them) that still differ between ranks; int64 keeps the tags.
std::vector<std::byte> in_dtype(std::vector<std::byte> tags, dtype type) {
  const std::size_t size = element_size(type);
  if (type == dtype::int64) return tags;
  std::vector<std::byte> out(tags.size() / 8 * size);
  for (std::size_t i = 0; i < tags.size() / 8; ++i) {
    std::uint64_t v;
    std::memcpy(&v, tags.data() + 8 * i, 8);
    v *= 0x9E3779B97F4A7C15ull;
    v ^= v >> 29;
    std::memcpy(out.data() + size * i, &v, size);  // little-endian: the low bytes
  }
  return out;
}

void write(const fs::path& dir, const scenario& s, dtype type = dtype::int64) {
  strategy_file sf, df;
  sf.nodes.push_back({"MatMul-op0", {0, {{1}}}});
  df.nodes = sf.nodes;
  for (const auto& p : s.params) {
    sf.layouts.emplace_back(stored_name(s.src, p.src_stage, p.name), p.src);
    if (p.dst) df.layouts.emplace_back(stored_name(s.dst, p.dst->first, p.name), p.dst->second);
  }
  write_strategy(dir / "src_strategy.ckpt", sf);
  write_strategy(dir / "dst_strategy.ckpt", df);
  for (index_t r = 0; r < s.M(); ++r) {
    const fs::path rd = dir / "src" / ("rank_" + std::to_string(r));
    fs::create_directories(rd);
    ckpt_writer w(rd / "net.ckpt", {});
    for (const auto& p : s.params) {
      const layout l = src_layout(p);
      if (r < l.first_rank || r >= l.first_rank + reshard::num_ranks(l)) continue;  // another stage
      const box b = reshard::box_of(l, r);
      w.write(p.name, type, b.extent.to_vector(), in_dtype(tagged(r, p.shape, b), type));
    }
    const std::int64_t step = 7;
    w.write("global_step", dtype::int64, std::vector<std::int64_t>{1}, std::as_bytes(std::span(&step, 1)));
    w.commit();
  }
}

std::vector<std::byte> content(const tensor_ref& e) {
  std::vector<std::byte> out;
  for (auto piece : e.pieces) out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

// What target rank t's tensor of p must be: convert of the plan of the transform's replica policy,
// on the tagged shards.
std::vector<std::byte> expected(const scenario& s, const param& p, index_t t) {
  const layout a = src_layout(p), b = dst_layout(s, p);
  const reshard::transfer_plan plan = reshard::plan(a, b, reshard::io::transform_replica_policy);
  std::vector<std::vector<std::byte>> src(static_cast<std::size_t>(reshard::num_ranks(a)));
  std::vector<const std::byte*> sp;
  for (index_t k = 0; k < reshard::num_ranks(a); ++k) {
    src[static_cast<std::size_t>(k)] = tagged(a.first_rank + k, p.shape, reshard::box_of(a, a.first_rank + k));
    sp.push_back(src[static_cast<std::size_t>(k)].data());
  }
  std::vector<std::vector<std::byte>> dst(static_cast<std::size_t>(reshard::num_ranks(b)));
  std::vector<std::byte*> dp;
  for (index_t k = 0; k < reshard::num_ranks(b); ++k) {
    dst[static_cast<std::size_t>(k)].resize(static_cast<std::size_t>(reshard::volume(reshard::box_of(b, b.first_rank + k))) * 8);
    dp.push_back(dst[static_cast<std::size_t>(k)].data());
  }
  reshard::convert(plan, std::span<const std::byte* const>(sp), std::span<std::byte* const>(dp), 8);
  return dst[static_cast<std::size_t>(t - b.first_rank)];
}

// Writes scenario s's sources and strategies under dir and dry-runs their transform to dir/out:
// the summary holds the plan (and the preview), nothing is written.
transform_summary dry_run_of(const reshard_test::temp_dir& dir, const scenario& s) {
  write(dir.path(), s);
  return transform_checkpoints(dir / "src", dir / "out", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
                               {.sync = false, .dry_run = true});
}

// The source files of `pl`, opened into `readers`.
plan_sources open_sources(const checkpoint_plan& pl, std::map<index_t, std::unique_ptr<checkpoint_reader>>& readers) {
  plan_sources sources;
  for (const auto& [r, src] : pl.sources) {
    readers.emplace(r, std::make_unique<checkpoint_reader>(src.path));
    sources.emplace(r, readers.at(r).get());
  }
  return sources;
}

// A scenario's sources written and dry-run: the plan, and its source files opened.
struct planned {
  reshard_test::temp_dir dir;
  transform_summary dry;
  std::map<index_t, std::unique_ptr<checkpoint_reader>> readers;
  plan_sources sources;
  explicit planned(const scenario& s) : dry(dry_run_of(dir, s)), sources(open_sources(*dry.plan, readers)) {}
  const checkpoint_plan& plan() const { return *dry.plan; }
};

// Does target t get parameter p (its stage lists it, or the target strategy does not)?
bool gets(const scenario& s, const param& p, index_t t) {
  return !p.dst || t / s.dst.stage_ranks() == p.dst->first;
}

}  // namespace

RC_GTEST_PROP(engine_plans, outputs_are_convert_of_the_parameter_plans, ()) {
  const scenario s = gen_scenario();
  reshard_test::temp_dir dir;
  write(dir.path(), s);
  const transform_summary sum =
      transform_checkpoints(dir / "src", dir / "out", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
                            {.jobs = *rc::gen::inRange(1u, 3u),
                             .sync = *rc::gen::arbitrary<bool>(),
                             .buffer_bytes = *rc::gen::elementOf(std::vector<std::uint64_t>{64, 4 << 20}),
                             .reads = *rc::gen::element(read_mode::mmap, read_mode::pread)});
  RC_ASSERT(sum.files == static_cast<std::size_t>(s.N()));
  for (index_t t = 0; t < s.N(); ++t) {
    const fs::path f = rank_checkpoint_path(dir / "out", "c_", t, checkpoint_format::ckpt);
    checkpoint_reader rd(f);
    for (const auto& p : s.params) {
      const tensor_ref* e = rd.find(p.name);
      if (!gets(s, p, t)) {
        RC_ASSERT(e == nullptr);
        continue;
      }
      RC_ASSERT(e != nullptr);
      RC_ASSERT(content(*e) == expected(s, p, t));
    }
  }
  // verify: the outputs match; a flipped byte of one tensor is found at its element, and only there
  const verify_report ok = verify_checkpoints(dir / "src", dir / "out", "c_", dir / "src_strategy.ckpt",
                                              dir / "dst_strategy.ckpt", {.buffer_bytes = 64});
  RC_ASSERT(ok.ok());
  RC_ASSERT(ok.files == static_cast<std::size_t>(s.N()));
  {
    const index_t victim = *rc::gen::inRange<index_t>(0, s.N());
    const fs::path f = rank_checkpoint_path(dir / "out", "c_", victim, checkpoint_format::ckpt);
    std::uint64_t at = 0, elem_index = 0;
    std::string name;
    {
      checkpoint_reader rd(f);
      std::vector<const tensor_ref*> nonempty;
      for (const auto& e : rd.entries())
        if (e.content_size() > 0 && e.type == dtype::int64) nonempty.push_back(&e);
      RC_PRE(!nonempty.empty());
      const tensor_ref& e = **rc::gen::elementOf(nonempty);
      const std::uint64_t byte = *rc::gen::inRange<std::uint64_t>(0, e.content_size());
      std::uint64_t k = byte;
      for (auto piece : e.pieces) {  // the file offset of content byte `byte`
        if (k < piece.size()) {
          at = rd.offset_of(piece.data() + k);
          break;
        }
        k -= piece.size();
      }
      name = e.name;
      elem_index = byte / 8;
    }
    auto bytes = reshard_test::read_bytes(f);
    bytes[static_cast<std::size_t>(at)] ^= std::byte{0x10};
    reshard_test::write_bytes(f, bytes);
    const verify_report bad = verify_checkpoints(dir / "src", dir / "out", "c_", dir / "src_strategy.ckpt",
                                                 dir / "dst_strategy.ckpt", {.buffer_bytes = 64});
    RC_ASSERT(bad.mismatches.size() == 1u);
    RC_ASSERT(bad.mismatches[0].file == f);
    RC_ASSERT(bad.mismatches[0].parameter == name);
    RC_ASSERT(bad.mismatches[0].what.rfind("differs from element " + std::to_string(elem_index) + " ", 0) == 0);
    bytes[static_cast<std::size_t>(at)] ^= std::byte{0x10};
    reshard_test::write_bytes(f, bytes);
  }
  // one target alone, from exactly the files rank_list_for_transform names
  const index_t t = *rc::gen::inRange<index_t>(0, s.N());
  std::map<std::int64_t, fs::path> files;
  for (std::int64_t r : rank_list_for_transform(t, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt"))
    files.emplace(r, dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
  const fs::path one = dir / "one.ckpt";
  transform_checkpoint_by_rank(t, files, one, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt");
  RC_ASSERT(reshard_test::read_bytes(one) ==
            reshard_test::read_bytes(rank_checkpoint_path(dir / "out", "c_", t, checkpoint_format::ckpt)));
  // and loaded into memory from the same files: the file's tensors, in the file's order
  std::vector<std::pair<std::string, std::vector<std::byte>>> loaded;
  const transform_summary mem = load_checkpoint_by_rank(
      t, files, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
      [&](index_t rank, std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) {
        RC_ASSERT(rank == t);
        RC_ASSERT(type == dtype::int64);
        std::uint64_t n = 8;
        for (auto d : dims) n *= static_cast<std::uint64_t>(d);
        RC_ASSERT(n == bytes);
        loaded.emplace_back(std::string(name), std::vector<std::byte>(static_cast<std::size_t>(bytes), std::byte{0xEE}));
        return std::span<std::byte>(loaded.back().second);
      },
      {.buffer_bytes = *rc::gen::elementOf(std::vector<std::uint64_t>{64, 4 << 20}),
       .reads = *rc::gen::element(read_mode::mmap, read_mode::pread)});
  checkpoint_reader rd(one);
  RC_ASSERT(loaded.size() == rd.entries().size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    RC_ASSERT(loaded[i].first == rd.entries()[i].name);
    RC_ASSERT(loaded[i].second == content(rd.entries()[i]));
    total += loaded[i].second.size();
  }
  RC_ASSERT(mem.bytes_written == total);
  RC_ASSERT(mem.files == 0u);
  RC_ASSERT(!fs::exists(dir / "one.ckpt.part"));
}

// Casts run inside the copy engine (law E1 with transform_options::casts): with random float
// dtypes in the sources and random rules (every floating-point parameter, or one parameter named
// by its glob), every output tensor is cast_elements of the same tensor written without casts,
// in either read mode, with chunks down to one element, to files and to memory; the Int64
// parameter that no rule names keeps its dtype and bytes; the summary lists exactly the casts.
RC_GTEST_PROP(engine_plans, casts_are_cast_elements_of_the_plain_outputs, ()) {
  const scenario s = gen_scenario();
  const std::vector<dtype> floats{dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};
  const dtype from = *rc::gen::elementOf(floats);
  reshard_test::temp_dir dir;
  write(dir.path(), s, from);
  transform_options plain{.jobs = 1, .sync = false};
  transform_checkpoints(dir / "src", dir / "plain", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt", plain);
  transform_options opts{.jobs = *rc::gen::inRange(1u, 3u),
                         .sync = false,
                         .buffer_bytes = *rc::gen::elementOf(std::vector<std::uint64_t>{1, 64, 4 << 20}),
                         .reads = *rc::gen::element(read_mode::mmap, read_mode::pread)};
  const dtype all = *rc::gen::elementOf(floats);
  opts.casts.all = all;
  std::map<std::string, dtype> want;  // parameter -> the dtype it is written in
  for (const auto& p : s.params) want[p.name] = all;
  if (*rc::gen::arbitrary<bool>()) {  // one parameter named by an exact glob
    const param& p = *rc::gen::elementOf(s.params);
    const dtype to = *rc::gen::elementOf(floats);
    opts.casts.named.emplace_back(p.name, to);
    want[p.name] = to;
  }
  const transform_summary sum = transform_checkpoints(dir / "src", dir / "cast", "c_", dir / "src_strategy.ckpt",
                                                      dir / "dst_strategy.ckpt", opts);
  std::set<std::string> cast_names;
  for (const auto& c : sum.casts) {
    RC_ASSERT(c.from == from);
    RC_ASSERT(c.to == want.at(c.name));
    cast_names.insert(c.name);
  }
  std::set<std::string> expect_cast;
  for (const auto& [name, to] : want)
    if (to != from) expect_cast.insert(name);
  RC_ASSERT(cast_names == expect_cast);
  // global_step, the one Int64 parameter, keeps its dtype, and the warning names it
  RC_ASSERT(std::any_of(sum.warnings.begin(), sum.warnings.end(), [](const std::string& w) {
    return w.find("1 parameter that is not floating point (such as 'global_step') keeps its dtype") != std::string::npos;
  }));
  // verify, given the same rules, finds the cast outputs right, and without them, wrong
  RC_ASSERT(verify_checkpoints(dir / "src", dir / "cast", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt", opts)
                .ok());
  RC_ASSERT(verify_checkpoints(dir / "src", dir / "cast", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
                               {})
                .ok() == expect_cast.empty());
  // the outputs cast; into memory as well
  const index_t m = *rc::gen::inRange<index_t>(0, s.N());
  std::map<std::string, std::vector<std::byte>> loaded;
  std::map<std::int64_t, fs::path> files;
  for (index_t r = 0; r < s.M(); ++r) files.emplace(r, dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
  load_checkpoint_by_rank(
      m, files, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
      [&](index_t, std::string_view name, dtype, std::span<const std::int64_t>, std::uint64_t bytes) {
        auto& v = loaded[std::string(name)];
        v.assign(static_cast<std::size_t>(bytes), std::byte{0xEE});
        return std::span<std::byte>(v);
      },
      opts);
  for (index_t t = 0; t < s.N(); ++t) {
    checkpoint_reader a(rank_checkpoint_path(dir / "plain", "c_", t, checkpoint_format::ckpt));
    checkpoint_reader b(rank_checkpoint_path(dir / "cast", "c_", t, checkpoint_format::ckpt));
    RC_ASSERT(a.entries().size() == b.entries().size());
    for (std::size_t i = 0; i < a.entries().size(); ++i) {
      const tensor_ref& x = a.entries()[i];
      const tensor_ref& y = b.entries()[i];
      RC_ASSERT(x.name == y.name);
      RC_ASSERT(x.dims == y.dims);
      const dtype to = want.count(x.name) ? want.at(x.name) : x.type;
      RC_ASSERT(y.type == to);
      const std::vector<std::byte> in = content(x);
      std::vector<std::byte> out(in.size() / element_size(x.type) * element_size(to));
      cast_elements(in, x.type, out, to);
      RC_ASSERT(content(y) == out);
      if (t == m) RC_ASSERT(loaded.at(x.name) == out);
    }
  }
}

// The checkpoint plan is what the dry run reports and what the run does (laws E2, E3): for random
// strategies, the dry run's per-target bytes written, reads per source file, cross-rank bytes and
// lower bound are sums over the plan's items (each sliced item's transfers tile its target box);
// the run writes each target file with the plan's items, in the plan's order, dtypes and dims,
// and reads from the sources the plan's bytes, in all and for one target loaded alone; the plan's
// JSON is version 1 with every target.
RC_GTEST_PROP(engine_plans, the_dry_run_and_the_run_are_the_plan, ()) {
  const scenario s = gen_scenario();
  reshard_test::temp_dir dir;
  const transform_summary dry = dry_run_of(dir, s);
  RC_ASSERT(dry.preview.has_value());
  RC_ASSERT(dry.plan.has_value());
  RC_ASSERT(!fs::exists(dir / "out"));
  const checkpoint_plan& pl = *dry.plan;
  const transform_preview& pv = *dry.preview;
  RC_ASSERT(pl.targets.size() == static_cast<std::size_t>(s.N()));
  RC_ASSERT(pv.targets.size() == pl.targets.size());
  std::map<index_t, std::uint64_t> all_reads;
  std::uint64_t written = 0, cross = 0, lower = 0;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) {
    const plan_target& t = pl.targets[i];
    const target_preview& tp = pv.targets[i];
    RC_ASSERT(tp.rank == t.rank);
    RC_ASSERT(tp.path == t.path);
    RC_ASSERT(t.files == std::vector<fs::path>{t.path});
    std::map<index_t, std::uint64_t> reads;
    std::uint64_t w = 0, c = 0, lb = 0;
    for (const plan_item& it : t.items) {
      w += it.bytes;
      RC_ASSERT(it.own_rank_bytes <= it.source_bytes);
      lb += it.source_bytes - it.own_rank_bytes;
      if (it.raw) {
        RC_ASSERT(it.transfers.empty());
        std::uint64_t stored = 0;
        for (const auto& g : it.stored) stored += g.bytes;
        RC_ASSERT(stored == it.source_bytes);
        reads[it.source_rank] += it.source_bytes;
        if (it.source_rank != t.rank) c += it.source_bytes;
        continue;
      }
      // own_rank_bytes: the bytes of the target box that the target's own source file holds,
      // as the plan's table of held boxes says
      std::uint64_t own = 0;
      if (const auto by_rank = pl.holds.find(it.source_name); by_rank != pl.holds.end())
        for (const auto& [r, b] : held_boxes(by_rank->second, t.rank))
          own += static_cast<std::uint64_t>(reshard::volume(reshard::intersect(b, it.target))) * element_size(it.from);
      RC_ASSERT(it.own_rank_bytes == own);
      std::uint64_t covered = 0, bytes = 0;
      for (const plan_transfer& x : it.transfers) {
        RC_ASSERT(reshard::intersect(x.where, it.target) == x.where);
        covered += static_cast<std::uint64_t>(reshard::volume(x.where));
        bytes += x.bytes;
        reads[x.rank] += x.bytes;
        if (x.rank != t.rank) c += x.bytes;
      }
      RC_ASSERT(covered == static_cast<std::uint64_t>(reshard::volume(it.target)));
      RC_ASSERT(bytes == it.source_bytes);
    }
    RC_ASSERT(tp.tensor_bytes == w);
    RC_ASSERT(tp.reads == reads);
    RC_ASSERT(tp.cross_bytes == c);
    RC_ASSERT(tp.lower_bound_bytes == lb);
    for (const auto& [r, b] : reads) all_reads[r] += b;
    written += w, cross += c, lower += lb;
  }
  std::uint64_t read = 0;
  RC_ASSERT(pl.sources.size() == all_reads.size());
  for (const auto& [r, b] : all_reads) {
    RC_ASSERT(pl.sources.at(r).bytes_read == b);
    RC_ASSERT(pv.sources.at(r) == pl.sources.at(r).path);
    read += b;
  }
  RC_ASSERT(pv.bytes_read == read && pl.bytes_read == read);
  RC_ASSERT(pv.bytes_written == written && pl.bytes_written == written);
  RC_ASSERT(pv.cross_bytes == cross && pl.cross_bytes == cross);
  RC_ASSERT(pv.lower_bound_bytes == lower && pl.lower_bound_bytes == lower);
  // the JSON: versioned, every target and item
  const nlohmann::json j = to_json(pl);
  RC_ASSERT(j.at("checkpoint_plan_version").get<int>() == checkpoint_plan::version);
  RC_ASSERT(j.at("targets").size() == pl.targets.size());
  for (std::size_t i = 0; i < pl.targets.size(); ++i)
    RC_ASSERT(j["targets"][i].at("items").size() == pl.targets[i].items.size());
  RC_ASSERT(nlohmann::json::parse(j.dump()) == j);
  // the run: what the plan says, read and written
  const transform_summary run =
      transform_checkpoints(dir / "src", dir / "out", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
                            {.jobs = *rc::gen::inRange(1u, 3u),
                             .sync = false,
                             .buffer_bytes = *rc::gen::elementOf(std::vector<std::uint64_t>{64, 4 << 20}),
                             .reads = *rc::gen::element(read_mode::mmap, read_mode::pread)});
  RC_ASSERT(!run.plan.has_value());
  RC_ASSERT(run.bytes_read == pl.bytes_read);
  RC_ASSERT(run.source_files == pl.sources.size());
  for (const plan_target& t : pl.targets) {
    checkpoint_reader rd(t.path);
    RC_ASSERT(rd.entries().size() == t.items.size());
    for (std::size_t k = 0; k < t.items.size(); ++k) {
      const tensor_ref& e = rd.entries()[k];
      RC_ASSERT(e.name == t.items[k].name);
      RC_ASSERT(e.type == t.items[k].to);
      RC_ASSERT(e.dims == t.items[k].dims);
      RC_ASSERT(e.content_size() == t.items[k].bytes);
    }
  }
  // one target loaded alone reads its share of the plan
  const std::size_t i = *rc::gen::inRange<std::size_t>(0, pl.targets.size());
  std::map<std::int64_t, fs::path> files;
  for (index_t r = 0; r < s.M(); ++r) files.emplace(r, dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
  std::vector<std::vector<std::byte>> memory;
  const transform_summary one = load_checkpoint_by_rank(
      pl.targets[i].rank, files, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
      [&](index_t, std::string_view, dtype, std::span<const std::int64_t>, std::uint64_t bytes) {
        memory.emplace_back(static_cast<std::size_t>(bytes));
        return std::span<std::byte>(memory.back());
      },
      {.buffer_bytes = 64});
  std::uint64_t share = 0;
  for (const auto& [r, b] : totals_of(pl.targets[i]).reads) share += b;
  RC_ASSERT(one.bytes_read == share);
}

namespace {

// Every file under `dir`, by its path relative to `dir`, with its bytes.
std::map<std::string, std::vector<char>> tree(const fs::path& dir) {
  std::map<std::string, std::vector<char>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace(fs::relative(e.path(), dir).string(),
                std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
  return out;
}

}  // namespace

// A plan is a value that can be kept (laws E4, E5): read back from its JSON it is the same plan,
// and its K parts (any K, executed in any order) write exactly the files the whole plan writes,
// byte for byte the files of transform_checkpoints.
RC_GTEST_PROP(engine_plans, a_plan_read_back_and_executed_in_parts_writes_the_run, ()) {
  const scenario s = gen_scenario();
  reshard_test::temp_dir dir;
  write(dir.path(), s);
  const fs::path src_s = dir / "src_strategy.ckpt", dst_s = dir / "dst_strategy.ckpt";
  const bool crc = *rc::gen::arbitrary<bool>();
  const transform_summary dry =
      transform_checkpoints(dir / "src", dir / "parts", "c_", src_s, dst_s, {.sync = false, .crc = crc, .dry_run = true});
  const checkpoint_plan& pl = *dry.plan;
  const nlohmann::json j = to_json(pl);
  const checkpoint_plan back = plan_from_json(nlohmann::json::parse(j.dump()), "plan.json");
  RC_ASSERT(back == pl);
  RC_ASSERT(checkpoint_plan_problems(back).empty());
  // the compact bytes processes hand each other (plan_wire.hpp) are the plan too; cut short
  // anywhere, they are an error naming their origin
  const std::string bytes = plan_to_bytes(pl);
  RC_ASSERT(plan_from_bytes(bytes, "process 0") == pl);
  const std::size_t cut = *rc::gen::inRange<std::size_t>(0, bytes.size());
  bool refused = false;
  try {
    plan_from_bytes(std::string_view(bytes).substr(0, cut), "process 0");
  } catch (const reshard::error& e) {
    refused = std::string(e.what()).find("process 0: the plan's bytes:") != std::string::npos;
  }
  RC_ASSERT(refused);
  transform_checkpoints(dir / "src", dir / "whole", "c_", src_s, dst_s, {.sync = false, .crc = crc});
  const std::size_t k = *rc::gen::inRange<std::size_t>(1, 4);
  std::vector<std::size_t> order(k);
  std::iota(order.begin(), order.end(), std::size_t{0});
  order = *rc::gen::construct<std::vector<std::size_t>>(rc::gen::just(order));
  std::shuffle(order.begin(), order.end(), std::mt19937(*rc::gen::arbitrary<unsigned>()));
  std::set<fs::path> written;
  std::size_t targets = 0;
  for (std::size_t i : order) {
    const checkpoint_plan part = plan_part(back, i, k);
    RC_ASSERT(checkpoint_plan_problems(part).empty());
    targets += part.targets.size();
    const transform_summary r = execute_plan(part, {.sync = false, .jobs = *rc::gen::inRange(1u, 3u)});
    RC_ASSERT(r.bytes_read == part.bytes_read);
    for (const auto& o : r.outputs) RC_ASSERT(written.insert(o).second);  // the parts are disjoint
  }
  RC_ASSERT(targets == pl.targets.size());
  RC_ASSERT(tree(dir / "parts") == tree(dir / "whole"));
}

// Plans written before the source table held the senders' boxes repeated each sender's box per
// transfer ("held"): such a plan reads back as the same plan when every "held" is the table's,
// and is refused, naming the transfer's "held", when one is not.
RC_GTEST_PROP(engine_plans, a_held_box_per_transfer_must_be_the_tables, ()) {
  const scenario s = gen_scenario();
  reshard_test::temp_dir dir;
  const transform_summary dry = dry_run_of(dir, s);
  const checkpoint_plan& pl = *dry.plan;
  nlohmann::json j = to_json(pl);
  nlohmann::json* movable = nullptr;  // a transfer whose held box has a dim
  for (auto& t : j["targets"])
    for (auto& i : t["items"]) {
      if (!i.contains("slice")) continue;
      for (auto& x : i["slice"]["transfers"]) {
        RC_ASSERT(!x.contains("held"));  // the table holds them
        const box* h = held_box(pl, x["rank"].get<index_t>(), i["source_name"].get<std::string>());
        RC_ASSERT(h != nullptr);
        x["held"] = {{"offset", h->offset.to_vector()}, {"extent", h->extent.to_vector()}};
        if (!h->offset.empty() && !movable) movable = &x;
      }
    }
  RC_ASSERT(plan_from_json(j, "old.json") == pl);
  RC_PRE(movable != nullptr);
  (*movable)["held"]["offset"][0] = (*movable)["held"]["offset"][0].get<index_t>() + 1;
  std::string why;
  try {
    plan_from_json(j, "old.json");
  } catch (const reshard::error& e) {
    why = e.what();
  }
  RC_ASSERT(why.find("old.json") != std::string::npos);
  RC_ASSERT(why.find(".held") != std::string::npos);
  RC_ASSERT(why.find("the source table says") != std::string::npos);
}

// check_checkpoint_plan refuses a plan that was tampered with (law K8): a transfer dropped, a
// transfer's box shifted, or a transfer moved to a sender that does not hold its box; the plan
// as it was made has no problem.
RC_GTEST_PROP(engine_plans, a_tampered_plan_is_refused, ()) {
  const scenario s = gen_scenario();
  reshard_test::temp_dir dir;
  const transform_summary dry = dry_run_of(dir, s);
  checkpoint_plan pl = *dry.plan;
  RC_ASSERT(checkpoint_plan_problems(pl).empty());
  std::vector<std::pair<std::size_t, std::size_t>> sliced;  // (target, item) with transfers
  for (std::size_t t = 0; t < pl.targets.size(); ++t)
    for (std::size_t i = 0; i < pl.targets[t].items.size(); ++i)
      if (!pl.targets[t].items[i].raw && reshard::volume(pl.targets[t].items[i].target) > 0)
        sliced.emplace_back(t, i);
  RC_PRE(!sliced.empty());
  const auto [t, i] = *rc::gen::elementOf(sliced);
  plan_item& it = pl.targets[t].items[i];
  const std::size_t x = *rc::gen::inRange<std::size_t>(0, it.transfers.size());
  const int how = *rc::gen::inRange(0, 3);
  if (how == 0) {  // dropped
    it.transfers.erase(it.transfers.begin() + static_cast<std::ptrdiff_t>(x));
  } else if (how == 1) {  // shifted by one along a dim
    const std::size_t d = *rc::gen::inRange<std::size_t>(0, it.target.offset.size());
    it.transfers[x].where.offset[d] += *rc::gen::element<index_t>(-1, 1);
  } else {  // sent by a source rank whose box does not hold it
    std::vector<index_t> others;
    for (const auto& [r, src] : pl.sources) {
      const box* h = held_box(pl, r, it.source_name);
      if (!h || reshard::intersect(it.transfers[x].where, *h) != it.transfers[x].where) others.push_back(r);
    }
    RC_PRE(!others.empty());
    it.transfers[x].rank = *rc::gen::elementOf(others);
  }
  RC_ASSERT(!checkpoint_plan_problems(pl).empty());
  bool refused = false;
  try {
    check_checkpoint_plan(pl, "tampered.json");
  } catch (const reshard::error& e) {
    refused = std::string(e.what()).find("tampered.json: the plan does not add up") != std::string::npos;
  }
  RC_ASSERT(refused);
}

// The executor reads from each source file exactly the bytes the plan says it reads from it (law
// E6), counted at its reads (plan_executor::bytes_read_by_source), in either read mode, whatever
// the chunk buffer; and what it reads is what the sinks receive.
RC_GTEST_PROP(engine_plans, the_executor_reads_the_plans_bytes_from_each_file, ()) {
  const scenario s = gen_scenario();
  const planned run_of(s);
  const checkpoint_plan& pl = run_of.plan();
  const plan_sources& sources = run_of.sources;
  const std::uint64_t buffer = *rc::gen::elementOf(std::vector<std::uint64_t>{64, 4096, 4 << 20});
  plan_executor run(pl, sources, {1, buffer}, *rc::gen::element(read_mode::mmap, read_mode::pread), "test");
  std::vector<std::vector<std::byte>> memory;
  const tensor_allocator allocate = [&](index_t, std::string_view, dtype, std::span<const std::int64_t>,
                                        std::uint64_t bytes) {
    memory.emplace_back(static_cast<std::size_t>(bytes));
    return std::span<std::byte>(memory.back());
  };
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) {
    memory_sink out(allocate, pl.targets[i].rank);
    given += run.run_target(i, out).bytes_written;
  }
  std::map<index_t, std::uint64_t> want;
  for (const auto& [r, src] : pl.sources) want[r] = src.bytes_read;
  RC_ASSERT(run.bytes_read_by_source() == want);
  std::uint64_t filled = 0;
  for (const auto& m : memory) filled += m.size();
  RC_ASSERT(given == pl.bytes_written);
  RC_ASSERT(filled == pl.bytes_written);
}

namespace {

// Every target of `pl` executed into memory by `run`'s run_targets over `groups`, on `threads`:
// per target, its tensors' bytes in order. The sinks are Sinks made from (allocator, rank);
// `after(sinks, summaries)` sees each group's sinks and what run_targets returned.
template <class Sink, class After>
std::vector<std::vector<std::vector<std::byte>>> run_into_memory(plan_executor& run, const checkpoint_plan& pl,
                                                                 const std::vector<std::vector<std::size_t>>& groups,
                                                                 unsigned threads, After&& after) {
  std::vector<std::vector<std::vector<std::byte>>> out(pl.targets.size());
  for (const auto& group : groups) {
    std::deque<tensor_allocator> allocators;  // a memory_sink keeps a reference to its allocator
    std::vector<std::unique_ptr<Sink>> sinks;
    std::vector<tensor_sink*> outs;
    for (std::size_t i : group) {
      auto& mine = out[i];
      const tensor_allocator& allocate = allocators.emplace_back(
          [&mine](index_t, std::string_view, dtype, std::span<const std::int64_t>, std::uint64_t bytes) {
            mine.emplace_back(static_cast<std::size_t>(bytes));
            return std::span<std::byte>(mine.back());
          });
      sinks.push_back(std::make_unique<Sink>(allocate, pl.targets[i].rank));
      outs.push_back(sinks.back().get());
    }
    after(sinks, run.run_targets(group, outs, threads));
  }
  return out;
}

// Every target of `pl` executed into memory, by run_targets over `groups`: per target, its
// tensors' bytes in order; `file_bytes` gets the bytes the reads took from the files.
std::vector<std::vector<std::vector<std::byte>>> execute_in_groups(const checkpoint_plan& pl, const plan_sources& sources,
                                                                   std::uint64_t buffer, read_mode mode,
                                                                   const std::vector<std::vector<std::size_t>>& groups,
                                                                   std::uint64_t& file_bytes, std::uint64_t& needed,
                                                                   unsigned threads = 1, bool whole = true,
                                                                   bool overlap = false) {
  plan_executor run(pl, sources, {1, buffer}, mode, "test");
  run.read_small_files_whole(whole);
  run.overlap_writes(overlap);
  file_bytes = needed = 0;
  return run_into_memory<memory_sink>(run, pl, groups, threads, [&](const auto&, const auto& summaries) {
    for (const auto& s : summaries) file_bytes += s.file_bytes_read, needed += s.bytes_read;
  });
}

std::vector<index_t> ranks_read(const plan_target& t) {
  std::vector<index_t> r;
  for (const auto& it : t.items)
    for (const auto& x : it.transfers) r.push_back(x.rank);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

}  // namespace

// Read groups (law E8): read_groups cuts the targets into runs of consecutive targets each of
// which reads a range of a file the one before it reads, each target in exactly one group, at most `most` to a group; executed
// together (run_targets, its rounds on 1 to 3 threads, its writes beside its reads or not) a group gives every target the bytes it
// gets alone; in mmap both copy
// exactly the bytes needed from the mappings, and alone a target reads at least what it needs.
RC_GTEST_PROP(engine_plans, read_groups_write_what_targets_alone_write, ()) {
  const scenario s = gen_scenario();
  const planned run_of(s);
  const checkpoint_plan& pl = run_of.plan();
  const plan_sources& sources = run_of.sources;
  const std::size_t most = *rc::gen::inRange<std::size_t>(1, 9);
  const auto groups = read_groups(pl, most);
  std::size_t next = 0;
  for (const auto& g : groups) {
    RC_ASSERT(!g.empty());
    RC_ASSERT(g.size() <= most);
    for (std::size_t i : g) RC_ASSERT(i == next++);  // every target once, in order
    for (std::size_t q = 1; q < g.size(); ++q) {  // each member reads a range of a file the one before reads
      RC_ASSERT(reshard::io::detail::share_reads(pl, pl.targets[g[q - 1]], pl.targets[g[q]]));
      RC_ASSERT(pl.targets[g[q]].items.size() == pl.targets[g.front()].items.size());
    }
    if (g.size() > 1) RC_ASSERT(!ranks_read(pl.targets[g.front()]).empty());
  }
  RC_ASSERT(next == pl.targets.size());
  std::vector<std::vector<std::size_t>> alone;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) alone.push_back({i});
  const std::uint64_t buffer = *rc::gen::elementOf(std::vector<std::uint64_t>{64, 4096, 4 << 20});
  const read_mode mode = *rc::gen::element(read_mode::mmap, read_mode::pread);
  std::uint64_t file_alone = 0, file_grouped = 0, need_alone = 0, need_grouped = 0;
  const auto by_one = execute_in_groups(pl, sources, buffer, mode, alone, file_alone, need_alone);
  const unsigned threads = *rc::gen::inRange(1u, 4u);  // a group's rounds shared by threads
  const bool overlap = *rc::gen::arbitrary<bool>();   // and its writes beside its reads
  const auto together =
      execute_in_groups(pl, sources, buffer, mode, groups, file_grouped, need_grouped, threads, true, overlap);
  RC_ASSERT(together == by_one);
  RC_ASSERT(need_grouped == pl.bytes_read);
  RC_ASSERT(need_alone == pl.bytes_read);
  if (mode == read_mode::mmap) {  // copied from the mappings: the bytes needed
    RC_ASSERT(file_grouped == pl.bytes_read);
    RC_ASSERT(file_alone == pl.bytes_read);
  } else {  // alone a target reads at least what it needs; a group may need a range twice and read it once
    RC_ASSERT(file_alone >= pl.bytes_read);
    RC_ASSERT(file_grouped > 0 || pl.bytes_read == 0);
  }
}

// The case read groups are for: 4 row blocks read as a 2x4 grid. Alone, each of the 4 targets of
// a row of the grid reads its two files' rows whole (it needs a quarter of every row, and one
// read of a range is cheaper than a read per row); together they read each row once: 1.00 of
// the bytes needed, against 4x. The files here are small (4 KiB each): by default a group that
// takes at least three quarters of a file reads it whole, once (plan_executor::
// read_small_files_whole): a row of the grid takes all of its two files' tensor, so it reads
// each once, whole; a target alone takes a quarter of them and reads its ranges, as when files
// are never read whole.
namespace {
// 4 row blocks of an int64 [8, 256] written as a 2x4 grid: read groups of 4 targets each.
scenario grid_scenario() {
  scenario s;
  s.src.dev = {4};
  s.dst.dev = {2, 4};
  param p;
  p.name = "w";
  p.shape = {8, 256};
  p.src.dev_matrix = {4};
  p.src.tensor_map = {{0}, {-1}};
  param_layout d;
  d.dev_matrix = {2, 4};
  d.tensor_map = {{1}, {0}};
  p.dst = {0, d};
  s.params.push_back(p);
  return s;
}
}  // namespace

TEST(engine_plans, a_row_of_the_grid_reads_its_rows_once) {
  const scenario s = grid_scenario();
  const planned run_of(s);
  const checkpoint_plan& pl = run_of.plan();
  const plan_sources& sources = run_of.sources;
  const reshard_test::temp_dir& dir = run_of.dir;
  const auto groups = read_groups(pl, 8);
  ASSERT_EQ(groups, (std::vector<std::vector<std::size_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  std::vector<std::vector<std::size_t>> alone;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) alone.push_back({i});
  const std::uint64_t w = 8 * 256 * 8;  // the tensor's bytes (int64)
  std::uint64_t raw = 0;                // global_step, copied as stored by every target
  for (const auto& t : pl.targets)
    for (const auto& it : t.items) raw += it.raw ? it.source_bytes : 0;
  EXPECT_EQ(raw, 8 * 8);
  // the sizes of the files the targets of `gs` read, each once per group
  const auto whole_files_of = [&](const std::vector<std::vector<std::size_t>>& gs) {
    std::uint64_t n = 0;
    for (const auto& g : gs)
      for (index_t r : ranks_read(pl.targets[g.front()])) n += sources.at(r)->file_size();
    return n;
  };
  std::uint64_t ranges_alone = 0;  // what the targets alone read range by range
  {  // files read range by range
    std::uint64_t file_alone = 0, file_grouped = 0, need_alone = 0, need_grouped = 0;
    const auto by_one = execute_in_groups(pl, sources, 4 << 20, read_mode::pread, alone, file_alone, need_alone, 1, false);
    const auto together =
        execute_in_groups(pl, sources, 4 << 20, read_mode::pread, groups, file_grouped, need_grouped, 2, false);
    EXPECT_EQ(together, by_one);
    EXPECT_EQ(need_grouped, w + raw);
    EXPECT_EQ(file_grouped, need_grouped);
    EXPECT_GT(file_alone, 2 * w);  // each target read its rows whole (all but the last row's tail)
    ranges_alone = file_alone;
  }
  // small files read whole (the default): a group reads each of its files once, in one pread; its
  // rounds copy the rows from there. Alone, a target takes a quarter of its two files: not read
  // whole, but range by range, as above.
  std::uint64_t file_alone = 0, file_grouped = 0, need_alone = 0, need_grouped = 0;
  const auto by_one = execute_in_groups(pl, sources, 4 << 20, read_mode::pread, alone, file_alone, need_alone);
  const auto together = execute_in_groups(pl, sources, 4 << 20, read_mode::pread, groups, file_grouped, need_grouped, 2);
  EXPECT_EQ(together, by_one);
  EXPECT_EQ(need_grouped, w + raw);
  EXPECT_EQ(file_grouped, whole_files_of(groups) + raw);
  EXPECT_EQ(file_alone, ranges_alone);
  EXPECT_LT(file_alone, whole_files_of(alone) + raw);
  EXPECT_GT(file_grouped, w);  // the files' headers and global_step too
  // and transform_checkpoints (two jobs, no memory budget) reads as the groups do
  const transform_summary run = transform_checkpoints(dir / "src", dir / "run", "c_", dir / "src_strategy.ckpt",
                                                      dir / "dst_strategy.ckpt", {.jobs = 2, .sync = false});
  EXPECT_EQ(run.file_bytes_read, file_grouped);
  // under a memory budget (no read groups, no files read whole) each target reads the ranges it needs
  const transform_summary budget =
      transform_checkpoints(dir / "src", dir / "budget", "c_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt",
                            {.jobs = 1, .sync = false, .max_memory = std::uint64_t{1} << 40});
  EXPECT_EQ(budget.file_bytes_read, ranges_alone);
}

// Column blocks on replicas, as a Megatron checkpoint's row-parallel weights: source dev [4, 2]
// (each column half of w [8, 12] on 4 replicas: ranks 0, 2, 4, 6 and 1, 3, 5, 7) to dev [2, 3]
// (column thirds), and a bias on every rank. The 3 targets of a tensor-parallel row take all the
// columns of two sources' rows between them (4 + 2 of the first half, 2 + 4 of the second): they
// read them from the same replicas (target 3, as near rank 2 as 4, takes 4, which target 4 holds:
// replica_policy::nearest's tie), are one read group, and read each of those rows once, with no
// gap between their columns: 1.00 of the bytes needed, where alone a target reads from its first
// row to its last and skips 2 or 4 of every 6 columns. Small files read whole (the default) are
// the 4 of which a group takes every tensor: those cost their index's bytes beside.
namespace {
scenario column_blocks_scenario() {
  scenario s;
  s.src.dev = {4, 2};
  s.dst.dev = {2, 3};
  param w;
  w.name = "w";
  w.shape = {8, 12};
  w.src.dev_matrix = {4, 2};
  w.src.tensor_map = {{-1}, {0}};
  param_layout d;
  d.dev_matrix = {2, 3};
  d.tensor_map = {{-1}, {0}};
  w.dst = {0, d};
  s.params.push_back(w);
  param b;
  b.name = "b";
  b.shape = {12};
  b.src.dev_matrix = {4, 2};
  b.src.tensor_map = {{-1}};
  param_layout r;
  r.dev_matrix = {2, 3};
  r.tensor_map = {{-1}};
  b.dst = {0, r};
  s.params.push_back(b);
  return s;
}
}  // namespace

TEST(engine_plans, targets_that_split_replicated_columns_read_them_once_without_gaps) {
  const planned run_of(column_blocks_scenario());
  const checkpoint_plan& pl = run_of.plan();
  const plan_sources& sources = run_of.sources;
  ASSERT_EQ(pl.targets.size(), 6u);
  const auto groups = read_groups(pl, 8);
  ASSERT_EQ(groups, (std::vector<std::vector<std::size_t>>{{0, 1, 2}, {3, 4, 5}}));
  for (const auto& it : pl.targets[3].items)  // target 3's columns 0..3 from rank 4, as target 4's 4..5
    if (it.source_name == "w") {
      ASSERT_EQ(it.transfers.size(), 1u);
      EXPECT_EQ(it.transfers[0].rank, 4);
    }
  std::vector<std::vector<std::size_t>> alone;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) alone.push_back({i});
  std::uint64_t file_alone = 0, file_grouped = 0, need_alone = 0, need_grouped = 0;
  const auto by_one = execute_in_groups(pl, sources, 4 << 20, read_mode::pread, alone, file_alone, need_alone, 1, false);
  const auto together =
      execute_in_groups(pl, sources, 4 << 20, read_mode::pread, groups, file_grouped, need_grouped, 1, false);
  EXPECT_EQ(together, by_one);
  EXPECT_EQ(need_grouped, pl.bytes_read);
  EXPECT_EQ(file_grouped, pl.bytes_read);  // no gap, nothing twice
  EXPECT_GT(file_alone, pl.bytes_read);    // each from its first row to its last
  // small files read whole: files 0, 1 (group 0 takes all of w's first and second half there,
  // and the bias and global_step, copied by targets 0 and 1) and 4, 5; files 2 and 3 range by range
  std::uint64_t file_whole = 0, need_whole = 0;
  const auto whole = execute_in_groups(pl, sources, 4 << 20, read_mode::pread, groups, file_whole, need_whole, 2);
  EXPECT_EQ(whole, by_one);
  std::uint64_t index_bytes = 0, raw = 0;  // of the files read whole: bytes not tensors; their raw copies
  for (const index_t r : {0, 1, 4, 5}) {
    std::uint64_t tensors = 0;
    for (const auto& e : sources.at(r)->entries()) tensors += e.content_size();
    index_bytes += sources.at(r)->file_size() - tensors;
  }
  for (const auto& t : pl.targets)
    for (const auto& it : t.items)
      if (it.raw && (it.source_rank <= 1 || it.source_rank >= 4)) raw += it.source_bytes;  // copied as stored, again
  EXPECT_EQ(raw, 4u * 8u);
  EXPECT_EQ(need_whole, pl.bytes_read);
  EXPECT_EQ(file_whole, pl.bytes_read + index_bytes + raw);
}

namespace {
// A memory sink that checks the executor's calls: it notes a call that starts while another call
// to it is running (`overlapped`), and its append number `fail_at` (0: none) throws.
class checked_sink final : public tensor_sink {
 public:
  checked_sink(const tensor_allocator& allocate, index_t rank, std::size_t fail_at = 0)
      : out_(allocate, rank), fail_at_(fail_at) {}
  void open_file(std::size_t k) override { call([&] { out_.open_file(k); }); }
  void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) override {
    call([&] { out_.begin(name, type, dims, bytes); });
  }
  std::byte* direct(std::size_t n) override {
    std::byte* p = nullptr;
    call([&] { p = out_.direct(n); });
    return p;
  }
  void append(std::span<const std::byte> b) override {
    call([&] {
      if (++appends_ == fail_at_) throw reshard::error("checked_sink: append " + std::to_string(appends_) + " fails");
      std::this_thread::yield();  // a call that lasts: another one running beside it would be seen
      out_.append(b);
    });
  }
  void end() override { call([&] { out_.end(); }); }
  void finish() override { call([&] { out_.finish(); }); }

  bool overlapped() const noexcept { return overlapped_.load(); }

 private:
  template <class F>
  void call(F&& f) {
    if (inside_.exchange(true)) overlapped_ = true;
    try {
      f();
    } catch (...) {
      inside_ = false;
      throw;
    }
    inside_ = false;
  }
  memory_sink out_;
  std::size_t fail_at_;
  std::size_t appends_ = 0;
  std::atomic<bool> inside_{false};
  std::atomic<bool> overlapped_{false};
};
}  // namespace

// A read group on more than one thread told to overlap its writes (plan_executor::overlap_writes)
// writes each member's chunks on a thread of its own while it reads the next ones. Each sink must still see its calls in order
// and one at a time, every target must get what it gets alone, with many chunk rounds (a 64-byte
// buffer: chunks of 2 elements) and one, and a sink that fails in the middle of the rounds fails
// the run with its own error (the other members' writes waited for, nothing left running).
TEST(engine_plans, a_groups_writes_overlap_its_reads_one_call_at_a_time_per_sink) {
  const planned run_of(grid_scenario());
  const checkpoint_plan& pl = run_of.plan();
  const auto groups = read_groups(pl, 8);
  ASSERT_EQ(groups.size(), 2u);
  std::vector<std::vector<std::size_t>> alone;
  for (std::size_t i = 0; i < pl.targets.size(); ++i) alone.push_back({i});
  for (const std::uint64_t buffer : {std::uint64_t{64}, std::uint64_t{4} << 20})
    for (const read_mode mode : {read_mode::pread, read_mode::mmap}) {
      std::uint64_t file = 0, need = 0;
      const auto by_one = execute_in_groups(pl, run_of.sources, buffer, mode, alone, file, need);
      for (unsigned threads = 2; threads <= 4; ++threads) {
        plan_executor run(pl, run_of.sources, {1, buffer}, mode, "test");
        run.overlap_writes(true);
        const auto out = run_into_memory<checked_sink>(run, pl, groups, threads, [&](const auto& sinks, const auto&) {
          for (const auto& k : sinks) EXPECT_FALSE(k->overlapped()) << "buffer " << buffer << ", threads " << threads;
        });
        EXPECT_EQ(out, by_one) << "buffer " << buffer << ", threads " << threads;
      }
    }
  // a member's sink fails at its 20th append (of 128 chunks): the run fails with that error
  plan_executor run(pl, run_of.sources, {1, 64}, read_mode::pread, "test");
  run.overlap_writes(true);
  std::vector<std::vector<std::byte>> memory;
  const tensor_allocator allocate = [&memory](index_t, std::string_view, dtype, std::span<const std::int64_t>,
                                              std::uint64_t bytes) {
    memory.emplace_back(static_cast<std::size_t>(bytes));
    return std::span<std::byte>(memory.back());
  };
  memory.reserve(64);  // the spans given out stay valid
  std::vector<std::unique_ptr<checked_sink>> sinks;
  std::vector<tensor_sink*> outs;
  for (std::size_t g = 0; g < groups[0].size(); ++g) {
    sinks.push_back(std::make_unique<checked_sink>(allocate, pl.targets[groups[0][g]].rank, g == 2 ? 20 : 0));
    outs.push_back(sinks.back().get());
  }
  try {
    run.run_targets(groups[0], outs, 3);
    ADD_FAILURE() << "a failing sink did not fail the run";
  } catch (const reshard::error& e) {
    EXPECT_STREQ(e.what(), "checked_sink: append 20 fails");
  }
}
