// verify/io/transform_split.cpp: one transform split among workers, without MPI
// (include/reshard/io/transform.hpp: transform_target_bytes, balance_targets,
// transform_checkpoints_for_ranks; the MPI driver is tested by verify/mpi/transform.sh).
//   balance_targets: every rank to exactly one worker, ascending, deterministic, and the
//   largest-first bound max load <= total / workers + largest;
//   the shares' files == transform_checkpoints' files, byte for byte, each share opening only
//   the source files its targets' rank lists name; transform_target_bytes == the progress total.
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

RC_GTEST_PROP(balance_targets, every_rank_once_and_balanced, ()) {
  const auto bytes = *rc::gen::container<std::vector<std::uint64_t>>(rc::gen::inRange<std::uint64_t>(0, 1000));
  const auto parts = *rc::gen::inRange<std::size_t>(1, 9);
  const auto split = balance_targets(bytes, parts);
  RC_ASSERT(split == balance_targets(bytes, parts));
  RC_ASSERT(split.size() == parts);
  std::vector<std::int64_t> all;
  std::uint64_t total = 0, largest = 0, most = 0;
  for (auto b : bytes) total += b, largest = std::max(largest, b);
  for (const auto& share : split) {
    RC_ASSERT(std::is_sorted(share.begin(), share.end()));
    std::uint64_t load = 0;
    for (auto t : share) all.push_back(t), load += bytes[static_cast<std::size_t>(t)];
    most = std::max(most, load);
  }
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> want(bytes.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
  RC_ASSERT(all == want);
  RC_ASSERT(most <= total / parts + largest);
}

TEST(balance_targets, largest_first_to_the_least_loaded) {
  const std::vector<std::uint64_t> bytes{5, 9, 1, 9, 4};
  // largest first: 9 (rank 1) -> w0; 9 (rank 3) -> w1; 5 (rank 0) -> w0 (tie: the lower);
  // 4 (rank 4) -> w1 (9 < 14); 1 (rank 2) -> w1 (13 < 14)
  EXPECT_EQ(balance_targets(bytes, 2), (std::vector<std::vector<std::int64_t>>{{0, 1}, {2, 3, 4}}));
  EXPECT_EQ(balance_targets(bytes, 7)[6], std::vector<std::int64_t>{});
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
