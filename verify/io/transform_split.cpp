// verify/io/transform_split.cpp: one transform split among workers, without MPI
// (include/reshard/io/transform.hpp: transform_target_bytes, balance_targets,
// transform_checkpoints_for_ranks; the MPI driver is tested by verify/mpi/transform.sh).
//   balance_targets: every rank to exactly one worker, ascending, deterministic, each worker a
//   contiguous run of ranks in worker order, and every worker's bytes within the largest rank's
//   of total / workers (law E9);
//   the shares' files == transform_checkpoints' files, byte for byte, each share opening only
//   the source files its targets' rank lists name; transform_target_bytes == the progress total;
//   transform_stage_bytes (one target per stage) == transform_target_bytes where a stage's
//   slices are equal, and at each stage's first rank.
#include <reshard/io/transform.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;

RC_GTEST_PROP(balance_targets, every_rank_once_contiguous_and_balanced, ()) {
  const auto bytes = *rc::gen::container<std::vector<std::uint64_t>>(
      rc::gen::oneOf(rc::gen::inRange<std::uint64_t>(0, 1000), rc::gen::just<std::uint64_t>(0),
                     rc::gen::inRange<std::uint64_t>(std::uint64_t{1} << 62, std::uint64_t{1} << 63)));
  const auto parts = *rc::gen::inRange<std::size_t>(1, 70);
  const auto split = balance_targets(bytes, parts);
  RC_ASSERT(split == balance_targets(bytes, parts));
  RC_ASSERT(split.size() == parts);
  __extension__ typedef unsigned __int128 wide;  // 1000 ranks of up to 2^63 bytes
  wide total = 0;
  std::uint64_t largest = 0;
  for (auto b : bytes) total += b, largest = std::max(largest, b);
  std::vector<std::int64_t> all;
  for (const auto& share : split) {
    wide load = 0;
    for (auto t : share) all.push_back(t), load += bytes[static_cast<std::size_t>(t)];
    // |load - total / parts| < largest, as parts * load against total (no rounding)
    if (total > 0) {
      const wide fair = total, got = load * parts, slack = wide{largest} * parts;
      RC_ASSERT(got < fair + slack);
      RC_ASSERT(got + slack > fair);
    }
  }
  // in worker order, the ranks 0 .. n-1: each share a contiguous run, each rank once
  std::vector<std::int64_t> want(bytes.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
  RC_ASSERT(all == want);
  // all bytes 0: by count, every share within one rank of n / parts
  if (total == 0)
    for (const auto& share : split) RC_ASSERT(share.size() * parts + parts > bytes.size() && share.size() * parts < bytes.size() + parts);
}

TEST(balance_targets, contiguous_runs_by_the_middle_of_each_ranks_bytes) {
  const std::vector<std::uint64_t> bytes{5, 9, 1, 9, 4};  // 28 bytes; middles 2.5, 9.5, 14.5, 19.5, 26
  // 2 workers: [0, 14) and [14, 28)
  EXPECT_EQ(balance_targets(bytes, 2), (std::vector<std::vector<std::int64_t>>{{0, 1}, {2, 3, 4}}));
  // 7 workers, 4 bytes each: the middles fall in slices 0, 2, 3, 4 and 6
  EXPECT_EQ(balance_targets(bytes, 7), (std::vector<std::vector<std::int64_t>>{{0}, {}, {1}, {2}, {3}, {}, {4}}));
  // equal ranks: equal runs; no bytes: by count
  EXPECT_EQ(balance_targets(std::vector<std::uint64_t>(6, 7), 3),
            (std::vector<std::vector<std::int64_t>>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(balance_targets(std::vector<std::uint64_t>(4, 0), 2), (std::vector<std::vector<std::int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(throws_error([&] { balance_targets(bytes, 0); }, {"balance_targets", "parts is 0"}));
}

namespace {

struct scenario {
  temp_dir dir;
  fs::path src, dst;
  explicit scenario(const std::string& name) {
    auto r = run_python("ms_scenario.py", {"gen", name, dir.path().string()});
    EXPECT_EQ(r.status, 0) << r.output;
    src = dir / "src_strategy.ckpt";
    dst = dir / "dst_strategy.ckpt";
  }
};

// path relative to `root` -> content, of every file under it
std::map<std::string, std::vector<std::byte>> files_under(const fs::path& root) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = read_bytes(e.path());
  return out;
}

}  // namespace

TEST(transform_split, shares_write_the_files_of_one_transform) {
  for (const char* name : {"retrain_8to4", "uneven_8to3"}) {
    SCOPED_TRACE(name);
    scenario s(name);
    std::uint64_t total = 0;
    transform_options one;
    one.progress = [&](const transform_progress& p) { total = p.bytes_total; };
    transform_checkpoints(s.dir / "src", s.dir / "one", "checkpoint_", s.src, s.dst, one);
    const auto bytes = transform_target_bytes(s.dir / "src", s.src, s.dst);
    std::uint64_t sum = 0;
    for (auto b : bytes) sum += b;
    EXPECT_EQ(sum, total);
    // one target per pipeline stage sized (no stages here: rank 0's bytes for every rank)
    const auto staged = transform_stage_bytes(s.dir / "src", s.src, s.dst);
    ASSERT_EQ(staged.size(), bytes.size());
    EXPECT_EQ(staged.front(), bytes.front());
    if (std::string(name) == "retrain_8to4") {
      EXPECT_EQ(staged, bytes) << "every rank's slices are equal";
    }
    for (std::size_t workers : {2u, 3u}) {
      const fs::path out = s.dir / ("split" + std::to_string(workers));
      for (const auto& share : balance_targets(bytes, workers)) {
        const auto summary = transform_checkpoints_for_ranks(s.dir / "src", out, "checkpoint_", s.src, s.dst, share,
                                                             {.jobs = 2});
        std::set<std::int64_t> needed;
        for (auto t : share)
          for (auto r : rank_list_for_transform(t, s.src, s.dst)) needed.insert(r);
        EXPECT_EQ(summary.files, share.size());
        EXPECT_EQ(summary.source_files, needed.size()) << "a share opens the files its rank lists name, no more";
      }
      EXPECT_EQ(files_under(out), files_under(s.dir / "one")) << workers << " workers";
    }
  }
}

TEST(transform_split, bad_ranks_are_named) {
  scenario s("infer_8to4");
  s.dst = s.dir / "dst_strategy.json";
  const std::vector<std::int64_t> twice{1, 1}, outside{4};
  EXPECT_TRUE(throws_error(
      [&] { transform_checkpoints_for_ranks(s.dir / "src", s.dir / "out", "c_", s.src, s.dst, twice); },
      {"transform_checkpoints", "target rank 1 is listed twice"}));
  EXPECT_TRUE(throws_error(
      [&] { transform_checkpoints_for_ranks(s.dir / "src", s.dir / "out", "c_", s.src, s.dst, outside); },
      {"target rank 4 is not a rank of the target strategy", "4 ranks"}));
  EXPECT_FALSE(fs::exists(s.dir / "out"));
}
