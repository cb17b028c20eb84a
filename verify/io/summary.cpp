// verify/io/summary.cpp: the one JSON form of a transform's summary (io/summary.hpp). Random
// summaries read back whole from their JSON; merge_summaries of random parts sums, maxima and
// unions every field, and merging a summary alone gives it back; the preview's JSON names every
// target's reads by file.
#include <reshard/io/summary.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace io = reshard::io;

namespace {

rc::Gen<std::string> gen_name() {
  return rc::gen::container<std::string>(rc::gen::element('a', 'b', '.', '0', '_', '"', '\\', 'x'));
}

rc::Gen<io::dtype> gen_dtype() { return rc::gen::elementOf(std::vector<io::dtype>(io::all_dtypes.begin(), io::all_dtypes.end())); }

io::transform_summary random_summary() {
  io::transform_summary s;
  s.files = *rc::gen::inRange<std::size_t>(0, 1000);
  s.sliced = *rc::gen::inRange<std::size_t>(0, 1000);
  s.copied = *rc::gen::inRange<std::size_t>(0, 1000);
  s.source_files = *rc::gen::inRange<std::size_t>(0, 1000);
  s.source_bytes = *rc::gen::arbitrary<std::uint64_t>();
  s.bytes_read = *rc::gen::arbitrary<std::uint64_t>();
  s.file_bytes_read = *rc::gen::arbitrary<std::uint64_t>();
  s.bytes_written = *rc::gen::arbitrary<std::uint64_t>();
  s.seconds = *rc::gen::inRange(0, 1 << 20) / 1024.0;
  s.peak_rss_bytes = *rc::gen::arbitrary<std::uint64_t>();
  s.jobs = *rc::gen::inRange(1u, 64u);
  s.max_memory = *rc::gen::arbitrary<std::uint64_t>();
  s.buffer_bytes = *rc::gen::arbitrary<std::uint64_t>();
  s.reads = *rc::gen::element(io::read_mode::automatic, io::read_mode::mmap, io::read_mode::pread);
  s.writes = *rc::gen::element(io::write_mode::buffered, io::write_mode::direct);
  if (s.writes == io::write_mode::direct) s.direct_refused_files = *rc::gen::inRange<std::size_t>(0, 1000);
  const auto fs_list = *rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>("ext4", "tmpfs", "fuse"));
  const std::set<std::string> fs(fs_list.begin(), fs_list.end());
  for (const auto& f : fs) s.source_filesystem += (s.source_filesystem.empty() ? "" : ",") + f;
  s.synced = *rc::gen::arbitrary<bool>();
  for (const auto& p : *rc::gen::container<std::vector<std::string>>(gen_name())) s.outputs.emplace_back("out/" + p);
  s.warnings = *rc::gen::container<std::vector<std::string>>(gen_name());
  const auto n_written = *rc::gen::inRange(0, 4);
  for (int i = 0; i < n_written; ++i) {
    io::written_file w;
    w.path = "out/" + *gen_name();
    w.bytes = *rc::gen::arbitrary<std::uint64_t>();
    w.sha256 = *rc::gen::element<std::string>("", std::string(64, 'a'));
    const auto n_tensors = *rc::gen::inRange(0, 4);
    for (int k = 0; k < n_tensors; ++k)
      w.tensors.push_back({*gen_name(), *gen_dtype(), *rc::gen::container<std::vector<std::int64_t>>(rc::gen::inRange<std::int64_t>(0, 1 << 20))});
    s.written.push_back(std::move(w));
  }
  const auto cast_names = *rc::gen::container<std::vector<std::string>>(gen_name());
  for (const auto& name : std::set<std::string>(cast_names.begin(), cast_names.end()))
    s.casts.push_back({name, *gen_dtype(), *gen_dtype()});
  return s;
}

void expect_same(const io::transform_summary& a, const io::transform_summary& b) {
  RC_ASSERT(a.files == b.files);
  RC_ASSERT(a.sliced == b.sliced);
  RC_ASSERT(a.copied == b.copied);
  RC_ASSERT(a.source_files == b.source_files);
  RC_ASSERT(a.source_bytes == b.source_bytes);
  RC_ASSERT(a.bytes_read == b.bytes_read);
  RC_ASSERT(a.file_bytes_read == b.file_bytes_read);
  RC_ASSERT(a.bytes_written == b.bytes_written);
  RC_ASSERT(a.seconds == b.seconds);
  RC_ASSERT(a.peak_rss_bytes == b.peak_rss_bytes);
  RC_ASSERT(a.jobs == b.jobs);
  RC_ASSERT(a.max_memory == b.max_memory);
  RC_ASSERT(a.buffer_bytes == b.buffer_bytes);
  RC_ASSERT(a.reads == b.reads);
  RC_ASSERT(a.writes == b.writes);
  RC_ASSERT(a.direct_refused_files == b.direct_refused_files);
  RC_ASSERT(a.source_filesystem == b.source_filesystem);
  RC_ASSERT(a.synced == b.synced);
  RC_ASSERT(a.outputs == b.outputs);
  RC_ASSERT(a.warnings == b.warnings);
  RC_ASSERT(a.written.size() == b.written.size());
  for (std::size_t i = 0; i < a.written.size(); ++i) {
    RC_ASSERT(a.written[i].path == b.written[i].path);
    RC_ASSERT(a.written[i].bytes == b.written[i].bytes);
    RC_ASSERT(a.written[i].sha256 == b.written[i].sha256);
    RC_ASSERT(a.written[i].tensors.size() == b.written[i].tensors.size());
    for (std::size_t k = 0; k < a.written[i].tensors.size(); ++k) {
      RC_ASSERT(a.written[i].tensors[k].name == b.written[i].tensors[k].name);
      RC_ASSERT(a.written[i].tensors[k].type == b.written[i].tensors[k].type);
      RC_ASSERT(a.written[i].tensors[k].dims == b.written[i].tensors[k].dims);
    }
  }
  RC_ASSERT(a.casts.size() == b.casts.size());
  for (std::size_t i = 0; i < a.casts.size(); ++i) {
    RC_ASSERT(a.casts[i].name == b.casts[i].name);
    RC_ASSERT(a.casts[i].from == b.casts[i].from);
    RC_ASSERT(a.casts[i].to == b.casts[i].to);
  }
}

}  // namespace

RC_GTEST_PROP(summary, read_back_from_its_json_whole, ()) {
  const auto s = random_summary();
  // through the text, as the MPI front sends it
  const auto text = io::to_json(s, io::summary_detail::tensors).dump();
  expect_same(io::summary_from_json(nlohmann::json::parse(text)), s);
}

RC_GTEST_PROP(summary, the_brief_json_lists_the_files_without_their_tensors, ()) {
  const auto s = random_summary();
  const auto j = io::to_json(s);
  RC_ASSERT(j.at("written").size() == s.written.size());
  for (std::size_t i = 0; i < s.written.size(); ++i) {
    RC_ASSERT(j["written"][i].at("path") == s.written[i].path.string());
    RC_ASSERT(j["written"][i].at("sha256") == s.written[i].sha256);
    RC_ASSERT(!j["written"][i].contains("tensors"));
  }
  RC_ASSERT(j.at("casts").size() == s.casts.size());
  RC_ASSERT(j.at("read_mode") == std::string(io::to_string(s.reads)));
  RC_ASSERT(j.at("write_mode") == std::string(io::to_string(s.writes)));
  RC_ASSERT(j.at("direct_refused_files") == s.direct_refused_files);
}

RC_GTEST_PROP(summary, merging_one_summary_gives_it_back, ()) {
  const auto s = random_summary();
  io::transform_summary dedup = s;  // merge keeps each distinct warning once
  dedup.warnings.clear();
  for (const auto& w : s.warnings)
    if (std::find(dedup.warnings.begin(), dedup.warnings.end(), w) == dedup.warnings.end()) dedup.warnings.push_back(w);
  expect_same(io::merge_summaries(std::vector{s}), dedup);
}

RC_GTEST_PROP(summary, merge_sums_maxima_minima_and_unions_every_field, ()) {
  const auto n = *rc::gen::inRange(1, 5);
  std::vector<io::transform_summary> parts;
  for (int i = 0; i < n; ++i) parts.push_back(random_summary());
  const auto m = io::merge_summaries(parts);
  std::uint64_t files = 0, bytes_written = 0, jobs = 0, bytes_read = 0, file_bytes_read = 0, refused = 0;
  double seconds = 0;
  std::uint64_t rss = 0, buffer = parts.front().buffer_bytes;
  bool synced = true;
  std::size_t outputs = 0, written = 0;
  std::set<std::string> casts, warnings, filesystems;
  for (const auto& p : parts) {
    files += p.files;
    bytes_written += p.bytes_written;
    bytes_read += p.bytes_read;  // modulo 2^64, as the merge adds them
    file_bytes_read += p.file_bytes_read;
    refused += p.direct_refused_files;
    jobs += p.jobs;
    seconds = std::max(seconds, p.seconds);
    rss = std::max(rss, p.peak_rss_bytes);
    buffer = std::min(buffer, p.buffer_bytes);
    synced = synced && p.synced;
    outputs += p.outputs.size();
    written += p.written.size();
    for (const auto& c : p.casts) casts.insert(c.name);
    warnings.insert(p.warnings.begin(), p.warnings.end());
    for (std::size_t at = 0; at < p.source_filesystem.size();) {
      auto end = p.source_filesystem.find(',', at);
      if (end == std::string::npos) end = p.source_filesystem.size();
      filesystems.insert(p.source_filesystem.substr(at, end - at));
      at = end + 1;
    }
  }
  RC_ASSERT(m.files == files);
  RC_ASSERT(m.bytes_written == bytes_written);
  RC_ASSERT(m.bytes_read == bytes_read);
  RC_ASSERT(m.file_bytes_read == file_bytes_read);
  RC_ASSERT(m.direct_refused_files == refused);
  RC_ASSERT(m.jobs == jobs);
  RC_ASSERT(m.seconds == seconds);
  RC_ASSERT(m.peak_rss_bytes == rss);
  RC_ASSERT(m.buffer_bytes == buffer);
  RC_ASSERT(m.synced == synced);
  RC_ASSERT(m.outputs.size() == outputs);
  RC_ASSERT(m.written.size() == written);
  // the casts of every part, each name once, sorted by name
  std::vector<std::string> cast_names;
  for (const auto& c : m.casts) cast_names.push_back(c.name);
  RC_ASSERT(cast_names == std::vector<std::string>(casts.begin(), casts.end()));
  RC_ASSERT(std::set<std::string>(m.warnings.begin(), m.warnings.end()) == warnings);
  RC_ASSERT(m.warnings.size() == warnings.size());
  std::string fs;
  for (const auto& f : filesystems) fs += (fs.empty() ? "" : ",") + f;
  RC_ASSERT(m.source_filesystem == fs);
}

TEST(summary, a_dry_runs_json_is_its_preview_with_the_casts) {
  io::transform_summary s;
  io::transform_preview p;
  p.sources = {{0, "src/rank_0/a.ckpt"}, {1, "src/rank_1/b.ckpt"}};
  io::target_preview t;
  t.rank = 0;
  t.path = "dst/rank_0/checkpoint_0.ckpt";
  t.tensor_bytes = 96;
  t.reads = {{0, 64}, {1, 32}};
  t.cross_bytes = 32;
  t.lower_bound_bytes = 32;
  p.targets.push_back(t);
  p.bytes_read = 96;
  p.bytes_written = 96;
  s.preview = p;
  s.casts.push_back({"w", io::dtype::float32, io::dtype::bfloat16});
  const auto j = io::to_json(s);
  EXPECT_EQ(j.at("dry_run"), true);
  EXPECT_EQ(j.at("source_files"), 2);
  ASSERT_EQ(j.at("targets").size(), 1u);
  EXPECT_EQ(j["targets"][0].at("file"), "dst/rank_0/checkpoint_0.ckpt");
  EXPECT_EQ(j["targets"][0].at("reads")[1].at("file"), "src/rank_1/b.ckpt");
  EXPECT_EQ(j["targets"][0].at("reads")[1].at("bytes"), 32);
  EXPECT_EQ(j["targets"][0].at("cross_rank_bytes"), 32);
  ASSERT_EQ(j.at("casts").size(), 1u);
  EXPECT_EQ(j["casts"][0].at("to"), "BFloat16");
  EXPECT_FALSE(j.contains("files"));
}

TEST(summary, a_summary_missing_a_key_is_an_error_naming_it) {
  auto j = io::to_json(io::transform_summary{}, io::summary_detail::tensors);
  j.erase("bytes_read");
  try {
    (void)io::summary_from_json(j);
    FAIL() << "no error";
  } catch (const reshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes_read"), std::string::npos) << e.what();
  }
  j = io::to_json(io::transform_summary{}, io::summary_detail::tensors);
  j["read_mode"] = "mmapp";
  EXPECT_THROW((void)io::summary_from_json(j), reshard::error);
  j = io::to_json(io::transform_summary{}, io::summary_detail::tensors);
  j["write_mode"] = "auto";  // a summary says the mode that ran, never auto
  EXPECT_THROW((void)io::summary_from_json(j), reshard::error);
  j.erase("write_mode");  // a summary of an earlier version: buffered
  EXPECT_EQ(io::summary_from_json(j).writes, io::write_mode::buffered);
  j = io::to_json(io::transform_summary{}, io::summary_detail::tensors);
  j.erase("direct_refused_files");  // a summary of an earlier version: no file fell back
  EXPECT_EQ(io::summary_from_json(j).direct_refused_files, 0u);
  j["direct_refused_files"] = "two";
  EXPECT_THROW((void)io::summary_from_json(j), reshard::error);
}
