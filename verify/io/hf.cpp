// verify/io/hf.cpp: Hugging Face sharded safetensors checkpoints (include/reshard/io/hf.hpp,
// docs/formats.md section 7): the sharding rule, the index text, random checkpoints written as
// HF directories and read back as one checkpoint, through the engine both ways (bytes, shards,
// metadata, casts on the way), and bad directories refused with the file named and nothing
// written.
#include <reshard/io/transform.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "io_test_util.hpp"

namespace fs = std::filesystem;
using namespace reshard::io;

namespace {

std::vector<std::size_t> shards_of(std::vector<std::uint64_t> sizes, std::uint64_t max) {
  return hf_shards(sizes, max);
}

struct tensor {
  std::string name;
  dtype type;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> data;
};

// A ckpt file of random tensors (random names, dtypes, shapes, bytes), in a random order.
std::vector<tensor> gen_tensors() {
  const std::vector<dtype> types{dtype::float32, dtype::float16, dtype::bfloat16, dtype::int64, dtype::int8,
                                 dtype::boolean, dtype::float64};
  const auto n = *rc::gen::inRange<std::size_t>(1, 12);
  std::vector<tensor> out;
  for (std::size_t i = 0; i < n; ++i) {
    tensor t;
    t.name = "model.layers." + std::to_string(*rc::gen::inRange(0, 1000)) + ".w" + std::to_string(i);
    t.type = *rc::gen::elementOf(types);
    const auto rank = *rc::gen::inRange<std::size_t>(0, 3);
    std::uint64_t count = 1;
    for (std::size_t d = 0; d < rank; ++d) {
      t.dims.push_back(*rc::gen::inRange<std::int64_t>(0, 9));
      count *= static_cast<std::uint64_t>(t.dims.back());
    }
    t.data.resize(static_cast<std::size_t>(count * element_size(t.type)));
    for (auto& b : t.data) b = static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>());
    if (t.type == dtype::boolean)
      for (auto& b : t.data) b &= std::byte{1};
    out.push_back(std::move(t));
  }
  return out;
}

void write_ckpt(const fs::path& f, const std::vector<tensor>& ts) {
  ckpt_writer w(f, {});
  for (const auto& t : ts) {
    std::vector<std::int64_t> dims = t.dims;
    if (dims.empty()) dims = {0};  // MindSpore's scalar dims: [0] with one element
    w.write(t.name, t.type, dims, t.data);
  }
  w.commit();
}

std::vector<std::byte> content(const tensor_ref& e) {
  std::vector<std::byte> out;
  for (auto p : e.pieces) out.insert(out.end(), p.begin(), p.end());
  return out;
}

nlohmann::json read_json(const fs::path& f) {
  const auto b = reshard_test::read_bytes(f);
  return nlohmann::json::parse(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}

}  // namespace

TEST(hf, shards_follow_the_rule) {
  using v = std::vector<std::size_t>;
  EXPECT_EQ(shards_of({}, 10), v{});
  EXPECT_EQ(shards_of({4, 4, 4}, 10), (v{0, 2}));         // 4+4, then 4
  EXPECT_EQ(shards_of({4, 6, 1}, 10), (v{0, 2}));         // 4+6 = 10 fits exactly
  EXPECT_EQ(shards_of({4, 11, 4, 4}, 10), (v{0, 1, 2}));  // 11 alone; the shard after it starts anew
  EXPECT_EQ(shards_of({11}, 10), (v{0}));
  EXPECT_EQ(shards_of({11, 12}, 10), (v{0, 1}));
  EXPECT_EQ(shards_of({0, 0, 10, 0}, 10), (v{0}));
  EXPECT_EQ(hf_shard_name(0, 1), "model.safetensors");
  EXPECT_EQ(hf_shard_name(1, 3), "model-00002-of-00003.safetensors");
  EXPECT_EQ(hf_shard_name(11, 120), "model-00012-of-00120.safetensors");
}

TEST(hf, index_text_is_hugging_faces) {
  const std::string text = hf_index_json(24, {{"b.weight", "model-00002-of-00002.safetensors"},
                                              {"a.weight", "model-00001-of-00002.safetensors"}});
  EXPECT_EQ(text,
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 24\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
            "    \"b.weight\": \"model-00002-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");
}

// ckpt -> HF (random shard bound, casts to BFloat16 for the floating-point tensors half the time)
// -> read as one checkpoint -> ckpt: every tensor comes back; the shards are the rule's over the
// source's order, each in the safetensors library's data order (the widest dtype first, then by
// name: every tensor aligned in the file) with metadata {"format": "pt"}; the index names every
// tensor's shard and the total of the tensor bytes; force replaces an HF checkpoint, old shards
// and all.
RC_GTEST_PROP(hf, ckpt_to_hf_and_back, ()) {
  const auto ts = gen_tensors();
  std::map<std::string, const tensor*> by_name;
  for (const auto& t : ts) by_name[t.name] = &t;
  RC_PRE(by_name.size() == ts.size());
  reshard_test::temp_dir dir;
  write_ckpt(dir / "in.ckpt", ts);
  transform_options opts{.format = checkpoint_format::hf, .sync = false};
  opts.max_shard_bytes = *rc::gen::inRange<std::uint64_t>(1, 2000);
  opts.reads = *rc::gen::element(read_mode::mmap, read_mode::pread);
  const bool cast = *rc::gen::arbitrary<bool>();
  if (cast) opts.casts.all = dtype::bfloat16;
  const auto out_type = [&](dtype t) { return cast && is_floating(t) ? dtype::bfloat16 : t; };
  const auto sum = convert_checkpoint(dir / "in.ckpt", dir / "hf", opts);

  std::vector<std::uint64_t> sizes;
  for (const auto& t : ts) sizes.push_back(t.data.size() / element_size(t.type) * element_size(out_type(t.type)));
  const auto first = hf_shards(sizes, opts.max_shard_bytes);
  const std::size_t count = first.size();
  std::vector<std::string> files;
  for (std::size_t k = 0; k < count; ++k) files.push_back(hf_shard_name(k, count));
  if (count > 1) files.push_back(std::string(hf_index_name));
  std::sort(files.begin(), files.end());
  RC_ASSERT(reshard_test::list_tree(dir / "hf") == files);
  RC_ASSERT(sum.files == files.size());

  std::uint64_t total = 0;
  for (auto s : sizes) total += s;
  if (count > 1) {
    const auto index = read_json(dir / "hf" / hf_index_name);
    RC_ASSERT(index["metadata"]["total_size"].get<std::uint64_t>() == total);
    RC_ASSERT(index["weight_map"].size() == ts.size());
  }
  for (std::size_t k = 0; k < count; ++k) {
    const safetensors_file shard(dir / "hf" / hf_shard_name(k, count));
    RC_ASSERT(shard.metadata() == (std::map<std::string, std::string>{{"format", "pt"}}));
    const std::size_t end = k + 1 < count ? first[k + 1] : ts.size();
    std::vector<const tensor*> order;
    for (std::size_t i = first[k]; i < end; ++i) order.push_back(&ts[i]);
    std::sort(order.begin(), order.end(), [&](const tensor* a, const tensor* b) {  // the widest dtype first
      return safetensors_before(safetensors_order::dtype, out_type(a->type), a->name, out_type(b->type), b->name);
    });
    std::vector<std::string> want;
    std::uint64_t at = 0;  // the data, in that order from offset 0
    for (const tensor* t : order) {
      want.push_back(t->name);
      const safetensors_entry* e = shard.find(t->name);
      RC_ASSERT(e != nullptr);
      RC_ASSERT(e->begin == at);
      at = e->end;
      RC_ASSERT((8 + shard.header_size() + e->begin) % element_size(e->type) == 0);  // aligned in the file
    }
    RC_ASSERT(shard.entries().size() == want.size());
    if (count > 1) {
      const auto index = read_json(dir / "hf" / hf_index_name);
      for (const auto& n : want) RC_ASSERT(index["weight_map"][n].get<std::string>() == hf_shard_name(k, count));
    }
  }

  // read back as one checkpoint: every tensor, cast as asked
  {
    const checkpoint_reader rd(dir / "hf");
    RC_ASSERT(rd.format() == checkpoint_format::hf);
    RC_ASSERT(rd.entries().size() == ts.size());
    for (const auto& t : ts) {
      const tensor_ref* e = rd.find(t.name);
      RC_ASSERT(e != nullptr);
      RC_ASSERT(e->type == out_type(t.type));
      RC_ASSERT(e->dims == t.dims);
      std::vector<std::byte> want(t.data.size() / element_size(t.type) * element_size(e->type));
      cast_elements(t.data, t.type, want, e->type);
      RC_ASSERT(content(*e) == want);
    }
  }
  // and through the engine again, to ckpt: the same tensors (by pread or the mapping)
  convert_checkpoint(dir / "hf", dir / "back.ckpt",
                     {.sync = false, .reads = *rc::gen::element(read_mode::mmap, read_mode::pread)});
  const checkpoint_reader back(dir / "back.ckpt");
  const checkpoint_reader hf(dir / "hf");
  RC_ASSERT(back.entries().size() == ts.size());
  for (const auto& e : back.entries()) RC_ASSERT(content(e) == content(*hf.find(e.name)));
  // an existing HF checkpoint is not replaced without force
  RC_ASSERT(reshard_test::throws_error([&] { convert_checkpoint(dir / "in.ckpt", dir / "hf", opts); }, {"exists"}));
  // force: replaced by one with other shards (a bound of one byte: every tensor its own shard,
  // but empty ones), swapped in whole; the user's files (config.json, a subdirectory, a symlink)
  // are the same files after it (their inodes), and nothing is left beside the directory
  reshard_test::write_text(dir / "hf" / "config.json", "{}");
  fs::create_directory(dir / "hf" / "tokenizer");
  reshard_test::write_text(dir / "hf" / "tokenizer" / "vocab.txt", "a b c");
  fs::create_symlink("config.json", dir / "hf" / "link.json");
  const auto inode = [&](const fs::path& p) {
    struct ::stat st {};
    return ::lstat(p.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  const auto config_ino = inode(dir / "hf" / "config.json");
  const auto vocab_ino = inode(dir / "hf" / "tokenizer" / "vocab.txt");
  const auto link_ino = inode(dir / "hf" / "link.json");
  opts.force = true;
  opts.max_shard_bytes = 1;
  const auto replaced = convert_checkpoint(dir / "in.ckpt", dir / "hf", opts);
  for (const auto& w : replaced.warnings)
    RC_ASSERT(w.find("not atomically") == std::string::npos);  // swapped
  const std::size_t count1 = hf_shards(sizes, 1).size();
  std::vector<std::string> now{"config.json", "link.json", "tokenizer", "tokenizer/vocab.txt"};
  for (std::size_t k = 0; k < count1; ++k) now.push_back(hf_shard_name(k, count1));
  if (count1 > 1) now.push_back(std::string(hf_index_name));
  std::sort(now.begin(), now.end());
  RC_ASSERT(reshard_test::list_tree(dir / "hf") == now);
  RC_ASSERT(checkpoint_reader(dir / "hf").entries().size() == ts.size());
  RC_ASSERT(inode(dir / "hf" / "config.json") == config_ino);
  RC_ASSERT(inode(dir / "hf" / "tokenizer" / "vocab.txt") == vocab_ino);
  RC_ASSERT(inode(dir / "hf" / "link.json") == link_ino);
  RC_ASSERT(fs::read_symlink(dir / "hf" / "link.json") == "config.json");
  for (const auto& e : fs::directory_iterator(dir.path()))
    RC_ASSERT(e.path().filename().string().find(".reshard-") == std::string::npos);
}

// The names that replacing a Hugging Face checkpoint takes for its old shards, and only those.
TEST(hf, shard_names_are_recognised) {
  for (std::size_t n : {2u, 3u, 17u, 99999u})
    for (std::size_t k : {std::size_t{0}, n / 2, n - 1})
      EXPECT_TRUE(is_hf_shard_name(hf_shard_name(k, n))) << k << n;
  for (const char* name :
       {"model.safetensors", "model.safetensors.index.json", "model-0001-of-00002.safetensors",
        "model-00001-of-000002.safetensors", "model-00001-of-0000x.safetensors",
        "model-00001_of-00002.safetensors", "model-00001-of-00002.safetensor",
        "model-00001-of-00002.safetensors.reshard-1.0.part", "xmodel-00001-of-00002.safetensors",
        "config.json", ""})
    EXPECT_FALSE(is_hf_shard_name(name)) << name;
}

namespace {
// A 3-shard HF directory of tensors a, b, c (Float32 [2]).
void write_three(const fs::path& dir) {
  const std::vector<std::byte> data(8, std::byte{1});
  const std::vector<std::int64_t> shape{2};
  fs::create_directories(dir);
  const char* names[] = {"a", "b", "c"};
  std::map<std::string, std::string> wm;
  for (std::size_t k = 0; k < 3; ++k) {
    const safetensors_tensor_view v{names[k], dtype::float32, shape, data};
    write_safetensors(dir / hf_shard_name(k, 3), std::span(&v, 1), {.metadata = {{"format", "pt"}}});
    wm[names[k]] = hf_shard_name(k, 3);
  }
  reshard_test::write_text(dir / hf_index_name, hf_index_json(24, wm));
}

// Reading `dir` fails with a message holding `what`, and converting it writes nothing.
void refused(const fs::path& dir, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(reshard_test::throws_error([&] { checkpoint_reader rd(dir); }, {what}));
  EXPECT_TRUE(reshard_test::throws_error([&] { convert_checkpoint(dir, dir.parent_path() / "out.ckpt"); }, {what}));
  EXPECT_FALSE(fs::exists(dir.parent_path() / "out.ckpt"));
}
}  // namespace

TEST(hf, bad_directories_are_refused_naming_the_file) {
  reshard_test::temp_dir tmp;
  const fs::path d = tmp / "m";
  write_three(d);
  {
    const checkpoint_reader rd(d);  // the good one
    EXPECT_EQ(rd.entries().size(), 3u);
    EXPECT_EQ(rd.file_size(), fs::file_size(d / hf_shard_name(0, 3)) * 3);
  }
  const auto index = reshard_test::read_bytes(d / hf_index_name);
  const std::string text(reinterpret_cast<const char*>(index.data()), index.size());
  const auto with_index = [&](std::string t) { reshard_test::write_text(d / hf_index_name, t); };

  fs::rename(d / hf_shard_name(1, 3), tmp / "away");
  refused(d, (d / hf_shard_name(1, 3)).string() + ": cannot open");
  fs::rename(tmp / "away", d / hf_shard_name(1, 3));

  with_index(nlohmann::json::parse(text).dump().replace(0, 1, "["));
  refused(d, std::string(hf_index_name));
  with_index(R"({"metadata": {}, "weight_map": {"a": "../x.safetensors"}})");
  refused(d, "is not a file name in the directory");
  with_index(R"({"metadata": {}})");
  refused(d, "no object \"weight_map\"");
  with_index(R"({"weight_map": {"a": "model-00001-of-00003.safetensors", "b": "model-00001-of-00003.safetensors",
                 "c": "model-00003-of-00003.safetensors"}})");
  refused(d, "has no tensor 'b', which");  // the index puts b in shard 1
  with_index(R"({"weight_map": {"a": "model-00001-of-00003.safetensors", "c": "model-00003-of-00003.safetensors"}})");
  // shard 2 is not listed, so b is not read at all: a two-shard checkpoint of a and c
  EXPECT_EQ(checkpoint_reader(d).entries().size(), 2u);
  with_index(R"({"weight_map": {"a": "model-00001-of-00003.safetensors", "b": "model-00002-of-00003.safetensors",
                 "c": "model-00003-of-00003.safetensors", "d": "model-00003-of-00003.safetensors"}})");
  refused(d, "has no tensor 'd'");
  with_index(text);
  // a shard that also holds a tensor of another shard
  {
    const std::vector<std::byte> data(8, std::byte{2});
    const std::vector<std::int64_t> shape{2};
    const safetensors_tensor_view vs[] = {{"a", dtype::float32, shape, data}, {"c", dtype::float32, shape, data}};
    write_safetensors(d / hf_shard_name(2, 3), vs, {.overwrite = true});
  }
  refused(d, "is also here, but");
  // a truncated shard
  write_three(tmp / "t");
  auto bytes = reshard_test::read_bytes(tmp / "t" / hf_shard_name(0, 3));
  bytes.resize(bytes.size() - 1);
  reshard_test::write_bytes(tmp / "t" / hf_shard_name(0, 3), bytes);
  refused(tmp / "t", hf_shard_name(0, 3));
  // an index and a model.safetensors it does not list: ambiguous, refused (regression: the index
  // was read, with no word, where other loaders read the single file)
  write_three(tmp / "both");
  fs::copy_file(tmp / "both" / hf_shard_name(0, 3), tmp / "both" / hf_single_name);
  refused(tmp / "both", "holds both model.safetensors.index.json and model.safetensors, which the index does not list");
  // ... but one the index lists is a shard like any other
  {
    const auto listed = nlohmann::json::parse(text);
    auto wm = listed;
    for (auto& [name, file] : wm["weight_map"].items())
      if (file == hf_shard_name(0, 3)) file = std::string(hf_single_name);
    fs::rename(tmp / "both" / hf_shard_name(0, 3), tmp / "both" / "gone");
    reshard_test::write_text(tmp / "both" / hf_index_name, wm.dump());
    EXPECT_EQ(checkpoint_reader(tmp / "both").entries().size(), 3u);
  }
  // not a Hugging Face checkpoint
  fs::create_directories(tmp / "empty");
  EXPECT_TRUE(reshard_test::throws_error([&] { checkpoint_reader rd(tmp / "empty"); }, {"neither"}));
}

// A shard that is a FIFO is refused (opening it blocked until a writer came), and a file cut
// short after it was indexed is named by the read that comes short: a shard and a ckpt file.
TEST(hf, fifo_shards_and_files_truncated_while_read_are_named) {
  reshard_test::temp_dir tmp;
  const fs::path d = tmp / "m";
  write_three(d);
  const fs::path shard1 = d / hf_shard_name(1, 3), shard2 = d / hf_shard_name(2, 3);
  fs::rename(shard1, tmp / "away");
  ASSERT_EQ(::mkfifo(shard1.c_str(), 0600), 0);
  refused(d, shard1.string() + ": is a FIFO, not a regular file");
  fs::remove(shard1);
  fs::rename(tmp / "away", shard1);

  // reads the last tensor (8 bytes), cuts `file` where that tensor starts (`start`), reads again
  const auto cut_while_read = [](const checkpoint_reader& rd, const fs::path& file,
                                 std::uint64_t start, const std::string& what) {
    const tensor_ref& e = rd.entries().back();
    std::vector<std::byte> buf(e.content_size());
    ASSERT_EQ(buf.size(), 8u);
    const std::uint64_t at = rd.offset_of(e.pieces[0].data());
    rd.pread_into(buf, at);  // opens the file for reads
    fs::resize_file(file, start);
    EXPECT_TRUE(
        reshard_test::throws_error([&] { rd.pread_into(buf, at); },
                                   {what, file.string(),
                                    "was truncated while being read: expected 8 bytes at offset " +
                                        std::to_string(start) + ", got 0"}));
  };
  {
    const checkpoint_reader rd(d);
    cut_while_read(rd, shard2, fs::file_size(shard2) - 8, "hf: ");  // a shard ends with its data
  }
  const std::vector<std::byte> data(8, std::byte{1});
  {
    ckpt_writer w(tmp / "one.ckpt", {});
    w.write("w", dtype::float32, std::vector<std::int64_t>{2}, data);
    w.commit();
  }
  const checkpoint_reader rd(tmp / "one.ckpt");
  cut_while_read(rd, tmp / "one.ckpt", rd.offset_of(rd.entries().back().pieces[0].data()),
                 "checkpoint: ");
}

// split --format hf writes a Hugging Face checkpoint per target rank, DST/rank_<t>/<prefix><t>/,
// and a distributed source whose rank directory holds one such checkpoint is read from it
// (rank_file): split, then merge back, gives the tensors again.
TEST(hf, a_rank_directory_holding_a_hugging_face_checkpoint_is_read) {
  reshard_test::temp_dir tmp;
  std::vector<tensor> ts(1);
  ts[0].name = "w";
  ts[0].type = dtype::float32;
  ts[0].dims = {3};
  ts[0].data = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}, std::byte{6},
                std::byte{7}, std::byte{8}, std::byte{9}, std::byte{10}, std::byte{11}, std::byte{12}};
  write_ckpt(tmp / "x.ckpt", ts);
  transform_options hf;
  hf.format = checkpoint_format::hf;
  hf.sync = false;
  split_checkpoint(tmp / "x.ckpt", tmp / "out", "", "c_", hf);
  ASSERT_TRUE(is_hf_directory(tmp / "out" / "rank_0" / "c_0"));
  merge_checkpoints(tmp / "out", tmp / "back.ckpt", "", {.sync = false});
  checkpoint_reader back(tmp / "back.ckpt");
  ASSERT_EQ(back.entries().size(), 1u);
  EXPECT_EQ(content(back.entries()[0]), ts[0].data);
  // two Hugging Face checkpoints in one rank directory: ambiguous, refused naming both
  std::filesystem::create_directories(tmp / "out" / "rank_0" / "c_1");
  std::filesystem::copy(tmp / "out" / "rank_0" / "c_0", tmp / "out" / "rank_0" / "c_1",
                        std::filesystem::copy_options::recursive);
  EXPECT_TRUE(reshard_test::throws_error([&] { merge_checkpoints(tmp / "out", tmp / "b2.ckpt", "", {.sync = false}); },
                                         {"several Hugging Face checkpoints", "c_0", "c_1"}));
}

// A safetensors file converted from a Hugging Face checkpoint carries Hugging Face's metadata,
// {"format": "pt"} (transformers refuses other values); one converted from a MindSpore ckpt
// keeps MindSpore's {"format": "ms"}. (Regression: convert --in HF --out x.safetensors wrote "ms".)
TEST(hf, safetensors_from_a_hugging_face_checkpoint_says_pt) {
  reshard_test::temp_dir dir;
  std::vector<tensor> ts(2);
  ts[0].name = "a";
  ts[0].type = dtype::float32;
  ts[0].dims = {2};
  ts[0].data.resize(8, std::byte{1});
  ts[1].name = "b";
  ts[1].type = dtype::int64;
  ts[1].dims = {1};
  ts[1].data.resize(8, std::byte{2});
  write_ckpt(dir / "in.ckpt", ts);
  transform_options hf;
  hf.format = checkpoint_format::hf;
  hf.sync = false;
  convert_checkpoint(dir / "in.ckpt", dir / "hf", hf);
  convert_checkpoint(dir / "hf", dir / "x" / "model.safetensors", {.sync = false});
  convert_checkpoint(dir / "in.ckpt", dir / "ms.safetensors", {.sync = false});
  EXPECT_EQ(safetensors_file(dir / "x" / "model.safetensors").metadata().at("format"), "pt");
  EXPECT_EQ(safetensors_file(dir / "ms.safetensors").metadata().at("format"), "ms");
  EXPECT_EQ(safetensors_file(dir / "hf" / "model.safetensors").metadata().at("format"), "pt");
}
