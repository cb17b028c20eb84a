// Tests of a PyTorch DCP checkpoint as the source of the checkpoint engine (param_catalogue.hpp's
// dcp_source, engine.hpp, transform.hpp): every fixture torch 1.13 wrote (verify/data/dcp/) merged
// to ckpt, safetensors and Hugging Face equals what torch loaded, value for value; the chunks are
// read as boxes, so a tiling that is no grid, with several chunks of one tensor in one file, merges
// as exactly (by pread and from the mappings, in chunk buffers of a row or of 4 MiB); a transform
// by a target strategy writes MindSpore ranks, which verify checks; casts, selections and renames go through the same plan; the plan (its source table
// listing several boxes of one file) survives its JSON and its checks; one target rank by file and
// in memory (transform_dcp_checkpoint_by_rank, load_dcp_checkpoint_by_rank) is the transform's; byte
// items are left out with a warning naming them; a source strategy, overlapping chunks and a gap
// are refused by name.
#include <reshard/io/dcp.hpp>
#include <reshard/io/plan_file.hpp>
#include <reshard/io/plan_wire.hpp>
#include <reshard/io/transform.hpp>

#include "dcp_fixtures.hpp"
#include "io_test_util.hpp"
#include "pickle_writer.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

using namespace reshard;
using namespace reshard::io;
using namespace reshard_test;

namespace {


// Every tensor of a written checkpoint (a file, or a Hugging Face directory): dtype, dims, bytes.
struct written {
  dtype type;
  std::vector<std::int64_t> dims;
  std::string hex;
};
std::map<std::string, written> read_all(const fs::path& path) {
  const checkpoint_reader rd(path);
  std::map<std::string, written> out;
  for (const auto& e : rd.entries()) {
    std::vector<std::byte> bytes;
    for (auto p : e.pieces) bytes.insert(bytes.end(), p.begin(), p.end());
    out[e.name] = {e.type, e.dims, to_hex(bytes)};
  }
  return out;
}

transform_options quiet() {
  transform_options o;
  o.sync = false;
  return o;
}

// The fixture merged into `out` holds exactly torch's tensors, each equal to what torch loaded.
void expect_merged(const std::string& name, const fs::path& out, const transform_options& opts) {
  SCOPED_TRACE(name + " -> " + out.filename().string());
  const auto exp = dcp_expected(name);
  const auto s = merge_checkpoints(dcp_fixtures() / name, out, {}, opts);
  const auto got = read_all(out);
  ASSERT_EQ(got.size(), exp["tensors"].size());
  for (const auto& [fqn, e] : exp["tensors"].items()) {
    SCOPED_TRACE(fqn);
    ASSERT_TRUE(got.count(fqn));
    const auto& w = got.at(fqn);
    EXPECT_EQ(torch_dtype(e["dtype"].get<std::string>()), w.type);
    const auto shape = e["shape"].get<std::vector<std::int64_t>>();
    if (!shape.empty()) EXPECT_EQ(w.dims, shape);
    else EXPECT_TRUE(w.dims.empty() || w.dims == std::vector<std::int64_t>{0}) << "a 0-d tensor";
    EXPECT_EQ(w.hex, e["hex"].get<std::string>());
  }
  // the byte items are left out, named in one warning
  bool warned = exp["bytes"].empty();
  for (const auto& w : s.warnings) {
    bool all = w.find("byte item") != std::string::npos;
    for (const auto& [fqn, repr] : exp["bytes"].items()) all = all && w.find("'" + fqn + "'") != std::string::npos;
    warned = warned || all;
  }
  EXPECT_TRUE(warned) << "no warning names the byte items";
  if (exp["bytes"].empty()) {
    for (const auto& w : s.warnings) EXPECT_EQ(w.find("byte item"), std::string::npos) << w;
  }
}

const std::vector<std::string> all_fixtures{"minimal", "plain", "rows", "cols", "grid"};

}  // namespace

TEST(dcp_source, every_fixture_merges_to_what_torch_loaded_in_every_format) {
  for (const auto& name : all_fixtures) {
    temp_dir d;
    expect_merged(name, d / "out.safetensors", quiet());
    expect_merged(name, d / "out.ckpt", quiet());
    auto hf = quiet();
    hf.format = checkpoint_format::hf;
    hf.max_shard_bytes = 64;  // several shards and an index for the larger fixtures
    expect_merged(name, d / "hf", hf);
  }
}

TEST(dcp_source, convert_reads_a_dcp_directory_as_its_whole_tensors) {
  temp_dir d;
  convert_checkpoint(dcp_fixtures() / "grid", d / "g.safetensors", quiet());
  const auto got = read_all(d / "g.safetensors");
  const auto exp = dcp_expected("grid");
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [fqn, e] : exp["tensors"].items()) EXPECT_EQ(got.at(fqn).hex, e["hex"].get<std::string>()) << fqn;
}

TEST(dcp_source, the_plan_reads_each_chunk_once_and_its_preview_writes_nothing) {
  temp_dir d;
  auto o = quiet();
  o.dry_run = true;
  const auto s = merge_checkpoints(dcp_fixtures() / "grid", d / "g.safetensors", {}, o);
  EXPECT_FALSE(fs::exists(d / "g.safetensors"));
  ASSERT_TRUE(s.plan);
  const checkpoint_plan& p = *s.plan;
  // g float32 [4,6] + i int64 [5,2]: every byte read once, from the 4 data files
  EXPECT_EQ(p.bytes_read, 4u * 6 * 4 + 5u * 2 * 8);
  EXPECT_EQ(p.bytes_written, p.bytes_read);
  ASSERT_EQ(p.sources.size(), 4u);
  for (index_t r = 0; r < 4; ++r) EXPECT_EQ(p.sources.at(r).path.filename(), "__" + std::to_string(r) + "_0.distcp");
  ASSERT_EQ(p.targets.size(), 1u);
  ASSERT_EQ(p.targets[0].items.size(), 2u);
  // g comes in its 4 chunks from the 4 files; i in 3 row ranges (the 4th shard, empty, has no chunk)
  const auto& items = p.targets[0].items;
  const auto& g = items[0].name == "g" ? items[0] : items[1];
  const auto& i = items[0].name == "g" ? items[1] : items[0];
  ASSERT_EQ(g.transfers.size(), 4u);
  EXPECT_EQ(g.transfers[0].where, (box{{0, 0}, {3, 4}}));
  EXPECT_EQ(g.transfers[3].where, (box{{3, 4}, {1, 2}}));
  EXPECT_EQ(g.transfers[3].rank, 3);
  EXPECT_EQ(i.transfers.size(), 3u);
  EXPECT_TRUE(checkpoint_plan_problems(p).empty());
  EXPECT_EQ(plan_from_json(to_json(p), "plan.json"), p);
  EXPECT_EQ(s.preview->bytes_read, p.bytes_read);
}

TEST(dcp_source, casts_selections_and_renames_go_through_the_same_plan) {
  temp_dir d;
  auto o = quiet();
  o.casts.all = dtype::float16;
  o.names.exclude = {"steps"};
  o.names.rename_exact = {{"w", "layer.weight"}};
  const auto s = merge_checkpoints(dcp_fixtures() / "plain", d / "p.safetensors", {}, o);
  const auto got = read_all(d / "p.safetensors");
  const auto exp = dcp_expected("plain");
  EXPECT_FALSE(got.count("steps"));
  EXPECT_FALSE(got.count("w"));
  ASSERT_TRUE(got.count("layer.weight"));
  // float32 w cast to float16 by the one cast kernel: its bytes are those of torch's values cast
  const auto w = from_hex(exp["tensors"]["w"]["hex"].get<std::string>());
  std::vector<std::byte> half(w.size() / 2);
  cast_elements(w, dtype::float32, half, dtype::float16);
  EXPECT_EQ(got.at("layer.weight").type, dtype::float16);
  EXPECT_EQ(got.at("layer.weight").hex, to_hex(half));
  EXPECT_EQ(got.at("b").type, dtype::float16);  // bfloat16 is floating point: cast too
  EXPECT_EQ(got.size(), 3u);                    // b, scale, layer.weight
  EXPECT_FALSE(s.casts.empty());
}

TEST(dcp_source, a_source_strategy_is_refused_naming_it) {
  temp_dir d;
  write_text(d / "s.json", "{}");
  EXPECT_TRUE(throws_error([&] { merge_checkpoints(dcp_fixtures() / "rows", d / "o.ckpt", d / "s.json", quiet()); },
                           {"merge_checkpoints: ", "rows is a PyTorch DCP checkpoint", "give no source strategy", "s.json"}));
  EXPECT_FALSE(fs::exists(d / "o.ckpt"));
}

// ---- chunks that are no grid, several in one file --------------------------------------------

namespace {

// A DCP checkpoint made of the chunks torch wrote for other checkpoints, placed anew: tensor
// "flat" [5,5] float32, its left three columns tiled by rows' w chunks ([3,3] and [2,3], cut at row
// 3), its right two by grid's g[3:4,4:6] ([1,2]) above cols' w[:,0:2] ([3,2]) above g[3:4,4:6]
// again (cut at rows 1 and 4): no grid; two chunks in one data file, three in the other.
struct placed {
  std::string from_dir, fqn;
  std::size_t chunk;
  std::vector<std::int64_t> offsets;
  std::string file;  // the new file
};
const std::vector<placed> flat_chunks{{"rows", "w", 0, {0, 0}, "__0_0.distcp"},
                                      {"grid", "g", 3, {0, 3}, "__0_0.distcp"},
                                      {"rows", "w", 1, {3, 0}, "__1_0.distcp"},
                                      {"cols", "w", 0, {1, 3}, "__1_0.distcp"},
                                      {"grid", "g", 3, {4, 3}, "__1_0.distcp"}};

void make_flat(const fs::path& dir, const std::vector<placed>& chunks, const std::vector<std::int64_t>& size) {
  std::map<std::string, std::vector<std::byte>> files;
  meta_tensor t{"flat", "float32", size, {}};
  for (const auto& c : chunks) {
    const auto md = read_dcp_metadata(dcp_fixtures() / c.from_dir);
    const auto& ch = md.find(c.fqn)->chunks.at(c.chunk);
    const auto src = read_bytes(dcp_fixtures() / c.from_dir / ch.storage.relative_path);
    auto& f = files[c.file];
    const auto at = static_cast<std::int64_t>(f.size());
    f.insert(f.end(), src.begin() + static_cast<std::ptrdiff_t>(ch.storage.offset),
             src.begin() + static_cast<std::ptrdiff_t>(ch.storage.offset + ch.storage.length));
    t.chunks.push_back({c.offsets, ch.sizes, c.file, at, static_cast<std::int64_t>(ch.storage.length)});
  }
  fs::create_directories(dir);
  for (const auto& [name, bytes] : files) write_bytes(dir / name, bytes);
  meta_options o;
  o.torch2 = false;
  write_bytes(dir / ".metadata", dcp_metadata_pickle({t}, o));
}

// torch's values of "flat", from the fixtures' expected values
std::vector<float> flat_expected() {
  const auto rows = from_hex(dcp_expected("rows")["tensors"]["w"]["hex"].get<std::string>());  // [5,3]
  const auto cols = from_hex(dcp_expected("cols")["tensors"]["w"]["hex"].get<std::string>());  // [3,4]
  const auto grid = from_hex(dcp_expected("grid")["tensors"]["g"]["hex"].get<std::string>());  // [4,6]
  const auto f = [](const std::vector<std::byte>& b, std::size_t i) {
    float v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return v;
  };
  std::vector<float> out(25);
  for (std::size_t r = 0; r < 5; ++r)
    for (std::size_t c = 0; c < 5; ++c)
      out[r * 5 + c] = c < 3             ? f(rows, r * 3 + c)               // rows' w, both chunks
                       : r == 0 || r == 4 ? f(grid, 3 * 6 + 4 + (c - 3))     // g[3,4:6]
                                          : f(cols, (r - 1) * 4 + (c - 3));  // cols' w[0:3,0:2]
  return out;
}

}  // namespace

TEST(dcp_source, chunks_that_are_no_grid_merge_as_boxes) {
  temp_dir d;
  make_flat(d / "flat", flat_chunks, {5, 5});
  const auto want = flat_expected();
  for (const auto mode : {read_mode::pread, read_mode::mmap})
    for (const std::uint64_t buffer : {std::uint64_t{16}, std::uint64_t{4} << 20}) {  // 16: chunks of a row or less
      SCOPED_TRACE(std::string(to_string(mode)) + ", buffer " + std::to_string(buffer));
      auto o = quiet();
      o.reads = mode;
      o.buffer_bytes = buffer;
      o.force = true;
      merge_checkpoints(d / "flat", d / "f.safetensors", {}, o);
      const auto got = read_all(d / "f.safetensors");
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got.at("flat").dims, (std::vector<std::int64_t>{5, 5}));
      EXPECT_EQ(got.at("flat").hex, to_hex(std::as_bytes(std::span(want))));
    }
}

TEST(dcp_source, several_chunks_of_a_file_are_its_held_boxes_in_the_plan) {
  temp_dir d;
  make_flat(d / "flat", flat_chunks, {5, 5});
  auto o = quiet();
  o.dry_run = true;
  const auto s = merge_checkpoints(d / "flat", d / "f.ckpt", {}, o);
  const checkpoint_plan& p = *s.plan;
  const auto& h = p.holds.at("flat");
  ASSERT_EQ(h.size(), 5u);
  EXPECT_EQ(held_boxes(h, 0).size(), 2u);
  EXPECT_EQ(held_boxes(h, 1).size(), 3u);
  EXPECT_TRUE(checkpoint_plan_problems(p).empty());
  const auto j = to_json(p);
  EXPECT_TRUE(j["sources"][0]["holds"]["flat"].is_array());
  EXPECT_EQ(plan_from_json(j, "plan.json"), p);
  // a sender said to hold the wrong chunk is a problem of the plan
  checkpoint_plan bad = p;
  bad.holds.at("flat")[0].second.offset[1] = 1;
  EXPECT_FALSE(checkpoint_plan_problems(bad).empty());
  // and run: the tensor torch loaded
  o.dry_run = false;
  merge_checkpoints(d / "flat", d / "f.ckpt", {}, o);
  const auto want = flat_expected();
  EXPECT_EQ(read_all(d / "f.ckpt").at("flat").hex, to_hex(std::as_bytes(std::span(want))));
}

TEST(dcp_source, overlapping_chunks_and_gaps_are_refused_by_name) {
  temp_dir d;
  auto overlap = flat_chunks;
  overlap[2].offsets = {2, 0};  // rows' [2,3] moved up over rows' [3,3] at (0,0)
  make_flat(d / "overlap", overlap, {5, 5});
  EXPECT_TRUE(throws_error([&] { merge_checkpoints(d / "overlap", d / "o.ckpt", {}, quiet()); },
                           {".metadata", "'flat'", "overlap", "[0:3,0:3]", "[2:4,0:3]"}));
  auto gap = flat_chunks;
  gap.pop_back();
  make_flat(d / "gap", gap, {5, 5});
  EXPECT_TRUE(throws_error([&] { merge_checkpoints(d / "gap", d / "o.ckpt", {}, quiet()); },
                           {".metadata", "'flat'", "23 of its 25 elements", "gap"}));
  EXPECT_FALSE(fs::exists(d / "o.ckpt"));
}

// ---- to MindSpore ranks ---------------------------------------------------------------------

namespace {
// `bytes` (a row-major tensor of `shape`, elements of `es` bytes) cut to columns [c0, c0 + n)
std::vector<std::byte> columns(const std::vector<std::byte>& bytes, const std::vector<std::int64_t>& shape, std::size_t es,
                               std::int64_t c0, std::int64_t n) {
  std::vector<std::byte> out;
  for (std::int64_t r = 0; r < shape[0]; ++r) {
    const auto at = bytes.begin() + static_cast<std::ptrdiff_t>((r * shape[1] + c0) * static_cast<std::int64_t>(es));
    out.insert(out.end(), at, at + n * static_cast<std::ptrdiff_t>(es));
  }
  return out;
}
}  // namespace

TEST(dcp_source, transform_writes_mindspore_ranks_by_a_target_strategy) {
  // cols' w [3,4] float32, saved as two column halves, to 4 ranks of one column each; h [2,2]
  // bfloat16, saved as two rows, replicated on the 4 ranks
  temp_dir d;
  strategy_file st;
  st.layouts.push_back({"w", param_layout{.dev_matrix = {4}, .tensor_map = {{-1}, {0}}}});
  st.layouts.push_back({"h", param_layout{.dev_matrix = {4}, .tensor_map = {{-1}, {-1}}}});
  write_strategy(d / "dst.ckpt", st);
  const auto s = transform_checkpoints(dcp_fixtures() / "cols", d / "out", "checkpoint_", {}, d / "dst.ckpt", quiet());
  const auto exp = dcp_expected("cols");
  const auto w = from_hex(exp["tensors"]["w"]["hex"].get<std::string>());
  for (index_t t = 0; t < 4; ++t) {
    SCOPED_TRACE(t);
    const auto got = read_all(rank_checkpoint_path(d / "out", "checkpoint_", t, checkpoint_format::ckpt));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got.at("w").dims, (std::vector<std::int64_t>{3, 1}));
    EXPECT_EQ(got.at("w").hex, to_hex(columns(w, {3, 4}, 4, t, 1)));
    EXPECT_EQ(got.at("h").type, dtype::bfloat16);
    EXPECT_EQ(got.at("h").hex, exp["tensors"]["h"]["hex"].get<std::string>());
  }
  // the outputs check against the source, and a wrong byte is found
  EXPECT_TRUE(verify_checkpoints(dcp_fixtures() / "cols", d / "out", "checkpoint_", {}, d / "dst.ckpt", quiet()).ok());
  {
    const auto f1 = rank_checkpoint_path(d / "out", "checkpoint_", 1, checkpoint_format::ckpt);
    auto bytes = read_bytes(f1);
    const auto col = columns(w, {3, 4}, 4, 1, 1);
    const auto at = std::search(bytes.begin(), bytes.end(), col.begin(), col.end());
    ASSERT_NE(at, bytes.end());
    *at ^= std::byte{1};
    fs::remove(f1);
    write_bytes(f1, bytes);
    const auto r = verify_checkpoints(dcp_fixtures() / "cols", d / "out", "checkpoint_", {}, d / "dst.ckpt", quiet());
    ASSERT_EQ(r.mismatches.size(), 1u);
    EXPECT_EQ(r.mismatches[0].parameter, "w");
  }
  // the share of a worker (work_split, MPI's processes) writes the same bytes
  temp_dir e;
  const std::vector<std::int64_t> two{2};
  transform_checkpoints_for_ranks(dcp_fixtures() / "cols", e.path(), "checkpoint_", {}, d / "dst.ckpt", two, quiet());
  EXPECT_EQ(read_bytes(rank_checkpoint_path(e.path(), "checkpoint_", 2, checkpoint_format::ckpt)),
            read_bytes(rank_checkpoint_path(d / "out", "checkpoint_", 2, checkpoint_format::ckpt)));
  const auto sizes = transform_target_bytes(dcp_fixtures() / "cols", {}, d / "dst.ckpt");
  EXPECT_EQ(sizes, (std::vector<std::uint64_t>(4, 3 * 4 + 2 * 2 * 2)));
  EXPECT_GE(s.sliced, 8u);
}

TEST(dcp_source, one_target_rank_by_file_and_in_memory_is_the_transforms) {
  // transform_dcp_checkpoint_by_rank and load_dcp_checkpoint_by_rank (the Python module's
  // transform_checkpoint_by_rank and load_checkpoint_by_rank given a DCP directory): target rank
  // t of the strategy above, from plain (two byte items, named in a warning) and cols
  temp_dir d;
  strategy_file st;
  st.layouts.push_back({"w", param_layout{.dev_matrix = {4}, .tensor_map = {{-1}, {0}}}});
  write_strategy(d / "dst.ckpt", st);
  for (const char* name : {"cols", "plain"}) {
    SCOPED_TRACE(name);
    const fs::path src = dcp_fixtures() / name, all = d / name;
    transform_checkpoints(src, all, "checkpoint_", {}, d / "dst.ckpt", quiet());
    for (index_t t = 0; t < 4; ++t) {
      SCOPED_TRACE(t);
      const auto want = rank_checkpoint_path(all, "checkpoint_", t, checkpoint_format::ckpt);
      const fs::path one = d / (std::string(name) + std::to_string(t) + ".ckpt");
      transform_dcp_checkpoint_by_rank(t, src, one, {}, d / "dst.ckpt", quiet());
      EXPECT_EQ(read_bytes(one), read_bytes(want));
      std::vector<std::pair<std::string, std::vector<std::byte>>> loaded;
      const auto s = load_dcp_checkpoint_by_rank(
          t, src, {}, d / "dst.ckpt",
          [&](index_t rank, std::string_view n, dtype, std::span<const std::int64_t>, std::uint64_t bytes) {
            EXPECT_EQ(rank, t);
            loaded.emplace_back(std::string(n), std::vector<std::byte>(static_cast<std::size_t>(bytes), std::byte{0xEE}));
            return std::span<std::byte>(loaded.back().second);
          },
          quiet());
      const checkpoint_reader rd(want);
      ASSERT_EQ(loaded.size(), rd.entries().size());
      for (std::size_t i = 0; i < loaded.size(); ++i) {
        EXPECT_EQ(loaded[i].first, rd.entries()[i].name);
        std::vector<std::byte> bytes;
        for (auto p : rd.entries()[i].pieces) bytes.insert(bytes.end(), p.begin(), p.end());
        EXPECT_EQ(loaded[i].second, bytes) << loaded[i].first;
      }
      EXPECT_EQ(s.files, 0u);
      const bool byte_items = std::string(name) == "plain";
      ASSERT_EQ(s.warnings.size(), byte_items ? 1u : 0u);
      if (byte_items) {
        EXPECT_NE(s.warnings[0].find("'epoch', 'tag'"), std::string::npos) << s.warnings[0];
        EXPECT_NE(s.warnings[0].find("cannot be written to tensors in memory: left out"), std::string::npos)
            << s.warnings[0];
      }
    }
  }
  // a source strategy is refused by both, naming it; nothing is written
  write_text(d / "s.json", "{}");
  EXPECT_TRUE(throws_error(
      [&] { transform_dcp_checkpoint_by_rank(0, dcp_fixtures() / "rows", d / "x.ckpt", d / "s.json", {}, quiet()); },
      {"transform_checkpoint_by_rank: ", "rows is a PyTorch DCP checkpoint", "give no source strategy", "s.json"}));
  EXPECT_FALSE(fs::exists(d / "x.ckpt"));
  EXPECT_TRUE(throws_error(
      [&] {
        load_dcp_checkpoint_by_rank(
            0, dcp_fixtures() / "rows", d / "s.json", {},
            [](index_t, std::string_view, dtype, std::span<const std::int64_t>, std::uint64_t) -> std::span<std::byte> {
              ADD_FAILURE() << "allocated before the strategy was refused";
              return {};
            },
            quiet());
      },
      {"load_checkpoint_by_rank: ", "rows is a PyTorch DCP checkpoint", "give no source strategy", "s.json"}));
}

// ---- the plan's source table with several boxes per file ---------------------------------------

RC_GTEST_PROP(dcp_source, a_plan_whose_files_hold_several_boxes_reads_back_and_checks, ()) {
  // an [n,m] float32 tensor cut into row bands at random rows, each band into pieces at its own
  // random columns (no grid), each piece stored by a random one of k files; the target: the whole
  const index_t n = *rc::gen::inRange<index_t>(1, 9), m = *rc::gen::inRange<index_t>(1, 9);
  const index_t k = *rc::gen::inRange<index_t>(1, 5);
  const auto cuts = [](index_t len) {
    std::vector<index_t> at{0};
    for (index_t i = 1; i < len; ++i)
      if (*rc::gen::arbitrary<bool>()) at.push_back(i);
    at.push_back(len);
    return at;
  };
  checkpoint_plan p;
  plan_item it;
  it.source_name = it.name = "t";
  it.from = it.to = dtype::float32;
  it.dims = {n, m};
  it.target = box{{0, 0}, {n, m}};
  it.bytes = it.source_bytes = static_cast<std::uint64_t>(n * m * 4);
  const auto rows = cuts(n);
  for (std::size_t r = 0; r + 1 < rows.size(); ++r) {
    const auto cols = cuts(m);
    for (std::size_t c = 0; c + 1 < cols.size(); ++c) {
      const box b{{rows[r], cols[c]}, {rows[r + 1] - rows[r], cols[c + 1] - cols[c]}};
      const index_t file = *rc::gen::inRange<index_t>(0, k);
      it.transfers.push_back({file, b, static_cast<std::uint64_t>(volume(b) * 4)});
      p.holds["t"].emplace_back(file, b);
    }
  }
  sort_by_rank(p.holds["t"]);
  plan_target& t = p.targets.emplace_back();
  t.path = "out.safetensors";
  t.format = checkpoint_format::safetensors;
  t.files = {t.path};
  t.items.push_back(it);
  sum_plan(p, [](index_t r) { return fs::path("__" + std::to_string(r) + "_0.distcp"); });
  RC_ASSERT(checkpoint_plan_problems(p).empty());
  RC_ASSERT(plan_from_json(to_json(p), "plan.json") == p);
  RC_ASSERT(plan_from_bytes(plan_to_bytes(p), "plan") == p);
  for (const auto& x : it.transfers) {
    const box* h = held_box(p.holds.at("t"), x.rank, x.where);
    RC_ASSERT(h != nullptr);
    RC_ASSERT(*h == x.where);  // each piece is a stored box itself
  }
  // a transfer said to come from another file, which holds no box with it, is a problem
  if (k > 1) {
    checkpoint_plan bad = p;
    auto& x = bad.targets[0].items[0].transfers[*rc::gen::inRange<std::size_t>(0, it.transfers.size())];
    x.rank = (x.rank + 1) % k;
    RC_ASSERT(!checkpoint_plan_problems(bad).empty());
  }
}
