// verify/io/transform_options.cpp: every checkpoint option on every workflow (issue 20).
//   format hf per target rank: transform_checkpoints, split_checkpoint and
//   transform_checkpoints_for_ranks write one Hugging Face checkpoint directory per target rank,
//   dst_dir/rank_<t>/<prefix><t>/, holding the tensors (names, dtypes, dims, bytes) of the ckpt
//   run's rank_<t>/<prefix><t>.ckpt; the shares of a split transform write the same files;
//   the verify functions given the run's options (selection, renames, casts, format) find the
//   outputs identical, and still find a flipped byte and a missing parameter: verify_checkpoints,
//   verify_merged_checkpoint, verify_split_checkpoint, verify_converted_checkpoint.
#include <reshard/io/transform.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;

namespace {

// ms_scenario.py's retrain_8to4 (8 ranks to 4, optimizer sharding, a str and a map tensor) in
// dir: src/rank_<r>/, src_strategy.ckpt, dst_strategy.ckpt
struct scenario {
  temp_dir dir;
  fs::path src = dir / "src_strategy.ckpt", dst = dir / "dst_strategy.ckpt";
  scenario() {
    const auto made = run_python("ms_scenario.py", {"gen", "retrain_8to4", dir.path().string()});
    EXPECT_EQ(made.status, 0) << made.output;
  }
};

// A checkpoint's tensors: name -> (dtype, dims, bytes).
using tensors = std::map<std::string, std::tuple<dtype, std::vector<std::int64_t>, std::vector<std::byte>>>;

tensors read_tensors(const fs::path& path) {
  checkpoint_reader rd(path);
  tensors out;
  for (const auto& e : rd.entries()) {
    std::vector<std::byte> b;
    for (auto piece : e.pieces) b.insert(b.end(), piece.begin(), piece.end());
    out[e.name] = {e.type, e.dims, std::move(b)};
  }
  return out;
}

// The trees `a` and `b` hold the same entries, and their files the same bytes.
void expect_same_tree(const fs::path& a, const fs::path& b) {
  const auto names = list_tree(a);
  ASSERT_EQ(names, list_tree(b));
  for (const auto& n : names) {
    if (fs::is_regular_file(a / n)) {
      EXPECT_TRUE(read_bytes(a / n) == read_bytes(b / n)) << n;
    }
  }
}

// Flips the first byte of `name`'s data in the checkpoint `path` (a ckpt or safetensors file, or
// a Hugging Face directory).
void flip(const fs::path& path, const std::string& name) {
  fs::path file;
  std::uint64_t at = 0;
  {
    checkpoint_reader rd(path);
    const tensor_ref* e = rd.find(name);
    ASSERT_TRUE(e) << name;
    ASSERT_FALSE(e->pieces.empty() || e->pieces[0].empty()) << name;
    if (rd.format() == checkpoint_format::hf) {  // the shard that holds it, and its offset there
      for (const auto& f : fs::directory_iterator(path)) {
        if (f.path().extension() != ".safetensors") continue;
        safetensors_file st(f.path());
        if (const safetensors_entry* x = st.find(name)) {
          file = f.path();
          at = static_cast<std::uint64_t>(x->data.data() - st.file_bytes().data());
        }
      }
      ASSERT_FALSE(file.empty()) << name;
    } else {
      file = path;
      at = rd.offset_of(e->pieces[0].data());
    }
  }
  auto bytes = read_bytes(file);
  bytes.at(at) ^= std::byte{0x20};
  write_bytes(file, bytes);
}

std::vector<std::tuple<std::string, std::string, std::string>> differences(const verify_report& r) {
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const auto& m : r.mismatches) out.emplace_back(m.file.filename().string(), m.parameter, m.what);
  std::sort(out.begin(), out.end());
  return out;
}

// safetensors holds neither of these (a str and a map tensor)
transform_options hf_options(std::uint64_t max_shard_bytes) {
  transform_options o;
  o.format = checkpoint_format::hf;
  o.max_shard_bytes = max_shard_bytes;
  o.names.exclude = {"optimizer_name", "emb_table"};
  return o;
}

}  // namespace

TEST(transform_hf, one_hugging_face_checkpoint_per_target_rank_with_the_ckpt_runs_tensors) {
  scenario s;
  transform_options ck;
  ck.names.exclude = {"optimizer_name", "emb_table"};
  transform_checkpoints(s.dir / "src", s.dir / "ckpt", "checkpoint_", s.src, s.dst, ck);
  const auto sum = transform_checkpoints(s.dir / "src", s.dir / "hf", "checkpoint_", s.src, s.dst, hf_options(200));
  std::set<fs::path> dirs;
  for (const auto& p : sum.outputs) dirs.insert(p.parent_path());
  EXPECT_EQ(dirs.size(), 4u);
  for (int t = 0; t < 4; ++t) {
    const std::string r = std::to_string(t);
    const fs::path d = s.dir / "hf" / ("rank_" + r) / ("checkpoint_" + r);
    EXPECT_TRUE(dirs.count(d)) << d;
    ASSERT_TRUE(is_hf_directory(d)) << d;
    EXPECT_TRUE(fs::exists(d / hf_index_name)) << "200-byte shards: several, and an index";
    EXPECT_EQ(read_tensors(d), read_tensors(s.dir / "ckpt" / ("rank_" + r) / ("checkpoint_" + r + ".ckpt"))) << t;
  }
  // the default 5 GB: one model.safetensors per rank, no index
  transform_checkpoints(s.dir / "src", s.dir / "one", "p_", s.src, s.dst, hf_options(5'000'000'000));
  for (int t = 0; t < 4; ++t) {
    const fs::path d = s.dir / "one" / ("rank_" + std::to_string(t)) / ("p_" + std::to_string(t));
    EXPECT_EQ(list_tree(d), std::vector<std::string>{"model.safetensors"}) << d;
  }
  // existing outputs: refused without force, as for files
  EXPECT_TRUE(throws_error(
      [&] { transform_checkpoints(s.dir / "src", s.dir / "one", "p_", s.src, s.dst, hf_options(5'000'000'000)); },
      {"model.safetensors exists", "force"}));
}

TEST(transform_hf, split_and_the_shares_of_a_split_transform) {
  scenario s;
  transform_options o = hf_options(300);
  merge_checkpoints(s.dir / "src", s.dir / "full.ckpt", s.src, {.names = o.names});
  transform_options from_full = o;  // full.ckpt holds neither of the excluded parameters
  from_full.names.exclude.clear();
  split_checkpoint(s.dir / "full.ckpt", s.dir / "split_ckpt", s.dst, "checkpoint_");
  split_checkpoint(s.dir / "full.ckpt", s.dir / "split_hf", s.dst, "checkpoint_", from_full);
  for (int t = 0; t < 4; ++t) {
    const std::string r = std::to_string(t);
    EXPECT_EQ(read_tensors(s.dir / "split_hf" / ("rank_" + r) / ("checkpoint_" + r)),
              read_tensors(s.dir / "split_ckpt" / ("rank_" + r) / ("checkpoint_" + r + ".ckpt")))
        << t;
  }
  // transform_checkpoints_for_ranks names the HF targets as transform_checkpoints does
  transform_checkpoints(s.dir / "src", s.dir / "whole", "checkpoint_", s.src, s.dst, o);
  for (const auto& share : std::vector<std::vector<std::int64_t>>{{0, 3}, {1}, {2}})
    transform_checkpoints_for_ranks(s.dir / "src", s.dir / "shares", "checkpoint_", s.src, s.dst, share, o);
  expect_same_tree(s.dir / "shares", s.dir / "whole");
}

TEST(verify_options, the_runs_selection_and_casts_no_false_missing_and_real_differences_caught) {
  scenario s;
  transform_options o;
  o.names.include = {"layer1.*", "embedding"};
  o.names.exclude = {"*.bias"};
  o.casts.all = dtype::bfloat16;
  transform_checkpoints(s.dir / "src", s.dir / "out", "checkpoint_", s.src, s.dst, o);
  const verify_report ok = verify_checkpoints(s.dir / "src", s.dir / "out", "checkpoint_", s.src, s.dst, o);
  EXPECT_TRUE(ok.ok()) << ok.mismatches.size() << " differences, the first: "
                       << (ok.mismatches.empty() ? "" : ok.mismatches[0].parameter + ": " + ok.mismatches[0].what);
  EXPECT_EQ(ok.files, 4u);
  EXPECT_EQ(ok.tensors, 8u);  // layer1.weight and embedding on each of 4 ranks
  // without them: the parameters left out are "missing", the cast ones of another dtype
  const auto plain = differences(verify_checkpoints(s.dir / "src", s.dir / "out", "checkpoint_", s.src, s.dst));
  EXPECT_TRUE(std::count(plain.begin(), plain.end(),
                         std::tuple<std::string, std::string, std::string>{"checkpoint_0.ckpt", "layer1.bias", "missing"}));
  EXPECT_TRUE(std::count(plain.begin(), plain.end(),
                         std::tuple<std::string, std::string, std::string>{"checkpoint_0.ckpt", "layer1.weight",
                                                                           "dtype BFloat16, expected Float32"}));
  // with them: a flipped byte and a dropped parameter are still found
  flip(s.dir / "out" / "rank_2" / "checkpoint_2.ckpt", "embedding");
  EXPECT_EQ(differences(verify_checkpoints(s.dir / "src", s.dir / "out", "checkpoint_", s.src, s.dst, o)),
            (std::vector<std::tuple<std::string, std::string, std::string>>{
                {"checkpoint_2.ckpt", "embedding", "differs from element 0 (byte 0)"}}));
  transform_options fewer = o;
  fewer.names.include = {"layer1.*"};  // the output has an embedding no longer expected
  EXPECT_EQ(differences(verify_checkpoints(s.dir / "src", s.dir / "out", "checkpoint_", s.src, s.dst, fewer)).size(), 4u);
}

TEST(verify_options, merged_split_and_converted_outputs_hf_and_files) {
  scenario s;
  // merge with renames to a Hugging Face directory
  transform_options m = hf_options(256);
  m.names.rename = {{"^layer1\\.", "L1."}};
  m.names.rename_exact = {{"embedding", "tok_embeddings"}};
  merge_checkpoints(s.dir / "src", s.dir / "merged", s.src, m);
  EXPECT_TRUE(verify_merged_checkpoint(s.dir / "src", s.dir / "merged", s.src, m).ok());
  EXPECT_FALSE(verify_merged_checkpoint(s.dir / "src", s.dir / "merged", s.src, hf_options(256)).ok())
      << "without the renames the new names are not expected";
  // convert it to one .safetensors, cast
  transform_options c;
  c.casts.named = {{"L1.*", dtype::float64}};
  convert_checkpoint(s.dir / "merged", s.dir / "conv.safetensors", c);
  EXPECT_TRUE(verify_converted_checkpoint(s.dir / "merged", s.dir / "conv.safetensors", c).ok());
  const auto uncast = differences(verify_converted_checkpoint(s.dir / "merged", s.dir / "conv.safetensors"));
  EXPECT_EQ(uncast.size(), 2u);  // L1.weight, L1.bias (moments.layer1.weight was not renamed)
  // split the merged ckpt form to HF ranks, selected
  merge_checkpoints(s.dir / "src", s.dir / "full.ckpt", s.src, {.names = hf_options(0).names});
  transform_options sp = hf_options(100);
  sp.names.exclude.clear();
  sp.names.include = {"layer1.*", "moments.*"};
  split_checkpoint(s.dir / "full.ckpt", s.dir / "split", s.dst, "x_", sp);
  EXPECT_TRUE(verify_split_checkpoint(s.dir / "full.ckpt", s.dir / "split", s.dst, "x_", sp).ok());
  // real differences: a flipped byte in a shard, and in the converted file
  flip(s.dir / "split" / "rank_1" / "x_1", "moments.layer1.weight");
  EXPECT_EQ(differences(verify_split_checkpoint(s.dir / "full.ckpt", s.dir / "split", s.dst, "x_", sp)),
            (std::vector<std::tuple<std::string, std::string, std::string>>{
                {"x_1", "moments.layer1.weight", "differs from element 0 (byte 0)"}}));
  flip(s.dir / "conv.safetensors", "tok_embeddings");
  EXPECT_EQ(differences(verify_converted_checkpoint(s.dir / "merged", s.dir / "conv.safetensors", c)),
            (std::vector<std::tuple<std::string, std::string, std::string>>{
                {"conv.safetensors", "tok_embeddings", "differs from element 0 (byte 0)"}}));
  // a missing output is reported, not thrown
  EXPECT_EQ(differences(verify_merged_checkpoint(s.dir / "src", s.dir / "nowhere.ckpt", s.src)),
            (std::vector<std::tuple<std::string, std::string, std::string>>{{"nowhere.ckpt", "", "missing file"}}));
}

// The jobs: default_jobs gives direct writes a second job per core (it waits for the disk), but
// the CPU-bound work of a run (the sources' CRC check, a load into memory, a verify) takes
// cpu_jobs of that count: at most one thread per core, fewer only when fewer jobs were asked for
// (or fitted to a memory budget); the CRC check's windows are sized by those threads.
TEST(jobs, cpu_bound_work_gets_at_most_one_thread_per_core_also_with_direct_writes) {
  const unsigned cores = reshard::thread_count(0);
  for (std::size_t targets : {std::size_t{1}, std::size_t{cores}, std::size_t{2} * cores, std::size_t{64}}) {
    for (write_mode w : {write_mode::buffered, write_mode::direct}) {
      const unsigned jobs = default_jobs(0, targets, w);
      EXPECT_EQ(jobs, std::min<std::size_t>(targets, (w == write_mode::direct ? 2 : 1) * std::size_t{cores}));
      EXPECT_EQ(cpu_jobs(jobs), std::min<std::size_t>(targets, cores)) << targets << " targets, " << to_string(w);
      // the CRC windows of a budget of 16 MiB: a quarter of it over those threads, not over the writers
      EXPECT_EQ(crc_window(std::uint64_t{16} << 20, cpu_jobs(jobs)), (std::size_t{4} << 20) / std::min<std::size_t>(targets, cores));
    }
  }
  for (unsigned asked = 1; asked <= 4 * cores; ++asked) {
    EXPECT_EQ(default_jobs(asked, 1, write_mode::direct), asked);  // what was asked for is kept
    EXPECT_EQ(cpu_jobs(asked), std::min(asked, cores));
  }
  EXPECT_EQ(cpu_jobs(0), cores);
  EXPECT_EQ(crc_window(0, 1), std::size_t{8} << 20);
  EXPECT_EQ(crc_window(1 << 20, 64), std::size_t{64} << 10);  // never under 64 KiB
}

// write_mode direct where the filesystem refuses the direct writes with EINVAL (injected: every
// direct write(2) of the process refused, the test-only hook RESHARD_TEST_DIRECT_EINVAL_AFTER=0,
// detail::direct_refusal_hook()): a conversion of a 2.8 MB checkpoint writes its file buffered
// instead, the same bytes as a run whose direct writes went through, and the summary says what
// the run did: direct writes asked (write_mode), one file written buffered instead
// (direct_refused_files), the same file, size and SHA-256 digest.
TEST(write_mode, direct_writes_refused_by_the_filesystem_give_the_same_files_buffered) {
  temp_dir disk(fs::temp_directory_path());  // a disk, usually: O_DIRECT taken at fcntl
  {
    ckpt_writer w(disk / "src.ckpt");
    std::vector<float> a(700'000), b(1000);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 65521);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i);
    w.write("a", dtype::float32, std::vector<std::int64_t>{700, 1000}, std::as_bytes(std::span(a)));
    w.write("b", dtype::float32, std::vector<std::int64_t>{1000}, std::as_bytes(std::span(b)));
    w.commit();
  }
  transform_options o;
  o.writes = write_mode::direct;
  o.digests = true;
  const transform_summary direct = convert_checkpoint(disk / "src.ckpt", disk / "direct.safetensors", o);
  auto& hook = detail::direct_refusal_hook();
  const detail::scoped_test_limit refuse(hook, 0);
  const transform_summary refused = convert_checkpoint(disk / "src.ckpt", disk / "refused.safetensors", o);
  if (local_disk_filesystem(filesystem_name(disk.path()))) {
    EXPECT_GE(hook.used.load(), 1u) << "no direct write tried";
    EXPECT_EQ(direct.direct_refused_files, 0u);  // a local disk takes O_DIRECT
  }
  EXPECT_EQ(refused.direct_refused_files, 1u);
  EXPECT_TRUE(read_bytes(disk / "direct.safetensors") == read_bytes(disk / "refused.safetensors"));
  EXPECT_GT(fs::file_size(disk / "refused.safetensors"), 2'800'000u);
  EXPECT_EQ(refused.writes, write_mode::direct);
  EXPECT_EQ(refused.files, 1u);
  EXPECT_EQ(refused.bytes_written, direct.bytes_written);
  EXPECT_EQ(refused.bytes_written, fs::file_size(disk / "refused.safetensors"));
  ASSERT_EQ(refused.written.size(), 1u);
  ASSERT_EQ(direct.written.size(), 1u);
  EXPECT_EQ(refused.written[0].sha256, direct.written[0].sha256);
  EXPECT_EQ(refused.written[0].sha256.size(), 64u);
}
