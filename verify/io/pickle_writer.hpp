// Pickles for the tests of reshard/io/pickle.hpp and reshard/io/dcp.hpp: the library's pickle
// emitter (one opcode a call, so that a test can build valid, malformed and hostile pickles
// alike), and the DCP `.metadata` of given tensors under either torch's module paths: as the
// library writes it (encode_dcp_metadata) when no departure is asked for, else by hand with the
// departures (another class, an extra field, an enum by value ...).
#pragma once

#include <reshard/io/dcp_writer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace reshard_test {

// the library's emitter (reshard/io/dcp_writer.hpp)
using pickle_writer = reshard::io::pickle_emitter;

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
  bool known = true;  // every dtype one the library writes (a test may give another)
  for (const auto& t : tensors) known = known && reshard::io::torch_dtype(t.dtype).has_value();
  if (known && o.metadata_class == "Metadata" && o.extra_metadata_field.empty() && !o.transform_descriptor && !o.enum_by_value &&
      o.enum_name == "MEM_FORMAT_ENCODING" && !o.storage_meta) {
    reshard::io::dcp_metadata md;
    md.layout = o.torch2 ? reshard::io::dcp_layout::torch_2 : reshard::io::dcp_layout::torch_1_13;
    for (const auto& t : tensors) {
      auto& dt = md.tensors.emplace_back();
      dt.fqn = t.fqn;
      dt.type = reshard::io::torch_dtype(t.dtype).value();
      dt.size = t.size;
      for (const auto& c : t.chunks)
        dt.chunks.push_back({c.offsets, c.sizes, {c.path, static_cast<std::uint64_t>(c.offset), static_cast<std::uint64_t>(c.length)}});
    }
    for (const auto& b : o.byte_items) md.byte_items.push_back({b, {"__0_9.distcp", 0, 10}});
    const std::string s = reshard::io::encode_dcp_metadata(md);
    std::vector<std::byte> out(s.size());
    std::memcpy(out.data(), s.data(), s.size());
    return out;
  }
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
