// Tests of reshard/io/transform.hpp: strategies as layouts, the copy core (chunks and runs) as a
// property, whole scenarios cross-checked by verify/python/ms_scenario.py (independent numpy
// slicing, protobuf's own parser), every bad input (one error naming file, parameter and reason;
// inputs unchanged; no output left), atomic and forced outputs, and bounded memory.
#include <reshard/io/transform.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace reshard::io;
using namespace reshard_test;
using reshard::box;
using reshard::index_list;
using reshard::index_t;

namespace {

// ---------------------------------------------------------------------------------------------
// a small scenario builder (the library's own slicing: for error cases and properties; the
// values themselves are cross-checked against Python below)

param_layout stored(std::vector<std::int64_t> dev, std::vector<std::vector<std::int64_t>> map, std::int32_t step = 0,
                    std::int32_t size = 0, std::vector<std::int64_t> split = {}) {
  param_layout l;
  l.dev_matrix = std::move(dev);
  l.tuple_form = std::any_of(map.begin(), map.end(), [](const auto& e) { return e.size() > 1; });
  l.tensor_map = std::move(map);
  l.opt_weight_shard_step = step;
  l.opt_weight_shard_size = size;
  l.param_split_shape = std::move(split);
  return l;
}

struct tparam {
  std::string name;
  dtype type = dtype::float32;
  index_list shape;
  std::optional<param_layout> src, dst;
};

// Byte k of element `index` of parameter `id`: position-specific, so any misplaced byte shows.
std::byte pattern(std::size_t id, index_t index, std::size_t k) {
  return static_cast<std::byte>((static_cast<std::uint64_t>(index) * 131 + id * 29 + k * 7 + 3) & 0xFF);
}

std::vector<std::byte> box_bytes(std::size_t id, const index_list& shape, const box& b, std::size_t elem) {
  std::vector<std::byte> out;
  const std::size_t n = shape.size();
  std::vector<index_t> idx(n, 0);
  const index_t count = reshard::volume(b);
  for (index_t e = 0; e < count; ++e) {
    index_t global = 0;
    for (std::size_t i = 0; i < n; ++i) global = global * shape[i] + b.offset[i] + idx[i];
    for (std::size_t k = 0; k < elem; ++k) out.push_back(pattern(id, global, k));
    for (std::size_t i = n; i-- > 0;) {
      if (++idx[i] < b.extent[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

struct scenario_options {
  bool crc = false;
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;  // pieces of the source files
  bool absent = true;                            // learning_rate, global_step
  bool rotate = false;  // rank r's file lists the parameters from the (r mod count)th on; odd ranks the unlisted first
};

// Writes dir/src_strategy.ckpt, dir/dst_strategy.ckpt (when any parameter has one) and
// dir/src/rank_<r>/net.ckpt for M source ranks.
void write_scenario(const fs::path& dir, const std::vector<tparam>& params, index_t M, scenario_options o = {}) {
  strategy_file s, d;
  s.nodes.push_back({"MatMul-op0", {0, {{1}}}});
  d.nodes = s.nodes;
  for (const auto& p : params) {
    if (p.src) s.layouts.emplace_back(p.name, *p.src);
    if (p.dst) d.layouts.emplace_back(p.name, *p.dst);
  }
  if (!s.layouts.empty()) write_strategy(dir / "src_strategy.ckpt", s);
  if (!d.layouts.empty()) write_strategy(dir / "dst_strategy.ckpt", d);
  for (index_t r = 0; r < M; ++r) {
    const fs::path rd = dir / "src" / ("rank_" + std::to_string(r));
    fs::create_directories(rd);
    ckpt_writer w(rd / "net.ckpt", {.crc = o.crc, .chunk_bytes = o.chunk_bytes});
    const auto write_absent = [&] {
      const float lr = 0.5f + static_cast<float>(r);
      w.write("learning_rate", dtype::float32, {}, std::as_bytes(std::span(&lr, 1)));
      const std::int64_t step = 100 + r;
      const std::vector<std::int64_t> one{1};
      w.write("global_step", dtype::int64, one, std::as_bytes(std::span(&step, 1)));
    };
    if (o.absent && o.rotate && r % 2 == 1) write_absent();
    for (std::size_t k = 0; k < params.size(); ++k) {
      const std::size_t i = o.rotate ? (k + static_cast<std::size_t>(r)) % params.size() : k;
      const auto& p = params[i];
      box b{index_list(p.shape.size(), 0), p.shape};
      if (p.src) {
        param_layout l = *p.src;  // slice even by layouts the transform refuses
        l.field = 0;
        l.indices_offset.clear();
        b = reshard::box_of(to_layout(l, p.shape, 0, p.name), r);
      }
      w.write(p.name, p.type, b.extent.to_vector(), box_bytes(i, p.shape, b, element_size(p.type)));
    }
    if (o.absent && !(o.rotate && r % 2 == 1)) write_absent();
    w.commit();
  }
}

// The tutorial's 8 -> 4 with optimizer sharding, plus a bias, on small shapes.
std::vector<tparam> tutorial() {
  return {
      {"w", dtype::float32, {16, 8}, stored({2, 1, 2, 2}, {{2}, {1}}), stored({2, 2, 1}, {{1}, {0}}, 2, 2)},
      {"b", dtype::float16, {8}, stored({2, 1, 2, 2}, {{0}}), stored({2, 2, 1}, {{-1}})},
      {"t", dtype::int32, {8, 4}, stored({2, 1, 2, 2}, {{3, 1}, {-1}}), stored({2, 2, 1}, {{-1}, {1}})},
  };
}

// Checks every target file of `params` against the pattern, and the unlisted parameters.
void expect_outputs(const fs::path& out, const std::vector<tparam>& params, index_t M, index_t N,
                    checkpoint_format fmt = checkpoint_format::ckpt) {
  for (index_t t = 0; t < N; ++t) {
    const fs::path f = out / ("rank_" + std::to_string(t)) /
                       ("checkpoint_" + std::to_string(t) + std::string(extension_of(fmt)));
    ASSERT_TRUE(fs::exists(f)) << f;
    checkpoint_reader rd(f);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      const box b = p.dst ? reshard::box_of(to_layout(*p.dst, p.shape, 0, p.name), t)
                          : box{index_list(p.shape.size(), 0), p.shape};
      const tensor_ref* e = rd.find(p.name);
      ASSERT_TRUE(e) << f << " lacks " << p.name;
      EXPECT_EQ(e->type, p.type) << p.name;
      EXPECT_EQ(e->dims, b.extent.to_vector()) << p.name << " in " << f;
      std::vector<std::byte> got(e->content_size());
      std::size_t at = 0;
      for (auto piece : e->pieces) std::memcpy(got.data() + at, piece.data(), piece.size()), at += piece.size();
      EXPECT_TRUE(got == box_bytes(i, p.shape, b, element_size(p.type))) << p.name << " in " << f;
    }
    const tensor_ref* lr = rd.find("learning_rate");
    ASSERT_TRUE(lr);
    float v = 0;
    std::memcpy(&v, lr->pieces[0].data(), 4);
    EXPECT_EQ(v, 0.5f + static_cast<float>(t % M)) << "learning_rate of target " << t << " comes from rank t % M";
  }
}

// Content digest of every file under `dir` (path -> crc32, size), to prove inputs unchanged.
std::map<std::string, std::pair<std::uint32_t, std::uint64_t>> digest(const fs::path& dir) {
  std::map<std::string, std::pair<std::uint32_t, std::uint64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const auto bytes = read_bytes(e.path());
    out[e.path().string()] = {crc32(bytes), bytes.size()};
  }
  return out;
}

// Every file under `dir` (empty if it does not exist).
std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (!e.is_directory()) out.push_back(e.path().string());
  return out;
}

// Runs a failing transform of dir/src into dir/out: the error message contains every part,
// the inputs are unchanged, and nothing is left under dir/out.
template <class F>
void expect_clean_failure(const temp_dir& dir, F&& run, std::initializer_list<std::string_view> parts) {
  const auto before = digest(dir.path());
  EXPECT_TRUE(throws_error(run, parts));
  const auto after_all = digest(dir.path());
  std::map<std::string, std::pair<std::uint32_t, std::uint64_t>> after;
  for (const auto& [k, v] : after_all)
    if (k.find((dir / "out").string()) != 0) after.emplace(k, v);
  EXPECT_EQ(before, after) << "an input changed";
  EXPECT_EQ(files_under(dir / "out"), std::vector<std::string>{}) << "an output was left";
}

transform_summary transform_dir(const temp_dir& dir, const transform_options& o = {}) {
  return transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "src_strategy.ckpt",
                               dir / "dst_strategy.ckpt", o);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// strategies as layouts

TEST(transform_layout, to_layout_is_mindspore_layout) {
  const auto l = to_layout(stored({2, 4}, {{1}, {-1}}), {8, 4}, 0, "w");
  EXPECT_EQ(l, reshard::mindspore_layout({2, 4}, {1, -1}, {8, 4}));
  const auto t = to_layout(stored({4, 2, 2}, {{2, 1}, {0}}), {8, 8}, 1, "t");
  EXPECT_EQ(t, reshard::mindspore_layout({4, 2, 2}, {{2, 1}, 0}, {8, 8}, {.stage = 1}));
  EXPECT_EQ(t.first_rank, 16);
  const auto o = to_layout(stored({4, 2}, {{-1}, {0}}, 2, 4), {8, 4}, 0, "m");
  EXPECT_EQ(reshard::box_of(o, 2), (box{{2, 0}, {2, 2}}));  // mindspore.md: rows 2*((r//2)%4)
}

TEST(transform_layout, full_shape_from_slice) {
  EXPECT_EQ(full_shape_from_slice(stored({2, 4}, {{1}, {-1}}), std::vector<std::int64_t>{4, 4}, "w"), (index_list{8, 4}));
  EXPECT_EQ(full_shape_from_slice(stored({4, 2}, {{-1}, {0}}, 2, 4), std::vector<std::int64_t>{2, 2}, "m"),
            (index_list{8, 4}));
  EXPECT_EQ(full_shape_from_slice(stored({8}, {{-1}, {-1}}, 1, -1), std::vector<std::int64_t>{2, 2}, "n"),
            (index_list{16, 2}));
  EXPECT_EQ(full_shape_from_slice(stored({4, 2, 2}, {{2, 1}, {0}}), std::vector<std::int64_t>{1, 4}, "t"),
            (index_list{8, 8}));
  EXPECT_EQ(full_shape_from_slice(stored({2}, {{0}, {-1}}, 0, 0, {3, 5}), std::vector<std::int64_t>{5, 4}, "e"),
            (index_list{8, 4}));
}

TEST(transform_layout, unsupported_parts_are_named) {
  auto f = stored({2}, {{0}, {-1}}, 0, 0, {3, 5});
  f.field = 1;
  EXPECT_TRUE(throws_error([&] { to_layout(f, {8, 4}, 0, "strategy: s.ckpt: parameter 'emb'"); },
                           {"s.ckpt", "'emb'", "field 1", "not supported"}));
  auto o = stored({2}, {{0}, {-1}}, 0, 0, {3, 5});
  o.indices_offset = {0, 4};
  EXPECT_TRUE(throws_error([&] { to_layout(o, {8, 4}, 0, "p"); }, {"indices_offset [0,4] is not supported"}));
  o.indices_offset = {0, 3};  // MindSpore's: the start rows of param_split_shape
  EXPECT_EQ(reshard::box_of(to_layout(o, {8, 4}, 0, "p"), 1), (box{{3, 0}, {5, 4}}));
  EXPECT_TRUE(throws_error([&] { to_layout(stored({2, 4}, {{1}}), {8, 4}, 0, "p"); },
                           {"tensor_map has 1 entries but the tensor has 2 dims"}));
}

TEST(transform_layout, strategy_layouts_reads_pipelines) {
  strategy_file s;
  s.layouts = {{"0-embedding", stored({2, 2}, {{1}, {-1}})},
               {"1-embedding", stored({4}, {{0}, {-1}})},
               {"1-layer-1.w", stored({2, 2}, {{0}, {1}})}};
  const strategy_layouts sl(s, "merged.ckpt");
  EXPECT_TRUE(sl.pipeline());
  EXPECT_EQ(sl.stages(), 2);
  EXPECT_EQ(sl.stage_ranks(), 4);
  EXPECT_EQ(sl.ranks(), 8);
  EXPECT_EQ(sl.names(), (std::vector<std::string>{"embedding", "layer-1.w"}));
  ASSERT_TRUE(sl.find("embedding"));
  EXPECT_EQ(sl.find("embedding")->size(), 2u);
  EXPECT_EQ(sl.find("layer-1.w")->front().stage, 1u);
  // names with "-" in a plain strategy are names, not stages
  strategy_file p;
  p.layouts = {{"layer-1.w", stored({2}, {{0}})}, {"0-x", stored({2}, {{0}})}};
  const strategy_layouts pl(p, "plain.ckpt");
  EXPECT_FALSE(pl.pipeline());
  EXPECT_TRUE(pl.find("0-x"));
  // every layout of a strategy covers the devices of one stage
  strategy_file bad;
  bad.layouts = {{"a", stored({2, 4}, {{1}})}, {"b", stored({4}, {{0}})}};
  EXPECT_TRUE(throws_error([&] { strategy_layouts(bad, "bad.ckpt"); },
                           {"bad.ckpt", "'b'", "4 devices", "'a' has 8"}));
  EXPECT_FALSE(strategy_layouts().present());
  EXPECT_EQ(strategy_layouts().ranks(), 1);
}

// ---------------------------------------------------------------------------------------------
// the copy core: any box from any row-major slice, assembled in chunks, through pieces

RC_GTEST_PROP(transform_core, chunks_and_runs_copy_any_box, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(0, 4);
  index_list shape;
  for (std::size_t i = 0; i < n; ++i) shape.push_back(*rc::gen::inRange<index_t>(1, 6));
  const auto sub = [&] {
    box b{index_list(n, 0), index_list(n, 0)};
    for (std::size_t i = 0; i < n; ++i) {
      b.offset[i] = *rc::gen::inRange<index_t>(0, shape[i]);
      b.extent[i] = *rc::gen::inRange<index_t>(1, shape[i] - b.offset[i] + 1);
    }
    return b;
  };
  const box sb = sub(), db = sub();
  const std::size_t elem = *rc::gen::element<std::size_t>(1, 2, 4);
  const box in = reshard::intersect(sb, db);
  const auto src = box_bytes(0, shape, sb, elem);
  // the source content in random pieces
  std::vector<std::span<const std::byte>> pieces;
  std::vector<std::uint64_t> starts;
  for (std::size_t at = 0; at < src.size();) {
    const std::size_t len = std::min(src.size() - at, *rc::gen::inRange<std::size_t>(1, 40));
    starts.push_back(at);
    pieces.push_back(std::span(src).subspan(at, len));
    at += len;
  }
  const std::uint64_t limit = *rc::gen::inRange<std::uint64_t>(1, 200);
  std::vector<std::byte> dst;
  std::vector<std::byte> chunk;
  const std::byte blank{0xEE};
  detail::for_each_chunk(db.extent, elem, limit, [&](const box& local) {
    box c = local;
    for (std::size_t i = 0; i < n; ++i) c.offset[i] += db.offset[i];
    chunk.assign(static_cast<std::size_t>(reshard::volume(c)) * elem, blank);
    const box part = reshard::intersect(in, c);
    if (reshard::volume(part) > 0) {
      // as the engine does: a copy job (convert.hpp) whose runs are resolved through the pieces
      const std::byte* base = src.data();
      const auto j = reshard::detail::make_copy_job(base, sb, chunk.data(), c, part, elem);
      reshard::detail::for_each_run(j, [&](const std::byte* from, std::byte* to, std::size_t len) {
        RC_ASSERT(to >= chunk.data() && to + len <= chunk.data() + chunk.size());
        detail::copy_from_pieces(pieces, starts, static_cast<std::uint64_t>(from - base), to, len);
      });
    }
    dst.insert(dst.end(), chunk.begin(), chunk.end());
  });
  RC_ASSERT(dst.size() == static_cast<std::size_t>(reshard::volume(db)) * elem);
  // every element of db: the pattern where sb holds it, blank elsewhere
  const auto want_in = box_bytes(0, shape, db, elem);
  std::vector<index_t> idx(n, 0);
  for (index_t e = 0; e < reshard::volume(db); ++e) {
    bool inside = true;
    for (std::size_t i = 0; i < n; ++i) {
      const index_t g = db.offset[i] + idx[i];
      inside = inside && g >= sb.offset[i] && g < sb.offset[i] + sb.extent[i];
    }
    for (std::size_t k = 0; k < elem; ++k) {
      const std::size_t at = static_cast<std::size_t>(e) * elem + k;
      RC_ASSERT(dst[at] == (inside ? want_in[at] : blank));
    }
    for (std::size_t i = n; i-- > 0;) {
      if (++idx[i] < db.extent[i]) break;
      idx[i] = 0;
    }
  }
}

// The runs of one copy job: in order in both buffers, covering the box once; a job without
// outer dims is exactly one run (the engine's write-from-the-mapping case).
RC_GTEST_PROP(transform_core, copy_job_runs_cover_the_box_in_order, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(0, 4);
  box held{index_list(n, 0), index_list(n, 0)}, b{index_list(n, 0), index_list(n, 0)};
  for (std::size_t i = 0; i < n; ++i) {
    held.offset[i] = *rc::gen::inRange<index_t>(0, 3);
    held.extent[i] = *rc::gen::inRange<index_t>(1, 4);
    const index_t lo = *rc::gen::inRange<index_t>(0, held.extent[i]);
    b.offset[i] = held.offset[i] + lo;
    b.extent[i] = *rc::gen::inRange<index_t>(1, held.extent[i] - lo + 1);
  }
  std::vector<std::byte> src(static_cast<std::size_t>(reshard::volume(held))), dst(static_cast<std::size_t>(reshard::volume(b)));
  const auto j = reshard::detail::make_copy_job(src.data(), held, dst.data(), b, b, 1);
  std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> runs;
  std::size_t total = 0;
  reshard::detail::for_each_run(j, [&](const std::byte* from, std::byte* to, std::size_t len) {
    runs.push_back({from - src.data(), to - dst.data()});
    total += len;
  });
  RC_ASSERT(total == dst.size());
  for (std::size_t k = 1; k < runs.size(); ++k) RC_ASSERT(runs[k - 1].first < runs[k].first && runs[k - 1].second < runs[k].second);
  RC_ASSERT((j.dims == 0) == (runs.size() == 1));
  RC_ASSERT(reshard::detail::source_span(j) == static_cast<std::size_t>(runs.back().first - runs.front().first) + j.run);
}

TEST(transform_core, chunks_are_contiguous_and_bounded) {
  std::vector<box> chunks;
  detail::for_each_chunk({4, 3, 5}, 4, 40, [&](const box& b) { chunks.push_back(b); });  // a row is 20 bytes
  ASSERT_EQ(chunks.size(), 8u);  // dim 1 in blocks of 2 rows: [0:2] [2:3] per index of dim 0
  EXPECT_EQ(chunks[0], (box{{0, 0, 0}, {1, 2, 5}}));
  EXPECT_EQ(chunks[1], (box{{0, 2, 0}, {1, 1, 5}}));
  EXPECT_EQ(chunks[7], (box{{3, 2, 0}, {1, 1, 5}}));
  chunks.clear();
  detail::for_each_chunk({4, 3, 5}, 4, 1 << 20, [&](const box& b) { chunks.push_back(b); });
  EXPECT_EQ(chunks, (std::vector<box>{box{{0, 0, 0}, {4, 3, 5}}}));
  chunks.clear();
  detail::for_each_chunk({}, 8, 1, [&](const box& b) { chunks.push_back(b); });
  EXPECT_EQ(chunks.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// whole scenarios against the Python reference (numpy slicing, protobuf's parser)

namespace {

struct py_scenario {
  temp_dir dir;
  nlohmann::json meta;
  explicit py_scenario(const std::string& name) {
    auto r = run_python("ms_scenario.py", {"gen", name, dir.path().string()});
    EXPECT_EQ(r.status, 0) << r.output;
    std::ifstream in(dir / "scenario.json");
    meta = nlohmann::json::parse(in);
  }
  fs::path path(const char* key) const {
    return meta[key].is_null() ? fs::path() : dir / meta[key].get<std::string>();
  }
  void check(const fs::path& out) const {
    auto r = run_python("ms_scenario.py", {"check", dir.path().string(), out.string()});
    EXPECT_EQ(r.status, 0) << r.output;
  }
};

}  // namespace

TEST(transform_python, retrain_8to4_in_parallel_tiny_buffers_and_pieces) {
  // sources with CRC trailers and a multi-piece tensor; 3 workers, 64-byte buffers (many chunks),
  // 24-byte pieces in the outputs
  py_scenario s("retrain_8to4");
  std::vector<transform_progress> seen;
  transform_options o{.jobs = 3, .crc = true, .buffer_bytes = 64, .chunk_bytes = 24};
  o.progress = [&](const transform_progress& p) { seen.push_back(p); };
  const auto sum = transform_checkpoints(s.path("src_dir"), s.dir / "out", "checkpoint_", s.path("src_strategy"),
                                         s.path("dst_strategy"), o);
  s.check(s.dir / "out");
  EXPECT_EQ(sum.files, 4u);
  EXPECT_EQ(sum.outputs.size(), 4u);
  ASSERT_FALSE(seen.empty());
  for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
  EXPECT_EQ(seen.back().files_done, 4u);
  checkpoint_reader rd(s.dir / "out" / "rank_0" / "checkpoint_0.ckpt");
  EXPECT_TRUE(rd.has_crc());
  EXPECT_NO_THROW(rd.verify_crc());
  EXPECT_GT(rd.find("layer1.weight")->pieces.size(), 1u);
}

TEST(transform_python, by_rank_with_only_the_rank_list) {
  py_scenario s("uneven_8to3");
  const strategy_layouts src(s.path("src_strategy")), dst(s.path("dst_strategy"));
  for (index_t t = 0; t < 3; ++t) {
    const auto ranks = rank_list_for_transform(t, s.path("src_strategy"), s.path("dst_strategy"));
    std::map<std::int64_t, fs::path> files;
    for (auto r : ranks) files.emplace(r, s.dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
    const fs::path out = s.dir / "out" / ("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt");
    const auto sum =
        transform_checkpoint_by_rank(t, files, out, s.path("src_strategy"), s.path("dst_strategy"), {.buffer_bytes = 16});
    EXPECT_EQ(sum.source_files, ranks.size()) << "target " << t << " read exactly its rank list";
  }
  s.check(s.dir / "out");
}

TEST(transform_load, a_wrong_allocation_or_a_throwing_allocator_is_an_error_and_writes_nothing) {
  py_scenario s("uneven_8to3");
  std::map<std::int64_t, fs::path> files;
  for (auto r : rank_list_for_transform(1, s.path("src_strategy"), s.path("dst_strategy")))
    files.emplace(r, s.dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
  const auto before = reshard_test::list_tree(s.dir.path());
  std::vector<std::byte> small(3);
  try {
    load_checkpoint_by_rank(1, files, s.path("src_strategy"), s.path("dst_strategy"),
                            [&](index_t, std::string_view, dtype, std::span<const std::int64_t>, std::uint64_t) {
                              return std::span<std::byte>(small);
                            });
    FAIL() << "a 3-byte allocation was accepted";
  } catch (const reshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("load_checkpoint_by_rank"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the allocator returned 3 bytes"), std::string::npos) << e.what();
  }
  try {
    load_checkpoint_by_rank(1, files, s.path("src_strategy"), s.path("dst_strategy"),
                            [&](index_t, std::string_view, dtype, std::span<const std::int64_t>,
                                std::uint64_t) -> std::span<std::byte> { throw std::runtime_error("stop"); });
    FAIL() << "the allocator's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stop");
  }
  EXPECT_EQ(reshard_test::list_tree(s.dir.path()), before) << "a load writes nothing";
}

TEST(transform_memory_budget, fits_jobs_and_buffers_and_refuses_a_budget_too_small) {
  py_scenario s("retrain_8to4");
  const auto run = [&](const char* out, transform_options o) {
    return transform_checkpoints(s.path("src_dir"), s.dir / out, "checkpoint_", s.path("src_strategy"),
                                 s.path("dst_strategy"), o);
  };
  const auto free_run = run("free", {.jobs = 2});
  EXPECT_EQ(free_run.max_memory, 0u);
  EXPECT_EQ(free_run.buffer_bytes, std::uint64_t{4} << 20);
  // a budget just above what the process holds: one job, a buffer below the default, same files
  const std::uint64_t held = current_rss_bytes();
  ASSERT_GT(held, 0u);
  const std::uint64_t budget = held + (std::uint64_t{8} << 20);
  const auto tight = run("tight", {.jobs = 2, .max_memory = budget});
  EXPECT_EQ(tight.max_memory, budget);
  EXPECT_LT(tight.buffer_bytes, std::uint64_t{4} << 20);
  EXPECT_GE(tight.buffer_bytes, std::uint64_t{64} << 10);
  EXPECT_EQ(tight.jobs, 1u) << "8 MiB beside the process fit one job (a job needs 5.4 MiB at least)";
  s.check(s.dir / "tight");
  for (index_t t = 0; t < 4; ++t) {
    const fs::path f = fs::path("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt");
    EXPECT_EQ(reshard_test::read_bytes(s.dir / "tight" / f), reshard_test::read_bytes(s.dir / "free" / f)) << f;
  }
  // below what the process holds: an error naming the budget, before anything is written
  try {
    run("none", {.max_memory = std::uint64_t{1} << 20});
    FAIL() << "a 1 MiB budget was accepted";
  } catch (const reshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("max_memory 1 MiB is too small"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(s.dir / "none"));
  // mapped reads are not bounded by the engine: refused with a budget
  try {
    run("mapped", {.reads = read_mode::mmap, .max_memory = std::uint64_t{1} << 30});
    FAIL() << "max_memory with read_mode mmap was accepted";
  } catch (const reshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("max_memory cannot be kept with read_mode mmap"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(s.dir / "mapped"));
}

TEST(transform_python, pipeline_merged_then_transformed) {
  py_scenario s("pipeline_to4");
  merge_pipeline_strategies(s.dir / "stages", s.dir / "merged_strategy.ckpt");
  transform_checkpoints(s.path("src_dir"), s.dir / "out", "checkpoint_", s.dir / "merged_strategy.ckpt",
                        s.path("dst_strategy"), {.jobs = 2});
  s.check(s.dir / "out");
}

TEST(transform_python, to_a_pipeline) {
  py_scenario s("to_pipeline");  // a target rank gets only its stage's parameters
  transform_checkpoints(s.path("src_dir"), s.dir / "out", "checkpoint_", s.path("src_strategy"), s.path("dst_strategy"),
                        {.jobs = 2});
  s.check(s.dir / "out");
  const strategy_layouts dst(s.path("dst_strategy"));
  EXPECT_TRUE(dst.pipeline());
  EXPECT_EQ(dst.stages(), 2);
}

TEST(transform_python, safetensors_in_and_out) {
  py_scenario s("six_to_4");  // safetensors sources, a JSON source strategy
  s.meta["format"] = "safetensors";
  std::ofstream(s.dir / "scenario.json") << s.meta.dump();
  transform_checkpoints(s.path("src_dir"), s.dir / "out", "checkpoint_", s.path("src_strategy"), s.path("dst_strategy"),
                        {.format = checkpoint_format::safetensors});
  s.check(s.dir / "out");
}

TEST(transform_python, merge_and_split) {
  py_scenario m("merge_8");
  merge_checkpoints(m.path("src_dir"), m.dir / "merged.ckpt", m.path("src_strategy"));
  m.check(m.dir / "merged.ckpt");
  py_scenario s("split_4");
  split_checkpoint(s.path("checkpoint"), s.dir / "out", s.path("dst_strategy"));
  s.check(s.dir / "out");
}

// ---------------------------------------------------------------------------------------------
// the engine's choices

TEST(transform, rank_list_is_reshard_rank_list_per_parameter) {
  temp_dir dir;
  const auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  for (index_t t = 0; t < 4; ++t) {
    // the senders to t of each parameter's plan under the transforms' replica policy (the
    // nearest replica), and t's own file
    std::set<index_t> want{t % 8};
    for (const auto& p : params) {
      const reshard::rank_planner rp(to_layout(*p.src, p.shape, 0, p.name), to_layout(*p.dst, p.shape, 0, p.name),
                                     reshard::partition::mode::arithmetic, transform_replica_policy);
      std::vector<reshard::transfer> xs;
      rp.receives(t, xs);
      for (const auto& x : xs) want.insert(x.src);
    }
    const auto got = rank_list_for_transform(t, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt");
    EXPECT_EQ(got, std::vector<std::int64_t>(want.begin(), want.end())) << "target " << t;
  }
  // no target strategy: everything to one rank, which needs a replica of every region: 'w' by
  // column halves {0,1,4,5} {2,3,6,7}, 'b' by halves {0,2,4,6} {1,3,5,7}, 't' by rows {0,1}
  // {2,3} {4,5} {6,7}; rank 0 holds one of each kind, the first owner gives the rest
  EXPECT_EQ(rank_list_for_transform(0, dir / "src_strategy.ckpt", fs::path()),
            (std::vector<std::int64_t>{0, 1, 2, 4, 6}));
  EXPECT_EQ(rank_list_for_transform(0, fs::path(), fs::path()), (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(throws_error([&] { rank_list_for_transform(4, dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt"); },
                           {"target rank 4 is not a rank of the target strategy", "which has 4 ranks"}));
}

TEST(transform, multi_piece_sources_and_outputs_give_the_same_tensors) {
  temp_dir one, many;
  const auto params = tutorial();
  write_scenario(one.path(), params, 8);
  write_scenario(many.path(), params, 8, {.crc = true, .chunk_bytes = 12});  // pieces cut inside rows
  checkpoint_reader rd(many / "src" / "rank_0" / "net.ckpt");
  ASSERT_GT(rd.find("w")->pieces.size(), 5u);
  transform_dir(one);
  transform_dir(many, {.buffer_bytes = 40, .chunk_bytes = 7});
  expect_outputs(many / "out", params, 8, 4);
  for (index_t t = 0; t < 4; ++t) {
    checkpoint_reader a(one / "out" / ("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt"));
    checkpoint_reader b(many / "out" / ("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt"));
    for (const auto& e : a.entries()) {
      const auto* f = b.find(e.name);
      ASSERT_TRUE(f);
      std::vector<std::byte> x, y;
      for (auto p : e.pieces) x.insert(x.end(), p.begin(), p.end());
      for (auto p : f->pieces) y.insert(y.end(), p.begin(), p.end());
      EXPECT_TRUE(x == y) << e.name;
    }
  }
}

TEST(transform, any_m_to_any_n) {
  // 6 -> 4, 4 -> 8, 8 -> 3, 5 -> 2 (uneven by param_split_shape), 1 -> 7
  struct pair {
    index_t m, n;
    std::vector<tparam> params;
  };
  const std::vector<pair> cases{
      {6, 4, {{"a", dtype::float32, {12, 6}, stored({3, 2}, {{1}, {0}}), stored({2, 2}, {{1}, {0}})}}},
      {4, 8, {{"a", dtype::int8, {8, 4}, stored({4}, {{0}, {-1}}), stored({2, 4}, {{-1}, {1}}, 1, -1)}}},
      {8, 3, {{"a", dtype::float64, {24, 5}, stored({2, 4}, {{1}, {-1}}, 1, 4), stored({3}, {{0}, {-1}})}}},
      {5, 2, {{"a", dtype::uint16, {7, 10}, stored({5}, {{-1}, {0}}), stored({2}, {{0}, {-1}}, 0, 0, {4, 3})}}},
      {1, 7, {{"a", dtype::float32, {14, 3}, std::nullopt, stored({7}, {{0}, {-1}})}}},
  };
  for (const auto& c : cases) {
    temp_dir dir;
    write_scenario(dir.path(), c.params, c.m);
    transform_checkpoints(dir / "src", dir / "out", "checkpoint_", c.params[0].src ? dir / "src_strategy.ckpt" : fs::path(),
                          dir / "dst_strategy.ckpt", {.jobs = 2});
    expect_outputs(dir / "out", c.params, c.m, c.n);
  }
}

TEST(transform, unlisted_parameters_are_copied_byte_exact_from_rank_t_mod_m) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  transform_dir(dir);
  for (index_t t = 0; t < 4; ++t) {
    ckpt_file src(dir / "src" / ("rank_" + std::to_string(t % 8)) / "net.ckpt");
    ckpt_file out(dir / "out" / ("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt"));
    for (const char* name : {"learning_rate", "global_step"}) {
      const auto &a = src.at(name), &b = out.at(name);
      ASSERT_EQ(a.values.size(), b.values.size());
      for (std::size_t i = 0; i < a.values.size(); ++i)
        EXPECT_TRUE(std::equal(a.values[i].begin(), a.values[i].end(), b.values[i].begin(), b.values[i].end())) << name;
    }
  }
}

// for_each_item matches each entry of a base file to its parameter by the previous base file's
// match at the same index: files listing their tensors in other orders (and the unlisted ones
// at other places) must still give every target its tensors, in its base file's order.
TEST(transform, rank_files_listing_their_tensors_in_other_orders) {
  temp_dir dir;
  const auto params = tutorial();
  write_scenario(dir.path(), params, 8, {.rotate = true});
  transform_dir(dir);
  expect_outputs(dir / "out", params, 8, 4);
  for (index_t t = 0; t < 4; ++t) {
    checkpoint_reader src(dir / "src" / ("rank_" + std::to_string(t)) / "net.ckpt");
    checkpoint_reader out(dir / "out" / ("rank_" + std::to_string(t)) / ("checkpoint_" + std::to_string(t) + ".ckpt"));
    std::vector<std::string> want, got;
    for (const auto& e : src.entries()) want.emplace_back(e.name);
    for (const auto& e : out.entries()) got.emplace_back(e.name);
    EXPECT_EQ(got, want) << "target " << t << " in its base file's order";
  }
}

TEST(transform, a_parameter_the_target_strategy_omits_is_written_whole) {
  temp_dir dir;
  auto params = tutorial();
  params[0].dst.reset();  // "w": split in the source, not in the target strategy
  write_scenario(dir.path(), params, 8);
  transform_dir(dir);
  expect_outputs(dir / "out", params, 8, 4);
}

TEST(transform, convert_between_formats) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 1, {});  // one rank holding full tensors (layouts unused)
  const fs::path ck = dir / "src" / "rank_0" / "net.ckpt";
  convert_checkpoint(ck, dir / "x.safetensors");
  convert_checkpoint(dir / "x.safetensors", dir / "y.ckpt");
  checkpoint_reader a(ck), b(dir / "x.safetensors"), c(dir / "y.ckpt");
  ASSERT_EQ(a.entries().size(), c.entries().size());
  for (const auto& e : a.entries()) {
    for (const checkpoint_reader* r : {&b, &c}) {
      const auto* f = r->find(e.name);
      ASSERT_TRUE(f) << e.name;
      EXPECT_EQ(f->type, e.type);
      EXPECT_EQ(f->dims, e.dims);
      EXPECT_TRUE(std::equal(e.pieces[0].begin(), e.pieces[0].end(), f->pieces[0].begin(), f->pieces[0].end()));
    }
  }
  EXPECT_EQ(safetensors_file(dir / "x.safetensors").metadata().at("format"), "ms");
}

TEST(transform, warnings_say_what_was_not_done) {
  temp_dir dir;
  auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  fs::create_directories(dir / "src" / "rank_8");  // beyond the source strategy
  strategy_file d = read_strategy(dir / "dst_strategy.ckpt");
  d.layouts.emplace_back("new_param", stored({2, 2, 1}, {{0}}));  // a parameter no source has
  write_strategy(dir / "dst_strategy.ckpt", d, true);
  const auto sum = transform_dir(dir);
  ASSERT_EQ(sum.warnings.size(), 2u);
  EXPECT_NE(sum.warnings[0].find("rank_8 and above are not read"), std::string::npos) << sum.warnings[0];
  EXPECT_NE(sum.warnings[1].find("'new_param'"), std::string::npos) << sum.warnings[1];
  EXPECT_NE(sum.warnings[1].find("not written"), std::string::npos) << sum.warnings[1];
}

// ---------------------------------------------------------------------------------------------
// outputs: never overwritten without force, atomic, cleaned up after a failure

TEST(transform_outputs, existing_outputs_need_force) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  fs::create_directories(dir / "out" / "rank_2");
  write_text(dir / "out" / "rank_2" / "checkpoint_2.ckpt", "precious");
  const auto before = digest(dir.path());
  EXPECT_TRUE(throws_error([&] { transform_dir(dir); }, {"checkpoint_2.ckpt exists", "force"}));
  EXPECT_EQ(digest(dir.path()), before);
  EXPECT_FALSE(fs::exists(dir / "out" / "rank_0")) << "nothing written before the check";
  transform_dir(dir, {.force = true});
  expect_outputs(dir / "out", tutorial(), 8, 4);
}

TEST(transform_outputs, a_failure_while_writing_leaves_nothing) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  // rank 2's staged file cannot be renamed into place: a non-empty directory holds its name. The
  // staged names are numbered by unique_temp_path's one counter per process, the targets in rank
  // order: after the probe's number n, rank 2's is n + 3.
  const std::string probe = reshard::io::detail::unique_temp_path("x", ".part").filename().string();
  const std::string pid = std::to_string(::getpid());
  const auto n = std::stoull(probe.substr(probe.find(pid + ".") + pid.size() + 1));
  const fs::path blocker =
      dir / "out" / "rank_2" / ("checkpoint_2.ckpt.reshard-" + pid + "." + std::to_string(n + 3) + ".part");
  fs::create_directories(blocker);
  write_text(blocker / "x", "x");
  const auto before = digest(dir / "src");
  EXPECT_TRUE(throws_error([&] { transform_dir(dir, {.jobs = 2}); }, {"checkpoint_2.ckpt"}));
  EXPECT_EQ(digest(dir / "src"), before);
  EXPECT_EQ(files_under(dir / "out"), std::vector<std::string>{(blocker / "x").string()});
  EXPECT_FALSE(fs::exists(dir / "out" / "rank_0")) << "directories the run created are removed";
}

TEST(transform_outputs, sources_are_never_outputs) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 1, {});
  const fs::path f = dir / "src" / "rank_0" / "net.ckpt";
  EXPECT_TRUE(throws_error([&] { convert_checkpoint(f, f, {.force = true}); }, {"is the source file of rank 0"}));
}

// ---------------------------------------------------------------------------------------------
// bad input: one error naming file, parameter and reason; inputs unchanged; no output

TEST(transform_errors, truncated_source) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  const fs::path f = dir / "src" / "rank_3" / "net.ckpt";
  auto bytes = read_bytes(f);
  bytes.resize(bytes.size() - 10);
  write_bytes(f, bytes);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_3/net.ckpt", "global_step", "truncated"});
}

TEST(transform_errors, corrupted_source) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  const fs::path f = dir / "src" / "rank_1" / "net.ckpt";
  auto bytes = read_bytes(f);
  bytes[0] = std::byte{0xFF};  // not a Checkpoint field
  write_bytes(f, bytes);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_1/net.ckpt", "at byte 0"});
}

TEST(transform_errors, crc_mismatch) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8, {.crc = true});
  const fs::path f = dir / "src" / "rank_2" / "net.ckpt";
  std::size_t at = 0;
  {
    ckpt_file c(f);
    at = static_cast<std::size_t>(c.at("w").pieces[0].data() - c.bytes().data()) + 5;
  }
  auto bytes = read_bytes(f);
  bytes[at] ^= std::byte{1};  // inside a tensor's content: parses, CRC disagrees
  write_bytes(f, bytes);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_2/net.ckpt", "CRC mismatch"});
  // the check can be skipped; the flipped byte then flows through
  EXPECT_NO_THROW(transform_dir(dir, {.verify_crc = false}));
}

TEST(transform_errors, unknown_dtype) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  const fs::path f = dir / "src" / "rank_0" / "net.ckpt";
  auto bytes = read_bytes(f);
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto at = text.find("Float16");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = std::byte{'7'};  // "Float76"
  write_bytes(f, bytes);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_0/net.ckpt", "parameter 'b'", "unknown tensor_type 'Float76'"});
}

TEST(transform_errors, dims_disagree_with_the_strategy) {
  temp_dir dir;
  auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  {  // rank 2 (read by targets 0, 1, 2) saved 'w' with another shape
    ckpt_writer w(dir / "src" / "rank_2" / "net.ckpt", {.overwrite = true});
    const std::vector<std::int64_t> dims{8, 8};
    w.write("w", dtype::float32, dims, std::vector<std::byte>(256));
    w.write("b", dtype::float16, std::vector<std::int64_t>{4}, std::vector<std::byte>(8));
    w.write("t", dtype::int32, std::vector<std::int64_t>{2, 4}, std::vector<std::byte>(32));
    w.commit();
  }
  expect_clean_failure(dir, [&] { transform_dir(dir); },
                       {"rank_2/net.ckpt", "parameter 'w'", "dims [8,8] disagree with the source strategy",
                        "gives rank 2 the slice [16,4]"});
}

TEST(transform_errors, missing_rank_directory_and_file) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  fs::remove_all(dir / "src" / "rank_6");
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_6", "missing rank directory", "rank_0 .. rank_7"});
  fs::create_directories(dir / "src" / "rank_6");
  write_text(dir / "src" / "rank_6" / "notes.txt", "no checkpoint here");
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"rank_6", "holds no .ckpt or .safetensors file"});
}

TEST(transform_errors, by_rank_without_a_needed_file) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  std::map<std::int64_t, fs::path> files;
  for (index_t r : {0, 1}) files.emplace(r, dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
  expect_clean_failure(
      dir,
      [&] {
        transform_checkpoint_by_rank(0, files, dir / "out" / "x.ckpt", dir / "src_strategy.ckpt",
                                     dir / "dst_strategy.ckpt");
      },
      {"target rank 0 needs the box", "of parameter 'w'", "source ranks 2,3,6,7", "no file was given"});
  files.emplace(9, dir / "src" / "rank_0" / "net.ckpt");
  expect_clean_failure(
      dir,
      [&] {
        transform_checkpoint_by_rank(0, files, dir / "out" / "x.ckpt", dir / "src_strategy.ckpt",
                                     dir / "dst_strategy.ckpt");
      },
      {"source rank 9", "is not a rank of the source strategy", "which has 8 ranks"});
  expect_clean_failure(
      dir, [&] { transform_checkpoint_by_rank(4, {}, dir / "out" / "x.ckpt", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt"); },
      {"target rank 4 is not a rank of the target strategy"});
}

TEST(transform_errors, strategy_names_a_parameter_the_checkpoint_lacks) {
  temp_dir dir;
  auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  strategy_file s = read_strategy(dir / "src_strategy.ckpt");
  s.layouts.emplace_back("ghost", stored({2, 1, 2, 2}, {{0}}));
  write_strategy(dir / "src_strategy.ckpt", s, true);
  expect_clean_failure(dir, [&] { transform_dir(dir); },
                       {"rank_0/net.ckpt", "parameter 'ghost'", "listed in the source strategy", "missing from this checkpoint"});
}

TEST(transform_errors, mixed_dtypes_across_ranks) {
  temp_dir dir;
  auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  {
    auto p2 = params;
    p2[1].type = dtype::bfloat16;  // 'b' saved as BFloat16 on rank 1
    temp_dir other;
    write_scenario(other.path(), p2, 8);
    fs::copy_file(other / "src" / "rank_1" / "net.ckpt", dir / "src" / "rank_1" / "net.ckpt",
                  fs::copy_options::overwrite_existing);
  }
  expect_clean_failure(dir, [&] { transform_dir(dir); },
                       {"rank_1/net.ckpt", "parameter 'b'", "dtype BFloat16 differs from Float16", "rank_0/net.ckpt",
                        "mixed dtypes"});
}

TEST(transform_errors, unsupported_layouts) {
  temp_dir dir;
  auto params = tutorial();
  params[0].src->field = 2;
  write_scenario(dir.path(), params, 8);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"src_strategy.ckpt", "parameter 'w'", "field 2", "not supported"});
  params[0].src->field = 0;
  params[0].dst->indices_offset = {0, 8};
  temp_dir d2;
  write_scenario(d2.path(), params, 8);
  expect_clean_failure(d2, [&] { transform_dir(d2); },
                       {"dst_strategy.ckpt", "parameter 'w'", "indices_offset [0,8] is not supported"});
}

TEST(transform_errors, target_shape_disagrees) {
  temp_dir dir;
  auto params = tutorial();
  write_scenario(dir.path(), params, 8);
  strategy_file d = read_strategy(dir / "dst_strategy.ckpt");
  for (auto& [name, l] : d.layouts)
    if (name == "w") l.tensor_shape = {16, 16};
  write_strategy(dir / "dst_strategy.json", d);
  expect_clean_failure(
      dir,
      [&] {
        transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "src_strategy.ckpt",
                              dir / "dst_strategy.json");
      },
      {"dst_strategy.json", "parameter 'w'", "tensor_shape [16,16] disagrees with the source's full shape [16,8]"});
  // a target layout that cannot hold the tensor
  strategy_file d2 = read_strategy(dir / "dst_strategy.ckpt");
  for (auto& [name, l] : d2.layouts)
    if (name == "t") l = stored({2, 2, 1}, {{2, 1}, {-1}}, 1, 2);
  write_strategy(dir / "bad_dst.ckpt", d2);
  expect_clean_failure(
      dir,
      [&] { transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "src_strategy.ckpt", dir / "bad_dst.ckpt"); },
      {"bad_dst.ckpt", "parameter 't'", "optimizer sharding size 2 does not divide the replica group size 1"});
  // layouts of one strategy on different device counts
  for (auto& [name, l] : d2.layouts)
    if (name == "t") l = stored({3, 1, 1}, {{2}, {-1}});
  write_strategy(dir / "bad_dst.ckpt", d2, true);
  expect_clean_failure(
      dir,
      [&] { transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "src_strategy.ckpt", dir / "bad_dst.ckpt"); },
      {"bad_dst.ckpt", "parameter 't' has a device matrix of 3 devices", "'w' has 4"});
}

TEST(transform_errors, map_and_str_tensors_cannot_be_sliced_or_go_to_safetensors) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  for (index_t r = 0; r < 8; ++r) {  // add a str tensor to every rank
    const fs::path f = dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt";
    ckpt_file in(f);
    ckpt_writer w(dir / "tmp.ckpt", {.overwrite = true});
    for (const auto& e : in.entries()) w.write_raw(e);
    const char32_t text[] = U"adam";
    w.write("opt_name", dtype::str, std::vector<std::int64_t>{0}, std::as_bytes(std::span(text, 4)));
    w.commit();
    fs::rename(dir / "tmp.ckpt", f);
  }
  // unlisted: copied to ckpt, refused by safetensors
  expect_clean_failure(dir, [&] { transform_dir(dir, {.format = checkpoint_format::safetensors}); },
                       {"rank_0/net.ckpt", "parameter 'opt_name' is a str tensor", "safetensors cannot hold"});
  EXPECT_NO_THROW(transform_dir(dir));
  fs::remove_all(dir / "out");
  // listed in a strategy: refused
  strategy_file s = read_strategy(dir / "src_strategy.ckpt");
  s.layouts.emplace_back("opt_name", stored({2, 1, 2, 2}, {}));
  write_strategy(dir / "src_strategy.ckpt", s, true);
  expect_clean_failure(dir, [&] { transform_dir(dir); }, {"parameter 'opt_name'", "is a str tensor; a strategy cannot slice it"});
}

TEST(transform_errors, bad_strategy_files) {
  temp_dir dir;
  write_scenario(dir.path(), tutorial(), 8);
  write_text(dir / "garbage.ckpt", "\x08\x01\x1a\x05zzzzz");
  expect_clean_failure(
      dir,
      [&] { transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "garbage.ckpt", dir / "dst_strategy.ckpt"); },
      {"garbage.ckpt"});
  expect_clean_failure(
      dir,
      [&] { transform_checkpoints(dir / "src", dir / "out", "checkpoint_", dir / "nope.ckpt", dir / "dst_strategy.ckpt"); },
      {"nope.ckpt", "No such file"});
  expect_clean_failure(
      dir,
      [&] { transform_checkpoints(dir / "nosrc", dir / "out", "checkpoint_", dir / "src_strategy.ckpt", dir / "dst_strategy.ckpt"); },
      {"nosrc", "does not exist"});
}

// ---------------------------------------------------------------------------------------------
// memory: bounded by the buffer, not by the tensors

namespace {

struct rss {
  std::uint64_t now = 0, peak = 0;
};
rss read_rss() {
  std::ifstream in("/proc/self/status");
  rss r;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) r.now = std::stoull(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) r.peak = std::stoull(line.substr(6)) * 1024;
  }
  return r;
}

// Runs fn in a child process; returns the growth of its peak resident memory over its resident
// memory at the start, or -1 on failure.
template <class F>
long long child_peak_growth(F&& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    long long growth = -1;
    try {
      const rss start = read_rss();
      fn();
      growth = static_cast<long long>(read_rss().peak) - static_cast<long long>(start.now);
    } catch (...) {
    }
    [[maybe_unused]] auto n = ::write(fds[1], &growth, sizeof growth);
    ::_exit(0);
  }
  ::close(fds[1]);
  long long growth = -1;
  if (::read(fds[0], &growth, sizeof growth) != sizeof growth) growth = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return growth;
}

}  // namespace

TEST(transform_memory, peak_memory_is_bounded_by_the_buffer) {
  // 8 source ranks of [4096, 512] float32 columns (8 MiB each, 64 MiB in all) -> 4 target ranks
  // of [1024, 4096] rows (16 MiB each): every target row gathers 8 runs of 2 KiB.
  temp_dir dir;
  const index_list shape{4096, 4096};
  const param_layout src = stored({8}, {{-1}, {0}}), dst = stored({4}, {{0}, {-1}});
  strategy_file s, d;
  s.layouts.emplace_back("w", src);
  d.layouts.emplace_back("w", dst);
  write_strategy(dir / "src_strategy.ckpt", s);
  write_strategy(dir / "dst_strategy.ckpt", d);
  const auto l = to_layout(src, shape, 0, "w");
  for (index_t r = 0; r < 8; ++r) {
    fs::create_directories(dir / "src" / ("rank_" + std::to_string(r)));
    ckpt_writer w(dir / "src" / ("rank_" + std::to_string(r)) / "net.ckpt");
    const box b = reshard::box_of(l, r);
    const std::uint64_t bytes = static_cast<std::uint64_t>(reshard::volume(b)) * 4;
    w.begin("w", dtype::float32, b.extent.to_vector(), bytes);
    std::vector<std::byte> block(1 << 20, static_cast<std::byte>(r));
    for (std::uint64_t at = 0; at < bytes; at += block.size()) w.append(block);
    w.end();
    w.commit();
  }
  const long long bounded = child_peak_growth([&] { transform_dir(dir, {.buffer_bytes = 1 << 20}); });
  fs::remove_all(dir / "out");
  const long long whole = child_peak_growth([&] { transform_dir(dir, {.buffer_bytes = std::uint64_t{1} << 30}); });
  ASSERT_GE(bounded, 0);
  ASSERT_GE(whole, 0);
  RecordProperty("peak_growth_bounded", std::to_string(bounded));
  RecordProperty("peak_growth_whole_slices", std::to_string(whole));
  EXPECT_LT(bounded, 8ll << 20) << "1 MiB buffers: the peak grows by " << (bounded >> 20) << " MiB";
  EXPECT_GT(whole, 16ll << 20) << "whole 16 MiB target slices: the peak grows by " << (whole >> 20) << " MiB";
  // and the data arrived: row 0 of target 1 is row 1024 of the full tensor: 8 runs of 512
  // elements, run k from source rank k
  checkpoint_reader rd(dir / "out" / "rank_1" / "checkpoint_1.ckpt");
  const auto& e = *rd.find("w");
  EXPECT_EQ(e.dims, (std::vector<std::int64_t>{1024, 4096}));
  for (int k = 0; k < 8; ++k) EXPECT_EQ(e.pieces[0][static_cast<std::size_t>(k) * 2048], static_cast<std::byte>(k));
}

// check_output_paths (execute.hpp) asks the directory that holds every output once and, when it
// does not exist, no output: its verdict is the one a stat of every output gives, for outputs
// under a directory that exists or not, is a file, or a symbolic link to one that does not, in
// directories that exist or not, as files, dangling links or nothing.
RC_GTEST_PROP(check_output_paths, agrees_with_a_stat_of_every_output, ()) {
  const int top = *rc::gen::inRange(0, 5);  // the outputs' directory: absent, a directory, a file, a dangling or a good link
  const auto n = *rc::gen::inRange<std::size_t>(1, 7);
  const auto dirs = *rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, 3));   // rank dir: absent, made, a file
  const auto files = *rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, 4));  // output: absent, file, dangling link, directory
  const bool elsewhere = *rc::gen::arbitrary<bool>();  // one more output beside the directory (their common one: the root)
  const bool force = *rc::gen::arbitrary<bool>();
  temp_dir dir;
  const fs::path out = dir / "out";
  if (top == 1) fs::create_directory(out);
  if (top == 2) write_text(out, "x");
  if (top == 3) fs::create_directory_symlink(dir / "missing", out);
  if (top == 4) fs::create_directory(dir / "real"), fs::create_directory_symlink(dir / "real", out);
  std::vector<output_path> outputs;
  for (std::size_t i = 0; i < n; ++i) {
    const fs::path rank = out / ("rank_" + std::to_string(i));
    const fs::path file = rank / "f.ckpt";
    outputs.push_back({file, false});
    if (top != 1 && top != 4) continue;
    if (dirs[i] == 2) write_text(rank, "x");
    if (dirs[i] != 1) continue;
    fs::create_directory(rank);
    if (files[i] == 1) write_text(file, "x");
    if (files[i] == 2) fs::create_symlink(dir / "gone", file);
    if (files[i] == 3) fs::create_directory(file);
  }
  if (elsewhere) outputs.push_back({dir / "beside.ckpt", false});
  const fs::path* first = nullptr;  // the reference: the first output that lstat finds
  for (const auto& o : outputs) {
    struct ::stat st {};
    if (!first && ::lstat(o.path.c_str(), &st) == 0) first = &o.path;
  }
  const auto check = [&] { check_output_paths(outputs, std::map<index_t, fs::path>{}, force, "transform"); };
  if (first && !force)
    RC_ASSERT(throws_error(check, {"transform: ", first->string(), " exists (pass force"}));
  else
    check();
  RC_ASSERT(reshard::io::detail::common_directory(outputs) == (elsewhere ? dir.path() : n == 1 ? out / "rank_0" : out));
}
