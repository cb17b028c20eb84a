// reshard/io/dcp.hpp: reading a PyTorch Distributed Checkpoint (DCP) directory as PyTorch's
// FileSystemWriter writes it: its `.metadata` into plain structs, and each saved chunk's tensor
// bytes in place (see docs/formats.md#9-pytorch-distributed-checkpoints-dcp).
//
// `.metadata` is a pickle (pickle.hpp) of the dataclass Metadata, under torch 1.13's module
// `torch.distributed._shard.checkpoint.metadata` or torch 2.x's
// `torch.distributed.checkpoint.metadata`:
//   state_dict_metadata  {fqn: TensorStorageMetadata(properties, size, chunks) |
//                         BytesStorageMetadata()}, a chunk being ChunkStorageMetadata(offsets, sizes)
//                         and properties a TensorProperties whose pickled state is the tuple
//                         (dtype, layout, requires_grad, MEM_FORMAT_ENCODING member, pin_memory)
//   storage_data         {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset,
//                         length)}, offset being the chunk's offsets (absent for byte items)
//   planner_data         anything the allow-list admits (ignored)
//   storage_meta         (later 2.x) None or StorageMeta(checkpoint_id, save_id, load_id,
//                         modules) of strs (checkpoint_id may be a pathlib.PosixPath): ignored
//   version              (later 2.x) None or a str, kept
// read_dcp_metadata refuses, naming the file and the item: any other class or field, a layout
// other than torch.strided, a dtype reshard does not hold, a chunk whose rank differs from its
// tensor's or that lies outside it, a chunk or byte item without storage, a storage entry that
// no chunk uses, two entries for one chunk, a relative_path that leaves the directory, and a
// non-empty `transform_descriptors` (later 2.x: the bytes would need decoding first).
//
// Each tensor chunk is stored as one torch.save archive (torch_archive.hpp) at `offset`,
// `length` bytes of its `.distcp` file; a byte item likewise, its data.pkl holding the pickled
// object. dcp_checkpoint maps each `.distcp` file once (mapped_file: a regular file, opened
// without blocking) and returns a chunk's bytes as a span into the mapping, after checking that
// the archive's dtype and shape are the chunk's. Not thread-safe: one dcp_checkpoint per thread,
// or map every file first (map_all).
//
// What the metadata does not check: that the chunks of a tensor cover it without overlap (the
// planner, which consumes boxes, decides what a gap or an overlap means).
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/pickle.hpp>
#include <reshard/io/torch_archive.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// Where one saved item lives: `length` bytes at `offset` of `relative_path` in the directory.
struct dcp_storage {
  std::string relative_path;
  std::uint64_t offset = 0, length = 0;
  bool operator==(const dcp_storage&) const = default;
};

/// One saved chunk of a tensor: the box [offsets, offsets + sizes) and its storage.
struct dcp_chunk {
  std::vector<std::int64_t> offsets, sizes;
  dcp_storage storage;
  bool operator==(const dcp_chunk&) const = default;
};

/// One tensor of the checkpoint.
struct dcp_tensor {
  std::string fqn;
  io::dtype type = io::dtype::float32;
  std::vector<std::int64_t> size;
  std::vector<dcp_chunk> chunks;
  bool operator==(const dcp_tensor&) const = default;
};

/// One non-tensor item (a pickled Python object saved with torch.save).
struct dcp_byte_item {
  std::string fqn;
  dcp_storage storage;
  bool operator==(const dcp_byte_item&) const = default;
};

/// Which torch wrote the metadata, by its module paths.
enum class dcp_layout : std::uint8_t {
  torch_1_13,  ///< torch.distributed._shard.checkpoint
  torch_2,     ///< torch.distributed.checkpoint
};

/// A DCP checkpoint's `.metadata`, decoded.
struct dcp_metadata {
  dcp_layout layout = dcp_layout::torch_2;
  std::vector<dcp_tensor> tensors;        ///< in the order of state_dict_metadata
  std::vector<dcp_byte_item> byte_items;  ///< likewise
  std::optional<std::string> version;     ///< Metadata.version, when written
  /// Per data file, the chunks it stores: (index in `tensors`, index in its chunks), in the
  /// metadata's order (what reading one file needs, without a scan of every chunk).
  std::map<std::string, std::vector<std::pair<std::size_t, std::size_t>>, std::less<>> chunks_by_file;

  /// The tensor `fqn`, or nullptr.
  const dcp_tensor* find(std::string_view fqn) const {
    for (const auto& t : tensors)
      if (t.fqn == fqn) return &t;
    return nullptr;
  }
};

/// The most dimensions a tensor of a DCP checkpoint may have.
inline constexpr std::size_t dcp_max_rank = 64;

namespace detail {

class dcp_decoder {
 public:
  /// `nodes`: the pickle's value count, which bounds the chunks (each has a node of its own)
  dcp_decoder(std::string file, std::size_t nodes) : file_(std::move(file)), nodes_(nodes) {}

  dcp_metadata decode(const pickle_node& root) {
    dcp_metadata md;
    const auto fields = dataclass(root, "Metadata", {"state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"}, "the root");
    md.layout = root.callable->text == dcp_meta_113 ? dcp_layout::torch_1_13 : dcp_layout::torch_2;
    const auto* sdm = need(fields, "state_dict_metadata", "Metadata");
    const auto* sd = need(fields, "storage_data", "Metadata");
    if (const auto* m = get(fields, "storage_meta"); m && m->kind != pickle_kind::none) storage_meta(*m);
    if (const auto* v = get(fields, "version"); v && v->kind != pickle_kind::none) {
      if (v->kind != pickle_kind::string) fail("Metadata.version is " + describe(*v) + ", not a str");
      md.version = v->text;
    }
    if (sdm->kind != pickle_kind::dict) fail("Metadata.state_dict_metadata is " + describe(*sdm) + ", not a dict");
    std::set<std::string> fqns;
    for (const auto& [k, v] : sdm->entries) {
      if (k->kind != pickle_kind::string) fail("state_dict_metadata has a key that is " + describe(*k) + ", not a str");
      if (!fqns.insert(k->text).second) fail("state_dict_metadata has " + quote_name(k->text) + " twice");
      if (is_class(*v, "BytesStorageMetadata")) {
        dataclass(*v, "BytesStorageMetadata", {}, quote_name(k->text));
        md.byte_items.push_back({k->text, {}});
      } else {
        md.tensors.push_back(tensor(k->text, *v));
      }
    }
    attach_storage(md, *sd);
    for (std::size_t i = 0; i < md.tensors.size(); ++i)
      for (std::size_t k = 0; k < md.tensors[i].chunks.size(); ++k)
        md.chunks_by_file[md.tensors[i].chunks[k].storage.relative_path].emplace_back(i, k);
    return md;
  }

 private:
  using field_map = std::map<std::string, const pickle_node*>;

  [[noreturn]] void fail(const std::string& why) const { report_error(file_ + ": " + why); }

  static bool is_class(const pickle_node& n, std::string_view name) {
    if (n.kind != pickle_kind::object || n.callable->name != name) return false;
    const auto& m = n.callable->text;
    return m == dcp_meta_113 || m == dcp_meta_2 || m == st_meta_113 || m == dcp_fs_113 || m == dcp_fs_2;
  }
  // The fields of a dataclass instance (NEWOBJ with no arguments, BUILD with its __dict__).
  field_map dataclass(const pickle_node& n, std::string_view cls, std::initializer_list<std::string_view> known, const std::string& what) const {
    if (!is_class(n, cls)) fail(what + " is " + describe(n) + ", not a " + std::string(cls));
    if (!n.arguments().empty()) fail(what + ": " + std::string(cls) + " is built with arguments");
    field_map out;
    if (!n.state) return out;
    if (n.state->kind != pickle_kind::dict) fail(what + ": the state of " + std::string(cls) + " is " + describe(*n.state) + ", not a dict");
    for (const auto& [k, v] : n.state->entries) {
      if (k->kind != pickle_kind::string) fail(what + ": " + std::string(cls) + " has a field named by " + describe(*k));
      bool ok = false;
      for (auto f : known) ok = ok || f == k->text;
      if (!ok) fail(what + ": " + std::string(cls) + " has the unknown field " + quote_name(k->text));
      if (!out.emplace(k->text, v).second) fail(what + ": " + std::string(cls) + " has the field " + quote_name(k->text) + " twice");
    }
    return out;
  }
  static const pickle_node* get(const field_map& f, const std::string& name) {
    const auto it = f.find(name);
    return it == f.end() ? nullptr : it->second;
  }
  const pickle_node* need(const field_map& f, const std::string& name, const std::string& what) const {
    const auto* n = get(f, name);
    if (!n) fail(what + " has no field " + quote_name(name));
    return n;
  }
  // torch.Size((ints,)) as a vector
  std::vector<std::int64_t> size(const pickle_node& n, const std::string& what) const {
    if (n.kind != pickle_kind::object || !n.callable->is_global("torch", "Size") || n.arguments().size() != 1 ||
        n.arguments()[0]->kind != pickle_kind::tuple || n.state)
      fail(what + " is " + describe(n) + ", not a torch.Size");
    std::vector<std::int64_t> v;
    if (n.arguments()[0]->items.size() > dcp_max_rank) fail(what + " has more than " + std::to_string(dcp_max_rank) + " dimensions");
    for (const auto* x : n.arguments()[0]->items) {
      if (x->kind != pickle_kind::integer || x->integer < 0) fail(what + " holds " + describe(*x));
      v.push_back(x->integer);
    }
    return v;
  }
  io::dtype properties(const pickle_node& n, const std::string& what) const {
    if (!is_class(n, "TensorProperties") || !n.arguments().empty()) fail(what + ": properties are " + describe(n) + ", not TensorProperties");
    const auto* s = n.state;
    if (!s || s->kind != pickle_kind::tuple || s->items.size() != 5)
      fail(what + ": the state of TensorProperties is " + (s ? describe(*s) : std::string("missing")) +
           ", not (dtype, layout, requires_grad, memory_format, pin_memory)");
    const auto& dt = *s->items[0];
    if (dt.kind != pickle_kind::global || dt.text != "torch") fail(what + ": dtype is " + describe(dt));
    const auto t = torch_dtype(dt.name);
    if (!t) fail(what + ": dtype torch." + dt.name + " is not supported");
    const auto& layout = *s->items[1];
    if (layout.kind != pickle_kind::object || !layout.callable->is_global("torch.serialization", "_get_layout") ||
        layout.arguments().size() != 1 || layout.arguments()[0]->kind != pickle_kind::string)
      fail(what + ": layout is " + describe(layout) + ", not torch.serialization._get_layout(name)");
    if (layout.arguments()[0]->text != "torch.strided") fail(what + ": layout " + quote_name(layout.arguments()[0]->text) + " is not supported (only torch.strided)");
    const auto& mf = *s->items[3];
    const bool member = mf.kind == pickle_kind::global &&
                        (mf.name.starts_with("MEM_FORMAT_ENCODING.") || mf.name.starts_with("_MEM_FORMAT_ENCODING."));
    const bool by_value = mf.kind == pickle_kind::object && mf.callable->role == pickle_role::enum_class &&
                          mf.arguments()[0]->integer >= 0 && mf.arguments()[0]->integer <= 2;
    if (!member && !by_value) fail(what + ": memory format is " + describe(mf) + ", not a MEM_FORMAT_ENCODING member");
    if (s->items[2]->kind != pickle_kind::boolean || s->items[4]->kind != pickle_kind::boolean)
      fail(what + ": requires_grad and pin_memory are " + describe(*s->items[2]) + " and " + describe(*s->items[4]) + ", not bools");
    return *t;
  }
  // StorageMeta(checkpoint_id, save_id, load_id, modules): names of the save, nothing read from
  // them; checked to be what torch writes and otherwise ignored
  void storage_meta(const pickle_node& n) const {
    const auto f = dataclass(n, "StorageMeta", {"checkpoint_id", "save_id", "load_id", "modules"}, "Metadata.storage_meta");
    for (const auto& [name, v] : f) {
      const bool text = v->kind == pickle_kind::none || v->kind == pickle_kind::string;
      bool ok = name == "checkpoint_id" ? text || (v->kind == pickle_kind::object && v->callable->is_global("pathlib", "PosixPath"))
                                        : name == "modules" ? v->kind == pickle_kind::list : text;
      if (name == "modules" && ok)
        for (const auto* m : v->items) ok = ok && m->kind == pickle_kind::string;
      if (!ok) fail("Metadata.storage_meta: " + name + " is " + describe(*v));
    }
  }
  dcp_tensor tensor(const std::string& fqn, const pickle_node& n) {
    const auto what = "tensor " + quote_name(fqn);
    const auto f = dataclass(n, "TensorStorageMetadata", {"properties", "size", "chunks"}, what);
    dcp_tensor t;
    t.fqn = fqn;
    t.type = properties(*need(f, "properties", what), what);
    t.size = size(*need(f, "size", what), what + ": size");
    const auto* chunks = need(f, "chunks", what);
    if (chunks->kind != pickle_kind::list) fail(what + ": chunks are " + describe(*chunks) + ", not a list");
    chunks_ += chunks->items.size();  // a list shared through the memo must not multiply the work
    if (chunks_ > nodes_) fail(what + ": more chunks than the pickle has values (lists shared between tensors)");
    for (std::size_t i = 0; i < chunks->items.size(); ++i) {
      const auto cw = what + ": chunk " + std::to_string(i);
      const auto cf = dataclass(*chunks->items[i], "ChunkStorageMetadata", {"offsets", "sizes"}, cw);
      dcp_chunk c;
      c.offsets = size(*need(cf, "offsets", cw), cw + ": offsets");
      c.sizes = size(*need(cf, "sizes", cw), cw + ": sizes");
      if (c.offsets.size() != t.size.size() || c.sizes.size() != t.size.size())
        fail(cw + " (offsets " + format_dims(c.offsets) + ", sizes " + format_dims(c.sizes) + ") has another rank than the tensor " + format_dims(t.size));
      for (std::size_t d = 0; d < t.size.size(); ++d)
        if (c.offsets[d] > t.size[d] || c.sizes[d] > t.size[d] - c.offsets[d])
          fail(cw + " (offsets " + format_dims(c.offsets) + ", sizes " + format_dims(c.sizes) + ") lies outside the tensor " + format_dims(t.size));
      t.chunks.push_back(std::move(c));
    }
    return t;
  }
  dcp_storage storage_info(const pickle_node& n, const std::string& what) const {
    const auto f = dataclass(n, "_StorageInfo", {"relative_path", "offset", "length", "transform_descriptors"}, what);
    const auto* path = need(f, "relative_path", what);
    const auto* off = need(f, "offset", what);
    const auto* len = need(f, "length", what);
    if (path->kind != pickle_kind::string || off->kind != pickle_kind::integer || len->kind != pickle_kind::integer ||
        off->integer < 0 || len->integer < 0)
      fail(what + ": _StorageInfo(" + describe(*path) + ", " + describe(*off) + ", " + describe(*len) + ") is not (str, offset, length)");
    if (const auto* td = get(f, "transform_descriptors");
        td && td->kind != pickle_kind::none && !((td->kind == pickle_kind::list || td->kind == pickle_kind::tuple) && td->items.empty()))
      fail(what + ": _StorageInfo.transform_descriptors is " + describe(*td) + "; transformed bytes are not supported");
    const std::filesystem::path p(path->text);
    bool escapes = path->text.empty() || p.is_absolute() || path->text.find('\0') != std::string::npos;
    for (const auto& part : p) escapes = escapes || part == "..";
    if (escapes) fail(what + ": relative_path " + quote_name(path->text) + " leaves the checkpoint's directory");
    return {path->text, static_cast<std::uint64_t>(off->integer), static_cast<std::uint64_t>(len->integer)};
  }
  void attach_storage(dcp_metadata& md, const pickle_node& sd) const {
    if (sd.kind != pickle_kind::dict) fail("Metadata.storage_data is " + describe(sd) + ", not a dict");
    // (fqn, offsets) -> storage; byte items have no offsets
    using key = std::pair<std::string, std::optional<std::vector<std::int64_t>>>;
    std::map<key, dcp_storage> by_key;
    for (const auto& [k, v] : sd.entries) {
      const auto f = dataclass(*k, "MetadataIndex", {"fqn", "offset", "index"}, "a storage_data key");
      const auto* fqn = need(f, "fqn", "MetadataIndex");
      if (fqn->kind != pickle_kind::string) fail("storage_data: MetadataIndex.fqn is " + describe(*fqn));
      const auto what = "storage_data for " + quote_name(fqn->text);
      std::optional<std::vector<std::int64_t>> offsets;
      if (const auto* o = get(f, "offset"); o && o->kind != pickle_kind::none) offsets = size(*o, what + ": offset");
      if (const auto* i = get(f, "index"); i && i->kind != pickle_kind::none && i->kind != pickle_kind::integer)
        fail(what + ": index is " + describe(*i));
      auto where = offsets ? what + " at " + format_dims(*offsets) : what;
      if (!by_key.emplace(key{fqn->text, offsets}, storage_info(*v, where)).second) fail(where + " is given twice");
    }
    // each entry serves exactly one item
    std::set<key> used;
    auto take = [&](const key& k, const std::string& item) {
      const auto it = by_key.find(k);
      if (it == by_key.end()) fail(item + " has no storage_data");
      if (!used.insert(k).second) fail(item + " is given twice in state_dict_metadata");
      return it->second;
    };
    for (auto& t : md.tensors)
      for (auto& c : t.chunks) c.storage = take(key{t.fqn, c.offsets}, "the chunk of " + quote_name(t.fqn) + " at " + format_dims(c.offsets));
    for (auto& b : md.byte_items) b.storage = take(key{b.fqn, std::nullopt}, "the byte item " + quote_name(b.fqn));
    for (const auto& entry : by_key)
      if (!used.count(entry.first))
        fail("storage_data for " + quote_name(entry.first.first) +
             (entry.first.second ? " at " + format_dims(*entry.first.second) : std::string()) + " matches no item of state_dict_metadata");
  }

  std::string file_;
  std::size_t nodes_ = 0;
  std::size_t chunks_ = 0;  // decoded so far
};

}  // namespace detail

/// Decodes the bytes of a `.metadata` file; `file` names it in errors ("dcp: <file>: <reason>").
inline dcp_metadata parse_dcp_metadata(std::span<const std::byte> bytes, const std::string& file) {
  const auto doc = unpickle(bytes, "dcp: " + file);
  return detail::dcp_decoder("dcp: " + file, doc.node_count()).decode(doc.root());
}

/// The path of a DCP directory's metadata file.
inline std::filesystem::path dcp_metadata_path(const std::filesystem::path& dir) { return dir / ".metadata"; }

/// Reads `<dir>/.metadata`.
inline dcp_metadata read_dcp_metadata(const std::filesystem::path& dir) {
  const auto path = dcp_metadata_path(dir);
  const mapped_file f(path, "dcp");
  return parse_dcp_metadata(f.bytes(), path.string());
}

/// The name of one saved item in messages: "dcp: DIR/FILE [offset, +length) ('fqn')".
inline std::string dcp_item_name(const std::filesystem::path& dir, const dcp_storage& s, const std::string& fqn) {
  return "dcp: " + (dir / s.relative_path).string() + " [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) + ") (" +
         io::detail::quote_name(fqn) + ")";
}

/// The bytes of one saved item in its mapped `.distcp` file `f`, checked to lie inside it.
inline std::span<const std::byte> dcp_item_bytes(const mapped_file& f, const dcp_storage& s) {
  const auto bytes = f.bytes();
  if (s.offset > bytes.size() || s.length > bytes.size() - s.offset)
    report_error("dcp: " + f.path().string() + ": an item of " + std::to_string(s.length) + " bytes at offset " +
                 std::to_string(s.offset) + " runs past the end of the " + std::to_string(bytes.size()) + "-byte file");
  return bytes.subspan(static_cast<std::size_t>(s.offset), static_cast<std::size_t>(s.length));
}

/// The tensor of chunk `index` of `t`, stored in the mapped file `f` of the checkpoint directory
/// `dir`: its bytes in place, checked to be the chunk's dtype and shape.
/// @post result.shape == t.chunks[index].sizes && result.type == t.type
inline torch_tensor dcp_chunk_tensor(const mapped_file& f, const std::filesystem::path& dir, const dcp_tensor& t,
                                     std::size_t index) {
  RESHARD_EXPECTS(index < t.chunks.size(), "dcp_chunk_tensor: no such chunk");
  const auto& c = t.chunks[index];
  const torch_archive a(dcp_item_bytes(f, c.storage), dcp_item_name(dir, c.storage, t.fqn));
  auto out = read_torch_tensor(a);
  if (out.type != t.type || out.shape != c.sizes)
    a.fail("holds a " + std::string(ms_name(out.type)) + " tensor " + io::detail::format_dims(out.shape) + ", but the metadata says " +
           std::string(ms_name(t.type)) + " " + io::detail::format_dims(c.sizes));
  return out;
}

/// The data files a DCP checkpoint's metadata names (its chunks' and byte items'), in the order
/// that numbers them as the sources of a conversion: `__<rank>_<n>.distcp` by (rank, n) as
/// numbers, then any other name in name order.
inline std::vector<std::string> dcp_data_files(const dcp_metadata& md) {
  std::set<std::string> names;
  for (const auto& [file, chunks] : md.chunks_by_file) names.insert(file);
  for (const auto& b : md.byte_items) names.insert(b.storage.relative_path);
  // (rank, n) of "__<rank>_<n>.distcp", or none
  const auto numbers = [](const std::string& name) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
    std::uint64_t v[2] = {0, 0};
    std::size_t at = 2;
    if (name.size() < 2 || name[0] != '_' || name[1] != '_') return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const std::size_t start = at;
      while (at < name.size() && name[at] >= '0' && name[at] <= '9' && at - start < 18)
        v[k] = v[k] * 10 + static_cast<std::uint64_t>(name[at++] - '0');
      if (at == start) return std::nullopt;
      if (k == 0 && (at >= name.size() || name[at++] != '_')) return std::nullopt;
    }
    if (name.substr(at) != ".distcp") return std::nullopt;
    return std::pair{v[0], v[1]};
  };
  std::vector<std::string> out(names.begin(), names.end());
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    const auto x = numbers(a), y = numbers(b);
    if (x && y) return *x < *y;
    return x.has_value() && !y.has_value();  // numbered names first; the others stay in name order
  });
  return out;
}

/// A DCP checkpoint directory: its metadata, and its items' bytes mapped in place.
class dcp_checkpoint {
 public:
  explicit dcp_checkpoint(std::filesystem::path dir) : dir_(std::move(dir)), metadata_(read_dcp_metadata(dir_)) {}

  const std::filesystem::path& directory() const noexcept { return dir_; }
  const dcp_metadata& metadata() const noexcept { return metadata_; }

  /// The bytes of one saved item (a torch.save archive), inside its mapped file.
  std::span<const std::byte> item_bytes(const dcp_storage& s) { return dcp_item_bytes(file(s.relative_path), s); }

  /// The tensor of chunk `index` of `t`: its bytes in place, checked to be the chunk's dtype and
  /// shape. @post result.shape == t.chunks[index].sizes && result.type == t.type
  torch_tensor chunk(const dcp_tensor& t, std::size_t index) {
    RESHARD_EXPECTS(index < t.chunks.size(), "dcp_checkpoint::chunk: no such chunk");
    const auto& s = t.chunks[index].storage;
    return dcp_chunk_tensor(file(s.relative_path), dir_, t, index);
  }

  /// The pickled object of a byte item, decoded (pickle.hpp's allow-list applies).
  pickle_document byte_item(const dcp_byte_item& b) {
    const torch_archive a(item_bytes(b.storage), dcp_item_name(dir_, b.storage, b.fqn));
    return unpickle(a.data_pkl(), a.name() + ": data.pkl");
  }

  /// Maps every file the metadata names (after which chunk() only reads).
  void map_all() {
    for (const auto& t : metadata_.tensors)
      for (const auto& c : t.chunks) file(c.storage.relative_path);
    for (const auto& b : metadata_.byte_items) file(b.storage.relative_path);
  }

 private:
  const mapped_file& file(const std::string& relative) {
    auto it = files_.find(relative);
    if (it == files_.end()) it = files_.emplace(relative, mapped_file(dir_ / relative, "dcp")).first;
    return it->second;
  }

  std::filesystem::path dir_;
  dcp_metadata metadata_;
  std::map<std::string, mapped_file> files_;
};

}  // namespace reshard::io
