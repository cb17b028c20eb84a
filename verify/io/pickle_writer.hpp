// A small pickle writer for the tests of reshard/io/pickle.hpp and reshard/io/dcp.hpp: it emits
// the opcodes of Python's protocol 4 pickler one call at a time (so that a test can build valid,
// malformed and hostile pickles alike), plus the DCP `.metadata` of given tensors under either
// torch's module paths, written the way torch's pickles are (NEWOBJ + BUILD of each dataclass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace reshard_test {

class pickle_writer {
 public:
  explicit pickle_writer(int protocol = 4) {
    op(0x80);
    raw(static_cast<char>(protocol));
  }
  pickle_writer& op(int code) {
    raw(static_cast<char>(code));
    return *this;
  }
  pickle_writer& none() { return op('N'); }
  pickle_writer& boolean(bool b) { return op(b ? 0x88 : 0x89); }
  pickle_writer& integer(std::int64_t v) {
    if (v >= 0 && v < 256) return op('K').le(static_cast<std::uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return op('M').le(static_cast<std::uint64_t>(v), 2);
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    // LONG1: the shortest two's complement
    int n = 8;
    while (n > 1) {
      const auto shifted = v >> (8 * (n - 1) - 1);
      if (shifted != 0 && shifted != -1) break;
      --n;
    }
    return op(0x8a).le(static_cast<std::uint64_t>(n), 1).le(static_cast<std::uint64_t>(v), n);
  }
  pickle_writer& floating(double d) {
    std::uint64_t bits;
    std::memcpy(&bits, &d, 8);
    op('G');
    for (int i = 7; i >= 0; --i) raw(static_cast<char>((bits >> (8 * i)) & 0xFF));
    return *this;
  }
  pickle_writer& str(std::string_view s) {
    if (s.size() < 256) op(0x8c).le(s.size(), 1);
    else op('X').le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  pickle_writer& bytes(std::string_view s) {
    if (s.size() < 256) op('C').le(s.size(), 1);
    else op('B').le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  pickle_writer& mark() { return op('('); }
  pickle_writer& memoize() { return op(0x94); }
  pickle_writer& get(std::uint32_t i) { return i < 256 ? op('h').le(i, 1) : op('j').le(i, 4); }
  pickle_writer& global(std::string_view module, std::string_view name) {
    op('c');
    out_.append(module);
    raw('\n');
    out_.append(name);
    raw('\n');
    return *this;
  }
  pickle_writer& stack_global(std::string_view module, std::string_view name) { return str(module).str(name).op(0x93); }
  pickle_writer& stop() { return op('.'); }
  pickle_writer& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) raw(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  pickle_writer& raw(char c) {
    out_.push_back(c);
    return *this;
  }

  // torch-shaped pieces
  pickle_writer& torch_size(const std::vector<std::int64_t>& dims) {
    global("torch", "Size").mark();
    for (auto d : dims) integer(d);
    return op('t').op(0x85).op('R');
  }
  /// NEWOBJ of `module.cls` with no arguments; BUILD follows with build_dict()
  pickle_writer& new_object(std::string_view module, std::string_view cls) { return stack_global(module, cls).op(')').op(0x81); }
  /// opens the state dict of a BUILD: then key, value, ..., then end_build()
  pickle_writer& build_dict() { return op('}').mark(); }
  pickle_writer& end_build() { return op('u').op('b'); }

  const std::string& bytes_written() const { return out_; }
  std::vector<std::byte> data() const {
    std::vector<std::byte> b(out_.size());
    std::memcpy(b.data(), out_.data(), out_.size());
    return b;
  }

 private:
  std::string out_;
};

/// One tensor of a test `.metadata`: name, dtype name ("float32"), size, and its chunks as
/// (offsets, sizes, relative_path, offset, length).
struct meta_chunk {
  std::vector<std::int64_t> offsets, sizes;
  std::string path;
  std::int64_t offset = 0, length = 0;
};
struct meta_tensor {
  std::string fqn, dtype;
  std::vector<std::int64_t> size;
  std::vector<meta_chunk> chunks;
};

/// Options of dcp_metadata_pickle: which torch's module paths, and deliberate departures.
struct meta_options {
  bool torch2 = true;
  std::string metadata_class = "Metadata";   ///< replace to test the allow-list
  std::string extra_metadata_field;           ///< a field Metadata does not have
  bool transform_descriptor = false;          ///< a non-empty _StorageInfo.transform_descriptors
  std::vector<std::string> byte_items;        ///< names of byte items (stored in "__0_9.distcp")
  bool enum_by_value = false;                 ///< MEM_FORMAT_ENCODING(0) instead of getattr
  std::string enum_name = "MEM_FORMAT_ENCODING";  ///< later 2.x: "_MEM_FORMAT_ENCODING"
  bool storage_meta = false;                  ///< later 2.x: StorageMeta and version fields
};

/// The pickle of a DCP Metadata of `tensors`, as torch writes it.
inline std::vector<std::byte> dcp_metadata_pickle(const std::vector<meta_tensor>& tensors, const meta_options& o = {}) {
  const std::string meta = o.torch2 ? "torch.distributed.checkpoint.metadata" : "torch.distributed._shard.checkpoint.metadata";
  const std::string props = o.torch2 ? meta : "torch.distributed._shard.sharded_tensor.metadata";
  const std::string fs = o.torch2 ? "torch.distributed.checkpoint.filesystem" : "torch.distributed._shard.checkpoint.filesystem";
  pickle_writer w;
  w.new_object(meta, o.metadata_class).build_dict();
  w.str("state_dict_metadata").op('}').mark();
  for (const auto& t : tensors) {
    w.str(t.fqn).new_object(meta, "TensorStorageMetadata").build_dict();
    w.str("properties").new_object(props, "TensorProperties").mark();
    w.global("torch", t.dtype);
    w.global("torch.serialization", "_get_layout").str("torch.strided").op(0x85).op('R');
    w.boolean(false);
    if (o.enum_by_value)
      w.global(props, o.enum_name).integer(0).op(0x85).op('R');
    else
      w.global("builtins", "getattr").global(props, o.enum_name).str("TORCH_CONTIGUOUS_FORMAT").op(0x86).op('R');
    w.boolean(false).op('t').op('b');
    w.str("size").torch_size(t.size);
    w.str("chunks").op(']').mark();
    for (const auto& c : t.chunks) {
      w.new_object(meta, "ChunkStorageMetadata").build_dict();
      w.str("offsets").torch_size(c.offsets).str("sizes").torch_size(c.sizes).end_build();
    }
    w.op('e');
    w.end_build();
  }
  for (const auto& b : o.byte_items) w.str(b).new_object(meta, "BytesStorageMetadata");
  w.op('u');
  if (!o.extra_metadata_field.empty()) w.str(o.extra_metadata_field).none();
  w.str("planner_data").none();
  if (o.storage_meta) {
    w.str("storage_meta").new_object(meta, "StorageMeta").build_dict();
    w.str("checkpoint_id").global("pathlib", "PosixPath").str("/ckpt").str("step1").op(0x86).op('R');
    w.str("save_id").str("0f3a").str("load_id").none().str("modules").op(']').end_build();
    w.str("version").str("1.0.0");
  }
  w.str("storage_data").op('}').mark();
  auto storage = [&](const std::string& path, std::int64_t offset, std::int64_t length) {
    w.new_object(fs, "_StorageInfo").build_dict();
    w.str("relative_path").str(path).str("offset").integer(offset).str("length").integer(length);
    if (o.transform_descriptor) w.str("transform_descriptors").op(']').str("zstd").op('a');
    w.end_build();
  };
  for (const auto& t : tensors)
    for (std::size_t i = 0; i < t.chunks.size(); ++i) {
      const auto& c = t.chunks[i];
      w.new_object(meta, "MetadataIndex").build_dict();
      w.str("fqn").str(t.fqn).str("offset").torch_size(c.offsets).str("index").integer(static_cast<std::int64_t>(i)).end_build();
      storage(c.path, c.offset, c.length);
    }
  for (const auto& b : o.byte_items) {
    w.new_object(meta, "MetadataIndex").build_dict().str("fqn").str(b).str("index").none().end_build();
    storage("__0_9.distcp", 0, 10);
  }
  w.op('u');
  w.end_build().stop();
  return w.data();
}

}  // namespace reshard_test
