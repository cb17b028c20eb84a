// Tests of reshard/io/torch_archive.hpp and reshard/io/dcp.hpp: the DCP checkpoints that real
// torch 1.13 wrote (verify/data/dcp/, by make_fixtures.py) decode to what torch's own
// load_state_dict read from them, bit for bit; the torch 2.x module paths (metadata written by
// pickle_writer.hpp the way torch pickles it); and each refusal by name: a global outside the
// allow-list, a truncated archive, a compressed entry, an entry out of bounds, a strided tensor, a
// chunk outside its tensor, unknown fields, transform descriptors, a path leaving the directory,
// a chunk whose archive disagrees with the metadata. Properties: no truncation or byte flip of a
// real archive or `.metadata` does anything but decode or throw reshard::error.
#include <reshard/io/dcp.hpp>

#include "dcp_fixtures.hpp"
#include "io_test_util.hpp"
#include "pickle_writer.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;

namespace {


// The whole tensor, assembled from its chunks' bytes (row-major), and how often each element
// was written.
struct assembled {
  std::vector<std::byte> bytes;
  std::vector<int> writes;
};
assembled assemble(dcp_checkpoint& c, const dcp_tensor& t) {
  const auto es = element_size(t.type);
  const auto n = *element_count(t.size);
  assembled a{std::vector<std::byte>(n * es), std::vector<int>(n, 0)};
  for (std::size_t k = 0; k < t.chunks.size(); ++k) {
    const auto& ch = t.chunks[k];
    const auto tensor = c.chunk(t, k);
    const auto m = *element_count(ch.sizes);
    std::vector<std::int64_t> idx(ch.sizes.size(), 0);  // odometer over the chunk
    for (std::uint64_t e = 0; e < m; ++e) {
      std::uint64_t flat = 0;
      for (std::size_t d = 0; d < idx.size(); ++d) flat = flat * static_cast<std::uint64_t>(t.size[d]) + static_cast<std::uint64_t>(ch.offsets[d] + idx[d]);
      std::copy_n(tensor.data.begin() + static_cast<std::ptrdiff_t>(e * es), es, a.bytes.begin() + static_cast<std::ptrdiff_t>(flat * es));
      ++a.writes[flat];
      for (std::size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < ch.sizes[d]) break;
        idx[d] = 0;
      }
    }
  }
  return a;
}

void expect_fixture(const std::string& name) {
  SCOPED_TRACE(name);
  const auto exp = dcp_expected(name);
  dcp_checkpoint c(dcp_fixtures() / name);
  const auto& md = c.metadata();
  EXPECT_EQ(md.layout, dcp_layout::torch_1_13);
  ASSERT_EQ(md.tensors.size(), exp["tensors"].size());
  for (const auto& [fqn, e] : exp["tensors"].items()) {
    SCOPED_TRACE(fqn);
    const auto* t = md.find(fqn);
    ASSERT_TRUE(t);
    EXPECT_EQ(torch_dtype(e["dtype"].get<std::string>()), t->type);
    EXPECT_EQ(t->size, e["shape"].get<std::vector<std::int64_t>>());
    const auto a = assemble(c, *t);
    for (auto w : a.writes) EXPECT_GE(w, 1);  // every element saved
    EXPECT_EQ(to_hex(a.bytes), e["hex"].get<std::string>());
  }
  ASSERT_EQ(md.byte_items.size(), exp["bytes"].size());
  for (const auto& b : md.byte_items) {
    const auto repr = exp["bytes"][b.fqn].get<std::string>();
    const auto doc = c.byte_item(b);
    const auto& v = doc.root();
    if (v.kind == pickle_kind::integer) EXPECT_EQ(std::to_string(v.integer), repr);
    else if (v.kind == pickle_kind::string) EXPECT_EQ("'" + v.text + "'", repr);
    else ADD_FAILURE() << b.fqn << " decodes to " << describe(v);
  }
}

}  // namespace

TEST(dcp, torch_113_minimal) { expect_fixture("minimal"); }
TEST(dcp, torch_113_plain_tensors_and_byte_items) { expect_fixture("plain"); }
TEST(dcp, torch_113_sharded_rows_uneven_and_replicated) { expect_fixture("rows"); }
TEST(dcp, torch_113_sharded_columns_and_bfloat16) { expect_fixture("cols"); }
TEST(dcp, torch_113_uneven_grid_on_4_processes) {
  expect_fixture("grid");
  const auto md = read_dcp_metadata(dcp_fixtures() / "grid");
  ASSERT_TRUE(md.find("g") && md.find("i"));
  EXPECT_EQ(md.find("g")->chunks.at(3), (dcp_chunk{{3, 4}, {1, 2}, {"__3_0.distcp", 0, 747}}));
  EXPECT_EQ(md.find("i")->chunks.size(), 3u);  // the fourth rank's shard of 0 rows is not saved
}

// docs/formats.md#golden-bytes shows the files of the minimal fixture in hex: they must be those
TEST(dcp, golden_bytes_of_the_docs_are_the_fixture) {
  std::ifstream in(dcp_fixtures() / "../../../docs/formats.md");
  ASSERT_TRUE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const std::string file : {"minimal/.metadata", "minimal/__0_0.distcp"}) {
    const auto marker = doc.find("<!-- golden: verify/data/dcp/" + file + " -->\n```\n");
    ASSERT_NE(marker, std::string::npos) << file;
    const auto begin = doc.find("```\n", marker) + 4;
    std::string hex;
    for (auto i = begin; i < doc.size() && doc.compare(i, 3, "```") != 0; ++i)
      if (doc[i] != '\n') hex += doc[i];
    EXPECT_EQ(hex, to_hex(read_bytes(dcp_fixtures() / file))) << file;
  }
}

TEST(dcp, fixture_metadata_as_torch_wrote_it) {
  const auto md = read_dcp_metadata(dcp_fixtures() / "rows");
  const auto* w = md.find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->type, dtype::float32);
  ASSERT_EQ(w->chunks.size(), 2u);
  EXPECT_EQ(w->chunks[0], (dcp_chunk{{0, 0}, {3, 3}, {"__0_0.distcp", 0, 747}}));
  EXPECT_EQ(w->chunks[1], (dcp_chunk{{3, 0}, {2, 3}, {"__1_0.distcp", 0, 747}}));
  const auto* r = md.find("replicated");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->chunks.size(), 1u);  // saved once, by the coordinator
  EXPECT_EQ(r->chunks[0].storage, (dcp_storage{"__0_0.distcp", 747, 747}));  // the second item of rank 0's file
  const auto plain = read_dcp_metadata(dcp_fixtures() / "plain");
  ASSERT_TRUE(plain.find("scale"));
  EXPECT_TRUE(plain.find("scale")->size.empty());  // 0-d
  EXPECT_EQ(plain.find("scale")->chunks.at(0).sizes, std::vector<std::int64_t>{});
  ASSERT_EQ(plain.byte_items.size(), 2u);
  EXPECT_EQ(plain.byte_items[0].fqn, "epoch");
}

// ---- torch_archive ------------------------------------------------------------------------

TEST(torch_archive, entries_of_a_real_archive) {
  const auto bytes = read_bytes(dcp_fixtures() / "plain/__0_0.distcp");
  const torch_archive a(bytes, "w.distcp");
  EXPECT_EQ(a.prefix(), "archive");
  ASSERT_EQ(a.entries().size(), 3u);
  EXPECT_EQ(a.entries()[0].name, "archive/data.pkl");
  EXPECT_EQ(a.entries()[1].name, "archive/data/0");
  EXPECT_EQ(a.entries()[2].name, "archive/version");
  EXPECT_EQ(a.at("data/0").offset % 64, 0u);  // storages are 64-byte aligned
  EXPECT_EQ(a.at("data/0").data.data(), bytes.data() + a.at("data/0").offset);  // in place
  EXPECT_EQ(to_hex(a.at("version").data), "330a");
  for (const auto& e : a.entries()) EXPECT_NO_THROW(a.check_crc(e)) << e.name;
  const auto t = read_torch_tensor(a);
  EXPECT_EQ(t.type, dtype::float32);
  EXPECT_EQ(t.shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(t.storage_key, "data/0");
  EXPECT_EQ(t.data.size(), 48u);
}

namespace {
std::vector<std::byte> archive_bytes(const char* file) { return read_bytes(dcp_fixtures() / file); }
// the offset of the central directory entry named `name`
std::size_t central_entry(const std::vector<std::byte>& b, std::string_view name) {
  for (std::size_t i = 0; i + 46 < b.size(); ++i)
    if (b[i] == std::byte{0x50} && b[i + 1] == std::byte{0x4b} && b[i + 2] == std::byte{1} && b[i + 3] == std::byte{2} &&
        std::string_view(reinterpret_cast<const char*>(b.data()) + i + 46, name.size()) == name)
      return i;
  ADD_FAILURE() << "no central directory entry " << name;
  return 0;
}
std::string archive_error(const std::vector<std::byte>& b) {
  return error_of([&] { read_torch_tensor(torch_archive(b, "a.distcp")); });
}
}  // namespace

TEST(torch_archive, every_truncation_is_refused) {
  const auto bytes = archive_bytes("plain/__0_0.distcp");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    const auto e = archive_error(cut);
    EXPECT_NE(e.find("a.distcp: torch archive: "), std::string::npos) << n << ": " << e;
  }
  const std::vector<std::byte> last(bytes.begin(), bytes.end() - 1);
  EXPECT_NE(archive_error(last).find("has no end of central directory record (truncated?)"), std::string::npos);
}

TEST(torch_archive, a_compressed_entry_is_refused_by_name) {
  auto bytes = archive_bytes("plain/__0_0.distcp");
  bytes[central_entry(bytes, "archive/data/0") + 10] = std::byte{8};  // method 8: deflate
  EXPECT_NE(archive_error(bytes).find("entry 'archive/data/0' is compressed (method 8)"), std::string::npos) << archive_error(bytes);
  auto local = archive_bytes("plain/__0_0.distcp");
  const auto at = static_cast<std::size_t>(reshard::io::detail::zip_le(local, central_entry(local, "archive/data/0") + 42, 4));
  local[at + 8] = std::byte{8};
  EXPECT_NE(archive_error(local).find("entry 'archive/data/0' is compressed in its local header"), std::string::npos);
}

TEST(torch_archive, entries_out_of_bounds_are_refused) {
  auto far = archive_bytes("plain/__0_0.distcp");
  far[central_entry(far, "archive/data/0") + 44] = std::byte{0x7f};  // local header offset far past the end
  EXPECT_NE(archive_error(far).find("local header of entry 'archive/data/0' at byte"), std::string::npos) << archive_error(far);
  auto big = archive_bytes("plain/__0_0.distcp");
  const auto c = central_entry(big, "archive/data/0");
  big[c + 21] = big[c + 25] = std::byte{0x10};  // 4096 + 48 bytes
  EXPECT_NE(archive_error(big).find("runs into the central directory"), std::string::npos) << archive_error(big);
  auto twice = archive_bytes("plain/__0_0.distcp");
  const auto v = central_entry(twice, "archive/version");
  std::copy_n(reinterpret_cast<const std::byte*>("archive/data/0"), 14, twice.begin() + static_cast<std::ptrdiff_t>(v + 46));
  twice[v + 28] = std::byte{14};  // the name length, now "archive/data/0" + the rest of the old name as extra
  EXPECT_FALSE(archive_error(twice).empty());
}

TEST(torch_archive, a_strided_tensor_is_refused) {
  // steps: int64 [2,3]; its data.pkl writes stride (3, 1): make it (1, 2), a transposed view
  auto bytes = archive_bytes("plain/__0_2.distcp");
  const auto hex = to_hex(bytes);
  const auto at = hex.find("4b034b0186");
  ASSERT_NE(at, std::string::npos);
  bytes[at / 2 + 1] = std::byte{1};
  bytes[at / 2 + 3] = std::byte{2};
  EXPECT_NE(archive_error(bytes).find("stride [1,2] of size [2,3] is not contiguous"), std::string::npos) << archive_error(bytes);
}

TEST(torch_archive, a_storage_of_the_wrong_size_is_refused) {
  auto bytes = archive_bytes("plain/__0_2.distcp");  // LongStorage of 6 elements: claim 7
  const auto hex = to_hex(bytes);
  const auto at = hex.find("4b0674");  // BININT1 6, TUPLE
  ASSERT_NE(at, std::string::npos);
  bytes[at / 2 + 1] = std::byte{7};
  EXPECT_NE(archive_error(bytes).find("storage 'data/0' holds 48 bytes, not 7 elements of 8 bytes"), std::string::npos) << archive_error(bytes);
}

namespace {
// A stored zip of `entries` as this test writes it: with zip64 extra fields for every size and
// offset (as a torch archive over 4 GiB has), or plain 32-bit fields; zip64 end records always,
// as torch writes them.
std::vector<std::byte> make_zip(const std::vector<std::pair<std::string, std::vector<std::byte>>>& entries, bool zip64) {
  std::vector<std::byte> out, central;
  auto put = [](std::vector<std::byte>& v, std::uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(static_cast<std::byte>((x >> (8 * i)) & 0xFF));
  };
  auto put_name = [](std::vector<std::byte>& v, const std::string& n) {
    for (char c : n) v.push_back(static_cast<std::byte>(c));
  };
  const std::uint64_t ones = 0xFFFFFFFF;
  for (const auto& [name, data] : entries) {
    const auto local = out.size();
    const auto crc = crc32(data);
    put(out, 0x04034b50, 4), put(out, 45, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, crc, 4);
    put(out, zip64 ? ones : data.size(), 4), put(out, zip64 ? ones : data.size(), 4);
    put(out, name.size(), 2), put(out, zip64 ? 20 : 0, 2);
    put_name(out, name);
    if (zip64) put(out, 1, 2), put(out, 16, 2), put(out, data.size(), 8), put(out, data.size(), 8);
    out.insert(out.end(), data.begin(), data.end());
    put(central, 0x02014b50, 4), put(central, 45, 2), put(central, 45, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, crc, 4), put(central, zip64 ? ones : data.size(), 4), put(central, zip64 ? ones : data.size(), 4);
    put(central, name.size(), 2), put(central, zip64 ? 28 : 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, zip64 ? ones : local, 4);
    put_name(central, name);
    if (zip64) put(central, 1, 2), put(central, 24, 2), put(central, data.size(), 8), put(central, data.size(), 8), put(central, local, 8);
  }
  const auto cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  const auto z = out.size();
  put(out, 0x06064b50, 4), put(out, 44, 8), put(out, 45, 2), put(out, 45, 2), put(out, 0, 4), put(out, 0, 4);
  put(out, entries.size(), 8), put(out, entries.size(), 8), put(out, central.size(), 8), put(out, cd_offset, 8);
  put(out, 0x07064b50, 4), put(out, 0, 4), put(out, z, 8), put(out, 1, 4);
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2);
  put(out, zip64 ? 0xFFFF : entries.size(), 2), put(out, zip64 ? 0xFFFF : entries.size(), 2);
  put(out, zip64 ? ones : central.size(), 4), put(out, zip64 ? ones : cd_offset, 4), put(out, 0, 2);
  return out;
}
std::vector<std::byte> bytes_of(std::string_view s) { return {as_bytes(s).begin(), as_bytes(s).end()}; }
}  // namespace

TEST(torch_archive, zip64_fields_and_byteorder) {
  // the minimal fixture's data.pkl and storage (float32 [1, 2]) in archives of this test's making
  const auto real = archive_bytes("minimal/__0_0.distcp");
  const torch_archive fixture(real, "minimal");
  const std::vector<std::byte> pkl(fixture.data_pkl().begin(), fixture.data_pkl().end());
  const auto storage = from_hex("0000803f00000040");
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64);
    const auto bytes = make_zip({{"t/data.pkl", pkl}, {"t/data/0", storage}, {"t/byteorder", bytes_of("little")}}, zip64);
    const torch_archive a(bytes, "z.pt");
    EXPECT_EQ(a.prefix(), "t");
    for (const auto& e : a.entries()) EXPECT_NO_THROW(a.check_crc(e));
    const auto t = read_torch_tensor(a);
    EXPECT_EQ(to_hex(t.data), "0000803f00000040");
    EXPECT_EQ(t.shape, std::vector<std::int64_t>{2});
    const auto big = make_zip({{"t/data.pkl", pkl}, {"t/data/0", storage}, {"t/byteorder", bytes_of("big")}}, zip64);
    EXPECT_NE(archive_error(big).find("byteorder is not 'little'"), std::string::npos);
    const auto two_dirs = make_zip({{"t/data.pkl", pkl}, {"u/data/0", storage}}, zip64);
    EXPECT_NE(archive_error(two_dirs).find("entry 'u/data/0' is outside the archive's directory 't'"), std::string::npos);
    const auto no_storage = make_zip({{"t/data.pkl", pkl}}, zip64);
    EXPECT_NE(archive_error(no_storage).find("has no entry 't/data/0'"), std::string::npos);
  }
  auto flipped = make_zip({{"t/data.pkl", pkl}, {"t/data/0", storage}}, false);
  const auto at = to_hex(flipped).find("0000803f");
  ASSERT_EQ(at % 2, 0u);
  flipped[at / 2] = std::byte{1};  // the storage's first byte
  const torch_archive c(flipped, "c.pt");
  EXPECT_NE(error_of([&] { c.check_crc(c.at("data/0")); }).find("entry 't/data/0' fails its CRC-32"), std::string::npos);
}

RC_GTEST_PROP(torch_archive, byte_flips_decode_or_throw_reshard_error, ()) {
  auto bytes = archive_bytes("cols/__0_0.distcp");
  const auto flips = *rc::gen::inRange(1, 4);
  for (int i = 0; i < flips; ++i) {
    const auto at = *rc::gen::inRange<std::size_t>(0, bytes.size());
    bytes[at] ^= static_cast<std::byte>(*rc::gen::inRange(1, 256));
  }
  try {
    const torch_archive a(std::span<const std::byte>(bytes).subspan(0, 747), "a");
    const auto t = read_torch_tensor(a);
    RC_ASSERT(t.data.size() == *element_count(t.shape) * element_size(t.type));
    RC_ASSERT(t.data.data() >= bytes.data() && t.data.data() + t.data.size() <= bytes.data() + 747);
  } catch (const reshard::error&) {
  }
}

// ---- .metadata ----------------------------------------------------------------------------

namespace {
const std::vector<meta_tensor> two_tensors{
    {"layer.w", "float32", {4, 6}, {{{0, 0}, {2, 6}, "__0_0.distcp", 0, 900}, {{2, 0}, {2, 6}, "__1_0.distcp", 0, 900}}},
    {"layer.b", "bfloat16", {6}, {{{0}, {6}, "__0_0.distcp", 900, 700}}}};

std::string meta_error(const std::vector<meta_tensor>& t, const meta_options& o = {}) {
  return error_of([&] { parse_dcp_metadata(dcp_metadata_pickle(t, o), "x/.metadata"); });
}
}  // namespace

TEST(dcp, torch_2_module_paths) {
  for (bool by_value : {false, true}) {
    meta_options o;
    o.byte_items = {"step"};
    o.enum_by_value = by_value;  // Python < 3.11 pickles an Enum member as MEM_FORMAT_ENCODING(0)
    const auto md = parse_dcp_metadata(dcp_metadata_pickle(two_tensors, o), "x/.metadata");
    EXPECT_EQ(md.layout, dcp_layout::torch_2);
    ASSERT_EQ(md.tensors.size(), 2u);
    EXPECT_EQ(md.tensors[0].fqn, "layer.w");
    EXPECT_EQ(md.tensors[1].type, dtype::bfloat16);
    EXPECT_EQ(md.tensors[0].chunks[1], (dcp_chunk{{2, 0}, {2, 6}, {"__1_0.distcp", 0, 900}}));
    EXPECT_EQ(md.tensors[1].chunks[0].storage, (dcp_storage{"__0_0.distcp", 900, 700}));
    ASSERT_EQ(md.byte_items.size(), 1u);
    EXPECT_EQ(md.byte_items[0].storage.relative_path, "__0_9.distcp");
  }
  meta_options later;  // later 2.x: _MEM_FORMAT_ENCODING, StorageMeta, version
  later.enum_name = "_MEM_FORMAT_ENCODING";
  later.storage_meta = true;
  const auto md = parse_dcp_metadata(dcp_metadata_pickle(two_tensors, later), "x/.metadata");
  EXPECT_EQ(md.version, "1.0.0");
  EXPECT_EQ(md.tensors.size(), 2u);
  meta_options old;
  old.torch2 = false;
  EXPECT_EQ(parse_dcp_metadata(dcp_metadata_pickle(two_tensors, old), "x").layout, dcp_layout::torch_1_13);
}

TEST(dcp, a_global_outside_the_allow_list_is_refused_by_name) {
  meta_options o;
  o.metadata_class = "Evil";
  EXPECT_NE(meta_error(two_tensors, o).find("x/.metadata: pickle: global torch.distributed.checkpoint.metadata.Evil is not allowed"),
            std::string::npos);
  // the real torch file, one class name changed (same length)
  auto bytes = read_bytes(dcp_fixtures() / "plain/.metadata");
  const auto hex = to_hex(bytes);
  const auto at = hex.find(to_hex(as_bytes("TensorStorageMetadata")));
  ASSERT_NE(at, std::string::npos);
  bytes[at / 2] = std::byte{'X'};
  const auto e = error_of([&] { parse_dcp_metadata(bytes, "plain/.metadata"); });
  EXPECT_NE(e.find("global torch.distributed._shard.checkpoint.metadata.XensorStorageMetadata is not allowed"), std::string::npos) << e;
}

TEST(dcp, a_chunk_outside_its_tensor_is_refused) {
  auto t = two_tensors;
  t[0].chunks[1].offsets = {3, 0};  // rows 3..4 of a 4-row tensor
  EXPECT_NE(meta_error(t).find("tensor 'layer.w': chunk 1 (offsets [3,0], sizes [2,6]) lies outside the tensor [4,6]"), std::string::npos)
      << meta_error(t);
  auto rank = two_tensors;
  rank[1].chunks[0].offsets = {0, 0};
  rank[1].chunks[0].sizes = {6, 1};
  EXPECT_NE(meta_error(rank).find("has another rank than the tensor [6]"), std::string::npos);
}

TEST(dcp, unsupported_content_is_refused_by_name) {
  meta_options extra;
  extra.extra_metadata_field = "surprise";
  EXPECT_NE(meta_error(two_tensors, extra).find("Metadata has the unknown field 'surprise'"), std::string::npos);
  meta_options td;
  td.transform_descriptor = true;
  EXPECT_NE(meta_error(two_tensors, td).find("storage_data for 'layer.w' at [0,0]: _StorageInfo.transform_descriptors is a list of 1 item; transformed bytes are not supported"), std::string::npos)
      << meta_error(two_tensors, td);
  auto up = two_tensors;
  up[0].chunks[0].path = "../elsewhere.distcp";
  EXPECT_NE(meta_error(up).find("relative_path '../elsewhere.distcp' leaves the checkpoint's directory"), std::string::npos);
  auto abs = two_tensors;
  abs[0].chunks[0].path = "/etc/passwd";
  EXPECT_NE(meta_error(abs).find("leaves the checkpoint's directory"), std::string::npos);
  auto dup = two_tensors;
  dup[0].chunks[1].offsets = {0, 0};  // two chunks at one offset: two storage entries for one key
  EXPECT_NE(meta_error(dup).find("storage_data for 'layer.w' at [0,0] is given twice"), std::string::npos) << meta_error(dup);
  auto complex = two_tensors;
  complex[0].dtype = "complex64";
  EXPECT_NE(meta_error(complex).find("global torch.complex64 is not allowed"), std::string::npos);
}

TEST(dcp, work_is_bounded_by_the_input) {
  // 65 dimensions
  const std::vector<meta_tensor> deep{{"d", "float32", std::vector<std::int64_t>(65, 1),
                                       {{std::vector<std::int64_t>(65, 0), std::vector<std::int64_t>(65, 1), "__0_0.distcp", 0, 9}}}};
  EXPECT_NE(meta_error(deep).find("tensor 'd': size has more than 64 dimensions"), std::string::npos) << meta_error(deep);
  // one chunks list of 300 chunks shared (memo) by 300 tensors: 90000 chunks from a few KB
  pickle_writer w;
  const std::string meta = "torch.distributed.checkpoint.metadata";
  w.new_object(meta, "Metadata").build_dict().str("state_dict_metadata").op('}').mark();
  for (int t = 0; t < 300; ++t) {
    w.str("t" + std::to_string(t)).new_object(meta, "TensorStorageMetadata").build_dict();
    if (t == 0) {
      w.str("properties").new_object(meta, "TensorProperties").mark().global("torch", "float32");
      w.global("torch.serialization", "_get_layout").str("torch.strided").op(0x85).op('R').boolean(false);
      w.global(meta, "MEM_FORMAT_ENCODING").integer(0).op(0x85).op('R').boolean(false).op('t').op('b');
      w.op('r').le(60000, 4);  // LONG_BINPUT 60000 (the pickle is larger): the properties
      w.str("size").torch_size({300}).op('r').le(60001, 4);
      w.str("chunks").op(']').op('r').le(60002, 4).mark();
      for (int c = 0; c < 300; ++c) w.new_object(meta, "ChunkStorageMetadata").build_dict().str("offsets").torch_size({c}).str("sizes").torch_size({1}).end_build();
      w.op('e');
    } else {
      w.str("properties").get(60000).str("size").get(60001).str("chunks").get(60002);
    }
    w.end_build();
  }
  w.op('u').str("storage_data").op('}').end_build().stop();
  const auto e = error_of([&] { parse_dcp_metadata(w.data(), "m"); });
  EXPECT_NE(e.find("more chunks than the pickle has values"), std::string::npos) << e;
}

TEST(dcp, every_truncation_of_a_real_metadata_is_refused) {
  const auto bytes = read_bytes(dcp_fixtures() / "cols/.metadata");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(error_of([&] { parse_dcp_metadata(cut, "m"); }).empty()) << n;
  }
  EXPECT_NO_THROW(parse_dcp_metadata(bytes, "m"));
}

RC_GTEST_PROP(dcp, metadata_byte_flips_decode_or_throw_reshard_error, ()) {
  auto bytes = read_bytes(dcp_fixtures() / "rows/.metadata");
  const auto at = *rc::gen::inRange<std::size_t>(0, bytes.size());
  bytes[at] ^= static_cast<std::byte>(*rc::gen::inRange(1, 256));
  try {
    const auto md = parse_dcp_metadata(bytes, "m");
    for (const auto& t : md.tensors)
      for (const auto& c : t.chunks)
        for (std::size_t d = 0; d < t.size.size(); ++d) RC_ASSERT(c.offsets[d] + c.sizes[d] <= t.size[d]);
  } catch (const reshard::error&) {
  }
}

// ---- dcp_checkpoint -----------------------------------------------------------------------

TEST(dcp, a_chunk_whose_archive_disagrees_with_the_metadata_is_refused) {
  const temp_dir dir;
  fs::copy_file(dcp_fixtures() / "plain/__0_0.distcp", dir / "__0_0.distcp");  // float32 [3,4]
  const std::vector<meta_tensor> wrong_dtype{{"w", "bfloat16", {3, 4}, {{{0, 0}, {3, 4}, "__0_0.distcp", 0, 747}}}};
  write_bytes(dir / ".metadata", dcp_metadata_pickle(wrong_dtype));
  dcp_checkpoint c(dir.path());
  const auto e = error_of([&] { c.chunk(c.metadata().tensors[0], 0); });
  EXPECT_NE(e.find("holds a Float32 tensor [3,4], but the metadata says BFloat16 [3,4]"), std::string::npos) << e;

  const std::vector<meta_tensor> past_end{{"w", "float32", {3, 4}, {{{0, 0}, {3, 4}, "__0_0.distcp", 100, 747}}}};
  write_bytes(dir / ".metadata", dcp_metadata_pickle(past_end));
  dcp_checkpoint p(dir.path());
  EXPECT_NE(error_of([&] { p.chunk(p.metadata().tensors[0], 0); }).find("an item of 747 bytes at offset 100 runs past the end of the 747-byte file"),
            std::string::npos);

  const std::vector<meta_tensor> missing{{"w", "float32", {3, 4}, {{{0, 0}, {3, 4}, "__7_0.distcp", 0, 747}}}};
  write_bytes(dir / ".metadata", dcp_metadata_pickle(missing));
  dcp_checkpoint m(dir.path());
  EXPECT_NE(error_of([&] { m.map_all(); }).find("__7_0.distcp"), std::string::npos);
}

TEST(dcp, a_directory_without_metadata_is_refused) {
  const temp_dir dir;
  EXPECT_NE(error_of([&] { read_dcp_metadata(dir.path()); }).find(".metadata"), std::string::npos);
}
