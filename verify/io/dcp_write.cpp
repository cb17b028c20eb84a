// Tests of PyTorch DCP as a target (reshard/io/dcp_writer.hpp, the engine's format dcp):
//   * every chunk of every fixture torch 1.13 wrote (verify/data/dcp/), archived again by
//     torch_save_bytes, is the archive torch wrote, byte for byte (the layout: zip records, the
//     64-byte padding, data.pkl's opcodes and memo, the end records);
//   * encode_dcp_metadata then parse_dcp_metadata is the identity on random metadata, under both
//     torch's module paths; the fixtures' metadata too;
//   * a random checkpoint split by a random target strategy (or converted whole) into a DCP
//     directory reads back (the library's DCP reader, merging it) as the source, bit for bit;
//     every chunk stored once, the chunks tiling each tensor; .metadata's offsets and lengths
//     are where the archives are;
//   * a DCP source's byte items are copied as stored (left out, named, under name rules);
//   * verify of a DCP output compares each chunk and .metadata: a flipped byte and another
//     .metadata are found;
//   * --part of a plan cutting a DCP directory, a target of some ranks only and a dtype torch
//     lacks are refused by name; an existing output is not replaced without force; the one
//     refusal of a partial DCP target (check_whole_dcp_target) accepts exactly the whole split.
#include <reshard/io/dcp.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/plan_file.hpp>
#include <reshard/io/plan_wire.hpp>
#include <reshard/io/transform.hpp>
#include <reshard/io/work_split.hpp>

#include "dcp_fixtures.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace reshard;
using namespace reshard::io;
using namespace reshard_test;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const reshard::error& e) {
    return e.what();
  }
  return "";
}

// ---- the archive layout against torch's -------------------------------------------------------

TEST(dcp_write, archives_are_torch_113s_byte_for_byte) {
  std::size_t compared = 0;
  for (const std::string name : {"minimal", "plain", "rows", "cols", "grid"}) {
    const fs::path dir = dcp_fixtures() / name;
    const dcp_metadata md = read_dcp_metadata(dir);
    dcp_checkpoint ck(dir);
    for (const auto& t : md.tensors)
      for (std::size_t k = 0; k < t.chunks.size(); ++k) {
        SCOPED_TRACE(name + ": " + t.fqn + " chunk " + std::to_string(k));
        const auto& c = t.chunks[k];
        const torch_tensor got = ck.chunk(t, k);
        const std::string mine = torch_save_bytes(t.type, c.sizes, got.data);
        const auto file = read_bytes(dir / c.storage.relative_path);
        ASSERT_LE(c.storage.offset + c.storage.length, file.size());
        const std::string theirs(reinterpret_cast<const char*>(file.data()) + c.storage.offset, c.storage.length);
        EXPECT_EQ(to_hex(as_bytes(mine)), to_hex(as_bytes(theirs)));
        EXPECT_EQ(torch_archive_size(t.type, c.sizes, got.data.size()), c.storage.length);
        ++compared;
      }
  }
  EXPECT_GE(compared, 12u);  // every fixture's chunks, the 0-d and the empty ones among them
}

// ---- .metadata --------------------------------------------------------------------------------

TEST(dcp_write, fixture_metadata_survives_encoding) {
  for (const std::string name : {"minimal", "plain", "rows", "cols", "grid"}) {
    SCOPED_TRACE(name);
    const dcp_metadata md = read_dcp_metadata(dcp_fixtures() / name);
    for (const dcp_layout l : {dcp_layout::torch_1_13, dcp_layout::torch_2}) {
      dcp_metadata m = md;
      m.layout = l;
      const std::string s = encode_dcp_metadata(m);
      const dcp_metadata back = parse_dcp_metadata(as_bytes(s), name + "/.metadata");
      EXPECT_EQ(back.layout, l);
      EXPECT_EQ(back.tensors, md.tensors);
      EXPECT_EQ(back.byte_items, md.byte_items);
      EXPECT_EQ(back.chunks_by_file, md.chunks_by_file);
    }
  }
}

RC_GTEST_PROP(dcp_write, metadata_encoding_round_trips, ()) {
  dcp_metadata md;
  md.layout = *rc::gen::element(dcp_layout::torch_1_13, dcp_layout::torch_2);
  const auto n = *rc::gen::inRange<std::size_t>(0, 5);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dcp_tensor t;
    t.fqn = "p" + std::to_string(i) + *rc::gen::element<std::string>("", ".weight", std::string(300, 'x'));
    t.type = rc::gen::element(torch_dtype_table.begin(), torch_dtype_table.end()).operator*()->type;
    const auto dims = *rc::gen::inRange<std::size_t>(0, 4);
    for (std::size_t d = 0; d < dims; ++d) t.size.push_back(*rc::gen::element<std::int64_t>(1, 3, 70000, 5'000'000'000));
    const auto chunks = *rc::gen::inRange<std::size_t>(1, 4);
    std::set<std::vector<std::int64_t>> starts;  // a storage entry per offset: chunks start apart
    for (std::size_t k = 0; k < chunks; ++k) {  // boxes inside the tensor (the metadata does not tile-check)
      dcp_chunk c;
      for (auto s : t.size) {
        const auto o = *rc::gen::inRange<std::int64_t>(0, s);
        c.offsets.push_back(o);
        c.sizes.push_back(*rc::gen::inRange<std::int64_t>(1, s - o + 1));
      }
      if (!starts.insert(c.offsets).second) continue;
      const auto length = *rc::gen::inRange<std::uint64_t>(1, 1u << 20);
      c.storage = {"__" + std::to_string(k) + "_0.distcp", at, length};
      at += length;
      t.chunks.push_back(std::move(c));
    }
    md.tensors.push_back(std::move(t));
  }
  if (*rc::gen::arbitrary<bool>()) md.byte_items.push_back({"step", {"__0_0.distcp", at, 431}});
  const std::string s = encode_dcp_metadata(md);
  const dcp_metadata back = parse_dcp_metadata(as_bytes(s), "x/.metadata");
  RC_ASSERT(back.layout == md.layout);
  RC_ASSERT(back.tensors == md.tensors);
  RC_ASSERT(back.byte_items == md.byte_items);
}

// ---- the engine -------------------------------------------------------------------------------

// Byte k of element `index` of parameter `id`: position-specific, so any misplaced byte shows.
std::byte pattern(std::size_t id, std::int64_t index, std::size_t k) {
  return static_cast<std::byte>((static_cast<std::uint64_t>(index) * 131 + id * 29 + k * 7 + 3) & 0xFF);
}

struct param {
  std::string name;
  dtype type = dtype::float32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> map;  // the target strategy's tensor_map (all -1: replicated)
};

std::vector<std::byte> full_bytes(std::size_t id, const param& p) {
  std::int64_t n = 1;
  for (auto d : p.shape) n *= d;
  std::vector<std::byte> out;
  for (std::int64_t e = 0; e < n; ++e)
    for (std::size_t k = 0; k < element_size(p.type); ++k) out.push_back(pattern(id, e, k));
  return out;
}

// dir/full.ckpt (the params whole) and, when `dev` > 0, dir/dst.ckpt (their target layouts over
// a device matrix [dev]).
void write_source(const fs::path& dir, const std::vector<param>& params, std::int64_t dev) {
  ckpt_writer w(dir / "full.ckpt");
  for (std::size_t i = 0; i < params.size(); ++i) w.write(params[i].name, params[i].type, params[i].shape, full_bytes(i, params[i]));
  w.commit();
  if (dev == 0) return;
  strategy_file s;
  s.nodes.push_back({"MatMul-op0", {0, {{1}}}});
  for (const auto& p : params) {
    param_layout l;
    l.dev_matrix = {dev};
    for (auto m : p.map) l.tensor_map.push_back({m});
    s.layouts.emplace_back(p.name, l);
  }
  write_strategy(dir / "dst.ckpt", s);
}

// What the DCP directory `out` holds, read back by the library (merged into one safetensors
// file), equals the params' bytes; every chunk is stored once and the chunks tile each tensor.
void expect_round_trip(const fs::path& out, const std::vector<param>& params, const fs::path& back) {
  const dcp_metadata md = read_dcp_metadata(out);
  RC_ASSERT(md.tensors.size() == params.size());
  for (const auto& t : md.tensors) {
    std::int64_t total = 1, covered = 0;
    for (auto d : t.size) total *= d;
    std::set<std::vector<std::int64_t>> seen;
    for (const auto& c : t.chunks) {
      std::int64_t v = 1;
      for (auto d : c.sizes) v *= d;
      covered += v;
      RC_ASSERT(seen.insert(c.offsets).second);  // stored once
    }
    RC_ASSERT(covered == total);
    // each archive is where .metadata says: its file holds it at offset, length bytes
    for (const auto& c : t.chunks) {
      const auto file = read_bytes(out / c.storage.relative_path);
      RC_ASSERT(c.storage.offset + c.storage.length <= file.size());
      const torch_archive a(std::span<const std::byte>(file).subspan(c.storage.offset, c.storage.length), "chunk");
      const torch_tensor tt = read_torch_tensor(a);
      RC_ASSERT(tt.shape == c.sizes);
      RC_ASSERT(tt.type == t.type);
    }
  }
  transform_options o;
  o.sync = false;
  convert_checkpoint(out, back, o);
  const checkpoint_reader rd(back);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const tensor_ref* e = rd.find(params[i].name);
    RC_ASSERT(e != nullptr);
    RC_ASSERT(e->type == params[i].type);
    std::vector<std::byte> got;
    for (auto q : e->pieces) got.insert(got.end(), q.begin(), q.end());
    RC_ASSERT(got == full_bytes(i, params[i]));
  }
}

std::vector<param> random_params(std::int64_t dev) {
  std::vector<param> ps;
  const auto n = *rc::gen::inRange<std::size_t>(1, 4);
  for (std::size_t i = 0; i < n; ++i) {
    param p;
    p.name = "layer" + std::to_string(i) + ".w";
    p.type = *rc::gen::element(dtype::float32, dtype::bfloat16, dtype::float16, dtype::int64, dtype::int8, dtype::float64);
    const auto dims = *rc::gen::inRange<std::size_t>(1, 4);
    const auto split = dev > 1 && *rc::gen::arbitrary<bool>() ? *rc::gen::inRange<std::size_t>(0, dims) : dims;
    for (std::size_t d = 0; d < dims; ++d) {
      const auto k = *rc::gen::inRange<std::int64_t>(1, 4);
      p.shape.push_back(d == split ? k * dev : k);
      p.map.push_back(d == split ? 0 : -1);
    }
    ps.push_back(std::move(p));
  }
  return ps;
}

RC_GTEST_PROP(dcp_write, split_into_dcp_reads_back_bit_for_bit, ()) {
  const std::int64_t dev = *rc::gen::element<std::int64_t>(1, 2, 4);
  const auto params = random_params(dev);
  const auto torch = *rc::gen::element(dcp_layout::torch_1_13, dcp_layout::torch_2);
  temp_dir dir;
  write_source(dir.path(), params, dev);
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  o.dcp_torch = torch;
  o.jobs = *rc::gen::inRange<unsigned>(1, 3);
  o.buffer_bytes = *rc::gen::element<std::uint64_t>(7, 64, 4 << 20);  // items in many chunks, or one
  const auto s = split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o);
  RC_ASSERT(s.outputs.back() == dir.path() / "out" / ".metadata");  // renamed into place last
  for (std::int64_t r = 0; r < dev; ++r) RC_ASSERT(fs::exists(dir.path() / "out" / dcp_data_file_name(r)));
  RC_ASSERT(read_dcp_metadata(dir.path() / "out").layout == torch);
  expect_round_trip(dir.path() / "out", params, dir.path() / "back.safetensors");
}

RC_GTEST_PROP(dcp_write, convert_into_dcp_writes_whole_tensors, ()) {
  const auto params = random_params(1);
  temp_dir dir;
  write_source(dir.path(), params, 0);
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  convert_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", o);
  const dcp_metadata md = read_dcp_metadata(dir.path() / "out");
  for (const auto& t : md.tensors) {
    RC_ASSERT(t.chunks.size() == 1u);
    RC_ASSERT(t.chunks[0].sizes == t.size);
    RC_ASSERT(t.chunks[0].storage.relative_path == "__0_0.distcp");
  }
  expect_round_trip(dir.path() / "out", params, dir.path() / "back.safetensors");
}

// A replicated parameter is stored once, by rank 0; a sharded one by every rank.
TEST(dcp_write, replicated_boxes_are_stored_once_by_the_lowest_rank) {
  temp_dir dir;
  const std::vector<param> params{{"bias", dtype::float32, {3}, {-1}}, {"w", dtype::float32, {4, 2}, {0, -1}}};
  write_source(dir.path(), params, 4);
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o);
  const dcp_metadata md = read_dcp_metadata(dir.path() / "out");
  ASSERT_EQ(md.tensors.size(), 2u);
  const dcp_tensor* bias = md.find("bias");
  ASSERT_TRUE(bias);
  ASSERT_EQ(bias->chunks.size(), 1u);
  EXPECT_EQ(bias->chunks[0].storage.relative_path, "__0_0.distcp");
  const dcp_tensor* w = md.find("w");
  ASSERT_TRUE(w);
  ASSERT_EQ(w->chunks.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(w->chunks[r].storage.relative_path, dcp_data_file_name(static_cast<index_t>(r)));
    EXPECT_EQ(w->chunks[r].offsets, (std::vector<std::int64_t>{static_cast<std::int64_t>(r), 0}));
  }
}

// The byte items of a DCP source are copied as stored, after the tensors of the lowest rank's
// file; under name rules they are left out, named in a warning.
TEST(dcp_write, byte_items_are_copied_as_stored) {
  temp_dir dir;
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  const fs::path src = dcp_fixtures() / "plain";
  const auto s = convert_checkpoint(src, dir.path() / "out", o);
  EXPECT_TRUE(s.warnings.empty());
  const dcp_metadata in = read_dcp_metadata(src), out = read_dcp_metadata(dir.path() / "out");
  ASSERT_EQ(out.byte_items.size(), 2u);
  std::uint64_t end = 0;  // the tensors' archives come first
  for (const auto& t : out.tensors)
    for (const auto& c : t.chunks) end = std::max(end, c.storage.offset + c.storage.length);
  for (std::size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(in.byte_items[i].fqn);
    const auto& a = in.byte_items[i];
    const auto& b = out.byte_items[i];
    EXPECT_EQ(b.fqn, a.fqn);
    EXPECT_EQ(b.storage.relative_path, "__0_0.distcp");
    EXPECT_GE(b.storage.offset, end);
    EXPECT_EQ(b.storage.length, a.storage.length);
    const auto from = read_bytes(src / a.storage.relative_path), to = read_bytes(dir.path() / "out" / "__0_0.distcp");
    ASSERT_LE(b.storage.offset + b.storage.length, to.size());
    EXPECT_TRUE(std::equal(to.begin() + static_cast<std::ptrdiff_t>(b.storage.offset),
                           to.begin() + static_cast<std::ptrdiff_t>(b.storage.offset + b.storage.length),
                           from.begin() + static_cast<std::ptrdiff_t>(a.storage.offset)));
  }
  EXPECT_EQ(to_hex(read_bytes(dir.path() / "out" / "__0_0.distcp")).size() / 2,
            end + out.byte_items[0].storage.length + out.byte_items[1].storage.length);
  // the pickles decode as the source's
  dcp_checkpoint a(src), b(dir.path() / "out");
  EXPECT_EQ(describe(b.byte_item(out.byte_items[1]).root()), describe(a.byte_item(in.byte_items[1]).root()));
  // the plan keeps them, through its JSON and its bytes (MPI)
  transform_options dry = o;
  dry.dry_run = true;
  const auto planned = convert_checkpoint(src, dir.path() / "never", dry);
  ASSERT_TRUE(planned.plan);
  ASSERT_EQ(planned.plan->targets.at(0).byte_items.size(), 2u);
  EXPECT_EQ(plan_from_json(to_json(*planned.plan), "plan.json"), *planned.plan);
  EXPECT_EQ(plan_from_bytes(plan_to_bytes(*planned.plan), "plan"), *planned.plan);
  o.names.exclude = {"steps"};
  const auto t = convert_checkpoint(src, dir.path() / "excluded", o);
  EXPECT_TRUE(read_dcp_metadata(dir.path() / "excluded").byte_items.empty());
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("'epoch', 'tag'"), std::string::npos);
}

// ---- refusals ---------------------------------------------------------------------------------

TEST(dcp_write, a_plan_cut_into_parts_is_refused) {
  temp_dir dir;
  write_source(dir.path(), {{"w", dtype::float32, {4, 2}, {0, -1}}}, 4);
  transform_options o;
  o.format = checkpoint_format::dcp;
  o.dcp_torch = dcp_layout::torch_1_13;
  o.dry_run = true;
  const auto s = split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o);
  ASSERT_TRUE(s.plan);
  const checkpoint_plan back = plan_from_json(to_json(*s.plan), "plan.json");
  EXPECT_EQ(back, *s.plan);  // format dcp and the torch survive the JSON, and the bytes (MPI)
  EXPECT_EQ(plan_from_bytes(plan_to_bytes(*s.plan), "plan"), *s.plan);
  EXPECT_NE(error_of([&] { plan_part(back, 0, 2); }).find("whose .metadata lists the chunks of every target rank"),
            std::string::npos);
  EXPECT_NO_THROW(plan_part(back, 0, 1));
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  // the whole plan executed: the same directory
  execute_plan(back, {.sync = false});
  EXPECT_TRUE(fs::exists(dir.path() / "out" / ".metadata"));
  EXPECT_EQ(read_dcp_metadata(dir.path() / "out").tensors.size(), 1u);
}

// check_whole_dcp_target, the one refusal of a DCP target written in part: a random split of
// random target ranks (some dropped, some twice, one in another directory) is accepted exactly
// when one run writes each of the ranks once into the directory; a refusal names the directory,
// the rank count and the remedy, and its words follow from the split alone.
RC_GTEST_PROP(dcp_write_props, a_dcp_target_is_written_whole_by_one_run_or_refused, ()) {
  const auto ranks = *rc::gen::inRange<index_t>(1, 9);
  const auto runs_n = *rc::gen::inRange<std::size_t>(1, 4);
  const fs::path dir = "out/dcp";
  std::vector<std::vector<dcp_run_target>> runs(runs_n);
  for (index_t r = 0; r < ranks; ++r) {
    const auto copies = *rc::gen::weightedElement<int>({{1, 0}, {8, 1}, {1, 2}});
    for (int c = 0; c < copies; ++c) {
      const bool elsewhere = *rc::gen::weightedElement<int>({{12, 0}, {1, 1}}) == 1;
      runs[*rc::gen::inRange<std::size_t>(0, runs_n)].push_back({r, elsewhere ? fs::path("other") : dir});
    }
  }
  // the model: one run of all, each rank once, every one into dir
  std::size_t writing = 0;
  std::multiset<index_t> all;
  bool one_dir = true;
  for (const auto& run : runs) {
    writing += !run.empty();
    for (const auto& t : run) all.insert(t.rank), one_dir = one_dir && t.dir == dir;
  }
  bool whole = writing <= 1 && one_dir && all.size() == static_cast<std::size_t>(ranks);
  for (index_t r = 0; r < ranks; ++r) whole = whole && all.count(r) == 1;
  if (writing == 0) whole = true;  // no run writes any of it: nothing to refuse
  const auto check = [&] { check_whole_dcp_target("op", dir, ranks, runs, "parts", "the remedy"); };
  const std::string e = error_of(check);
  RC_ASSERT(e.empty() == whole);
  if (!whole) {
    RC_ASSERT(e.find("op: the PyTorch DCP checkpoint out/dcp, whose .metadata lists the chunks of every target rank, "
                     "is written for all " + std::to_string(ranks) + " target ranks at once") == 0u);
    RC_ASSERT(e.find("(the remedy)") != std::string::npos);
    RC_ASSERT(error_of(check) == e);
    if (writing > 1) RC_ASSERT(e.find("split into " + std::to_string(writing) + " parts") != std::string::npos);
  }
}

TEST(dcp_write, some_ranks_only_and_a_dtype_torch_lacks_are_refused) {
  temp_dir dir;
  write_source(dir.path(), {{"w", dtype::float32, {4, 2}, {0, -1}}}, 4);
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  std::map<std::int64_t, fs::path> files{{0, dir.path() / "full.ckpt"}};
  EXPECT_NE(error_of([&] { transform_checkpoint_by_rank(1, files, dir.path() / "out", {}, dir.path() / "dst.ckpt", o); })
                .find("is written for all 4 target ranks at once"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  const std::int64_t some[] = {0, 1};  // one worker's share (transform-rank, mpirun)
  fs::create_directories(dir.path() / "src" / "rank_0");
  fs::copy_file(dir.path() / "full.ckpt", dir.path() / "src" / "rank_0" / "net.ckpt");
  EXPECT_NE(error_of([&] {
              transform_checkpoints_for_ranks(dir.path() / "src", dir.path() / "out", "", {}, dir.path() / "dst.ckpt", some, o);
            }).find("is written for all 4 target ranks at once"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  // uint16: no torch dtype
  ckpt_writer w(dir.path() / "u16.ckpt");
  const std::vector<std::uint16_t> v{1, 2};
  w.write("u", dtype::uint16, std::vector<std::int64_t>{2}, std::as_bytes(std::span(v)));
  w.commit();
  EXPECT_NE(error_of([&] { convert_checkpoint(dir.path() / "u16.ckpt", dir.path() / "u", o); }).find("parameter 'u' is UInt16"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "u" / ".metadata"));
  // an output is not replaced without force
  split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o);
  EXPECT_NE(error_of([&] { split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o); })
                .find("exists (pass force"),
            std::string::npos);
  o.force = true;
  EXPECT_NO_THROW(split_checkpoint(dir.path() / "full.ckpt", dir.path() / "out", dir.path() / "dst.ckpt", "", o));
}

// verify of a DCP output: clean, then a flipped tensor byte and a .metadata of other chunks found
TEST(dcp_write, verify_compares_the_chunks_and_the_metadata) {
  temp_dir dir;
  write_source(dir.path(), {{"w", dtype::float32, {4, 2}, {0, -1}}, {"b", dtype::int64, {3}, {-1}}}, 4);
  transform_options o;
  o.sync = false;
  o.format = checkpoint_format::dcp;
  const fs::path out = dir.path() / "out";
  split_checkpoint(dir.path() / "full.ckpt", out, dir.path() / "dst.ckpt", "", o);
  const auto clean = verify_split_checkpoint(dir.path() / "full.ckpt", out, dir.path() / "dst.ckpt", "", o);
  EXPECT_TRUE(clean.mismatches.empty()) << clean.mismatches.front().what;
  EXPECT_EQ(clean.files, 5u);  // 4 data files and .metadata
  EXPECT_EQ(clean.tensors, 5u);  // w's 4 chunks, b once
  // a byte of w's chunk on rank 2 flipped
  const dcp_metadata md = read_dcp_metadata(out);
  const dcp_chunk& c = md.find("w")->chunks[2];
  auto bytes = read_bytes(out / c.storage.relative_path);
  bytes[c.storage.offset + torch_archive_head_of(dtype::float32, c.sizes).bytes.size()] ^= std::byte{1};  // its first data byte
  write_bytes(out / c.storage.relative_path, bytes);
  const auto flipped = verify_split_checkpoint(dir.path() / "full.ckpt", out, dir.path() / "dst.ckpt", "", o);
  ASSERT_EQ(flipped.mismatches.size(), 1u);
  EXPECT_EQ(flipped.mismatches[0].parameter, "w");
  EXPECT_NE(flipped.mismatches[0].what.find("differs from element"), std::string::npos);
  // a .metadata of another split (2 ranks) in its place
  temp_dir other;
  write_source(other.path(), {{"w", dtype::float32, {4, 2}, {0, -1}}, {"b", dtype::int64, {3}, {-1}}}, 2);
  split_checkpoint(other.path() / "full.ckpt", other.path() / "out", other.path() / "dst.ckpt", "", o);
  fs::copy_file(other.path() / "out" / ".metadata", out / ".metadata", fs::copy_options::overwrite_existing);
  const auto moved = verify_split_checkpoint(dir.path() / "full.ckpt", out, dir.path() / "dst.ckpt", "", o);
  bool found = false;
  for (const auto& m : moved.mismatches) found = found || m.what.find("lists other tensors, chunks or places") != std::string::npos;
  EXPECT_TRUE(found);
}

}  // namespace
