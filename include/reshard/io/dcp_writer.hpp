// reshard/io/dcp_writer.hpp: writing a PyTorch Distributed Checkpoint (DCP) directory as torch's
// FileSystemWriter writes it (the reader is dcp.hpp; docs/formats.md, "DCP as a target"):
//
//   pickle_emitter         the opcodes of Python's pickler, one call at a time
//   encode_dcp_metadata    a dcp_metadata as the pickle of torch's dataclass Metadata, written as
//                          Python's pickler writes dataclasses (NEWOBJ of the class, then BUILD
//                          with its __dict__; TensorProperties with its __getstate__ tuple), under
//                          torch 1.13's module paths or torch 2.x's (dcp_layout)
//   torch_archive_head/_tail  one tensor as torch.save (torch 1.13) writes it: an uncompressed zip
//                          `archive/data.pkl` (_rebuild_tensor_v2 of a persistent storage),
//                          `archive/data/0` (the bytes, 64-byte aligned), `archive/version`; the
//                          tensor bytes go between head and tail, streamed, and the archive's size
//                          follows from the dtype and the dims alone (torch_archive_size)
//   dcp_metadata_of        the `.metadata` of a plan's DCP targets, from the plan alone: each item
//                          one chunk at its box, stored in `__<rank>_0.distcp` at the offset the
//                          archives before it in the file add up to
//   check_whole_dcp_target the refusal of a DCP target written in part (some target ranks, a
//                          part of a plan, several processes), the same words wherever it is met
//
// Module paths: TensorProperties is pickled under torch.distributed._shard.sharded_tensor.metadata
// with its enum MEM_FORMAT_ENCODING, as torch 1.13 to 2.3 write it; later 2.x moved the class into
// torch.distributed.checkpoint.metadata (enum _MEM_FORMAT_ENCODING) but keep the old module, so
// this is the spelling every torch from 1.13 on can load. The other classes follow the layout:
// torch.distributed._shard.checkpoint.{metadata,filesystem} (1.13) or
// torch.distributed.checkpoint.{metadata,filesystem} (2.x). Metadata's later fields
// (storage_meta, version) are left out: their dataclass defaults (None) apply.
//
// Limits: an archive holds at most 4 GiB - 1 (torch then writes zip64 local headers, which this
// writer does not): a larger chunk is an error naming the tensor.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/dcp.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/torch_archive.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace reshard::io {

// ---------------------------------------------------------------------------------------------
// pickle

/// Emits a pickle one opcode at a time, as Python's pickler spells them (protocol 2 or 4).
/// Nothing is checked: the caller writes a valid stream (or, in tests, a deliberately broken one).
class pickle_emitter {
 public:
  explicit pickle_emitter(int protocol = 4) {
    op(0x80);
    raw(static_cast<char>(protocol));
  }
  pickle_emitter& op(int code) { return raw(static_cast<char>(code)); }
  pickle_emitter& none() { return op('N'); }
  pickle_emitter& boolean(bool b) { return op(b ? 0x88 : 0x89); }
  /// BININT1, BININT2, BININT or LONG1, the shortest that holds `v` (Python's choice).
  pickle_emitter& integer(std::int64_t v) {
    if (v >= 0 && v < 256) return op('K').le(static_cast<std::uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return op('M').le(static_cast<std::uint64_t>(v), 2);
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    int n = 8;  // LONG1: the shortest two's complement
    while (n > 1) {
      const auto shifted = v >> (8 * (n - 1) - 1);
      if (shifted != 0 && shifted != -1) break;
      --n;
    }
    return op(0x8a).le(static_cast<std::uint64_t>(n), 1).le(static_cast<std::uint64_t>(v), n);
  }
  pickle_emitter& floating(double d) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &d, 8);
    op('G');
    for (int i = 7; i >= 0; --i) raw(static_cast<char>((bits >> (8 * i)) & 0xFF));
    return *this;
  }
  /// SHORT_BINUNICODE or BINUNICODE (protocol 4's choice).
  pickle_emitter& str(std::string_view s) {
    if (s.size() < 256) op(0x8c).le(s.size(), 1);
    else op('X').le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  /// BINUNICODE, always (protocol 2's only binary str).
  pickle_emitter& str4(std::string_view s) {
    op('X').le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  pickle_emitter& bytes(std::string_view s) {
    if (s.size() < 256) op('C').le(s.size(), 1);
    else op('B').le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  pickle_emitter& mark() { return op('('); }
  pickle_emitter& memoize() { return op(0x94); }
  /// BINPUT / LONG_BINPUT (protocol 2's memo)
  pickle_emitter& put(std::uint32_t i) { return i < 256 ? op('q').le(i, 1) : op('r').le(i, 4); }
  /// put() of the next memo index (0, 1, ... as Python's pickler numbers them)
  pickle_emitter& put_next() { return put(memo_++); }
  pickle_emitter& get(std::uint32_t i) { return i < 256 ? op('h').le(i, 1) : op('j').le(i, 4); }
  /// GLOBAL (protocol 2)
  pickle_emitter& global(std::string_view module, std::string_view name) {
    op('c');
    out_.append(module);
    raw('\n');
    out_.append(name);
    raw('\n');
    return *this;
  }
  /// STACK_GLOBAL (protocol 4)
  pickle_emitter& stack_global(std::string_view module, std::string_view name) { return str(module).str(name).op(0x93); }
  pickle_emitter& stop() { return op('.'); }
  pickle_emitter& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) raw(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  pickle_emitter& raw(char c) {
    out_.push_back(c);
    return *this;
  }

  // the pieces of torch's pickles (protocol 4)
  /// torch.Size(dims): REDUCE of the class with the tuple of the dims
  pickle_emitter& torch_size(std::span<const std::int64_t> dims) {
    stack_global("torch", "Size").mark();
    for (auto d : dims) integer(d);
    return op('t').op(0x85).op('R');
  }
  pickle_emitter& torch_size(std::initializer_list<std::int64_t> dims) {
    return torch_size(std::span<const std::int64_t>(dims.begin(), dims.size()));
  }
  /// NEWOBJ of `module.cls` with no arguments (a dataclass as pickled); BUILD follows
  pickle_emitter& new_object(std::string_view module, std::string_view cls) { return stack_global(module, cls).op(')').op(0x81); }
  /// opens the state dict of a BUILD: then key, value, ..., then end_build()
  pickle_emitter& build_dict() { return op('}').mark(); }
  pickle_emitter& end_build() { return op('u').op('b'); }

  const std::string& bytes_written() const noexcept { return out_; }
  std::string take() noexcept { return std::move(out_); }
  std::vector<std::byte> data() const {
    std::vector<std::byte> b(out_.size());
    if (!b.empty()) std::memcpy(b.data(), out_.data(), out_.size());
    return b;
  }

 private:
  std::string out_;
  std::uint32_t memo_ = 0;
};

/// The module paths of a DCP `.metadata` (see the header comment).
struct dcp_modules {
  std::string_view metadata, filesystem, properties = detail::st_meta_113;
};
inline dcp_modules dcp_modules_of(dcp_layout l) noexcept {
  return l == dcp_layout::torch_1_13 ? dcp_modules{detail::dcp_meta_113, detail::dcp_fs_113} : dcp_modules{detail::dcp_meta_2, detail::dcp_fs_2};
}

/// The pickle of torch's Metadata for `md` (md.layout chooses the module paths): its tensors as
/// TensorStorageMetadata (dtype, torch.strided, contiguous), its byte items as
/// BytesStorageMetadata, planner_data None, and storage_data: each chunk's MetadataIndex(fqn,
/// offset, index) and byte item's MetadataIndex(fqn) -> _StorageInfo(relative_path, offset,
/// length). parse_dcp_metadata reads it back as `md` (chunks_by_file aside, which it derives).
inline std::string encode_dcp_metadata(const dcp_metadata& md) {
  const dcp_modules m = dcp_modules_of(md.layout);
  pickle_emitter w;
  w.new_object(m.metadata, "Metadata").build_dict();
  w.str("state_dict_metadata").op('}').mark();
  for (const auto& t : md.tensors) {
    const torch_dtype_names* names = torch_names_of(t.type);
    if (!names) report_error("DCP metadata: tensor " + detail::quote_name(t.fqn) + ": dtype " + std::string(ms_name(t.type)) + " has no torch equivalent");
    w.str(t.fqn).new_object(m.metadata, "TensorStorageMetadata").build_dict();
    w.str("properties").new_object(m.properties, "TensorProperties").mark();
    w.stack_global("torch", names->name);
    w.stack_global("torch.serialization", "_get_layout").str("torch.strided").op(0x85).op('R');
    w.boolean(false);
    w.stack_global("builtins", "getattr").stack_global(m.properties, "MEM_FORMAT_ENCODING").str("TORCH_CONTIGUOUS_FORMAT").op(0x86).op('R');
    w.boolean(false).op('t').op('b');
    w.str("size").torch_size(t.size);
    w.str("chunks").op(']').mark();
    for (const auto& c : t.chunks) {
      w.new_object(m.metadata, "ChunkStorageMetadata").build_dict();
      w.str("offsets").torch_size(c.offsets).str("sizes").torch_size(c.sizes).end_build();
    }
    w.op('e').end_build();
  }
  for (const auto& b : md.byte_items) w.str(b.fqn).new_object(m.metadata, "BytesStorageMetadata");
  w.op('u');
  w.str("planner_data").none();
  w.str("storage_data").op('}').mark();
  const auto storage = [&](const dcp_storage& s) {
    w.new_object(m.filesystem, "_StorageInfo").build_dict();
    w.str("relative_path").str(s.relative_path).str("offset").integer(static_cast<std::int64_t>(s.offset));
    w.str("length").integer(static_cast<std::int64_t>(s.length)).end_build();
  };
  for (const auto& t : md.tensors)
    for (std::size_t i = 0; i < t.chunks.size(); ++i) {  // as MetadataIndex.__init__ sets them
      w.new_object(m.metadata, "MetadataIndex").build_dict();
      w.str("fqn").str(t.fqn).str("index").integer(static_cast<std::int64_t>(i)).str("offset").torch_size(t.chunks[i].offsets);
      w.end_build();
      storage(t.chunks[i].storage);
    }
  for (const auto& b : md.byte_items) {
    w.new_object(m.metadata, "MetadataIndex").build_dict().str("fqn").str(b.fqn).str("index").none().end_build();
    storage(b.storage);
  }
  w.op('u').end_build().stop();
  return w.take();
}

// ---------------------------------------------------------------------------------------------
// torch.save archives

namespace detail {
inline constexpr std::string_view torch_archive_prefix = "archive/";
inline constexpr std::uint64_t zip_u32_max = 0xFFFFFFFFu;

// n little-endian bytes of v; past its 8 bytes, zeros (a run of zero fields written at once)
inline void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(i < 8 ? static_cast<char>((v >> (8 * i)) & 0xFF) : '\0');
}
// torch's contiguous strides: stride[i] = prod(max(size[j], 1)) over j > i
inline std::vector<std::int64_t> contiguous_strides(std::span<const std::int64_t> dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * std::max<std::int64_t>(dims[i], 1);
  return s;
}
// a tuple of ints as Python's protocol 2 pickler writes one, memoized when not empty
inline void int_tuple(pickle_emitter& w, std::span<const std::int64_t> v) {
  if (v.empty()) {
    w.op(')');
    return;
  }
  if (v.size() > 3) w.mark();
  for (auto x : v) w.integer(x);
  w.op(v.size() == 1 ? 0x85 : v.size() == 2 ? 0x86 : v.size() == 3 ? 0x87 : 't');
  w.put_next();
}
// the local header of record `name` whose data starts at a multiple of 64 (torch's padding: an
// extra field "FB" of 'Z's), at `cursor` in the archive
inline void zip_local_header(std::string& s, std::string_view name, std::uint64_t cursor) {
  const std::uint64_t start = cursor + 30 + name.size() + 4;
  const std::uint64_t pad = (64 - start % 64) % 64;
  put_le(s, zip_local_sig, 4);
  put_le(s, 0, 2);       // version needed
  put_le(s, 0x0808, 2);  // a data descriptor follows; UTF-8 names
  put_le(s, 0, 2 + 2 + 2 + 4 + 4 + 4);  // stored, time, date, crc, sizes (in the descriptor)
  put_le(s, name.size(), 2);
  put_le(s, 4 + pad, 2);
  s.append(name);
  s.append("FB");
  put_le(s, pad, 2);
  s.append(static_cast<std::size_t>(pad), 'Z');
}
inline void zip_descriptor(std::string& s, std::uint32_t crc, std::uint64_t n) {
  put_le(s, 0x08074b50, 4);
  put_le(s, crc, 4);
  put_le(s, n, 4);
  put_le(s, n, 4);
}
struct zip_record {
  std::string name;
  std::uint64_t offset = 0, size = 0;
  std::uint32_t crc = 0;
};
// the central directory of `records` at `cursor`, then the zip64 end record, its locator and the
// end record, as torch's writer finishes every archive
inline void zip_directory(std::string& s, const std::vector<zip_record>& records, std::uint64_t cursor) {
  const std::size_t before = s.size();
  for (const auto& r : records) {
    put_le(s, zip_central_sig, 4);
    put_le(s, 0, 2 + 2);   // made by, needed
    put_le(s, 0x0808, 2);
    put_le(s, 0, 2 + 2 + 2);  // stored, time, date
    put_le(s, r.crc, 4);
    put_le(s, r.size, 4);
    put_le(s, r.size, 4);
    put_le(s, r.name.size(), 2);
    put_le(s, 0, 2 + 2 + 2 + 2 + 4);  // extra, comment, disk, internal and external attributes
    put_le(s, r.offset, 4);
    s.append(r.name);
  }
  const std::uint64_t dir_size = s.size() - before, end64 = cursor + dir_size;
  put_le(s, 0x06064b50, 4);
  put_le(s, 44, 8);
  put_le(s, 0x031e, 2);
  put_le(s, 0x002d, 2);
  put_le(s, 0, 4 + 4);
  put_le(s, records.size(), 8);
  put_le(s, records.size(), 8);
  put_le(s, dir_size, 8);
  put_le(s, cursor, 8);
  put_le(s, 0x07064b50, 4);
  put_le(s, 0, 4);
  put_le(s, end64, 8);
  put_le(s, 1, 4);
  put_le(s, 0x06054b50, 4);
  put_le(s, 0, 2 + 2);
  put_le(s, records.size(), 2);
  put_le(s, records.size(), 2);
  put_le(s, dir_size, 4);
  put_le(s, cursor, 4);
  put_le(s, 0, 2);
}
}  // namespace detail

/// The `archive/data.pkl` of torch.save(tensor) for a contiguous tensor of `type` and `dims`
/// (protocol 2, as torch 1.13 writes it): _rebuild_tensor_v2(persistent ('storage',
/// <dtype>Storage, '0', 'cpu', numel), 0, size, stride, False, OrderedDict()).
inline std::string torch_data_pickle(dtype type, std::span<const std::int64_t> dims) {
  const torch_dtype_names* names = torch_names_of(type);
  RESHARD_EXPECTS(names != nullptr, "torch_data_pickle: a dtype torch has");
  std::int64_t numel = 1;
  for (auto d : dims) numel *= d;
  pickle_emitter w(2);
  w.global("torch._utils", "_rebuild_tensor_v2").put_next();
  w.mark().mark().str4("storage").put_next().global("torch", names->storage).put_next();
  w.str4("0").put_next().str4("cpu").put_next().integer(numel).op('t').put_next().op('Q');
  w.integer(0);
  detail::int_tuple(w, dims);
  const auto strides = detail::contiguous_strides(dims);
  detail::int_tuple(w, strides);
  w.boolean(false).global("collections", "OrderedDict").put_next().op(')').op('R').put_next();
  w.op('t').put_next().op('R').put_next().stop();
  return w.take();
}

/// What comes before a tensor's bytes in its torch.save archive (torch_archive_head): data.pkl's
/// record and the local header of data/0, whose data starts 64-byte aligned.
struct torch_archive_head {
  std::string bytes;
  std::uint64_t pkl_size = 0;     ///< data.pkl's
  std::uint32_t pkl_crc = 0;
  std::uint64_t data_header = 0;  ///< where data/0's local header starts
};

inline torch_archive_head torch_archive_head_of(dtype type, std::span<const std::int64_t> dims) {
  const std::string pkl = torch_data_pickle(type, dims);
  torch_archive_head h;
  h.pkl_size = pkl.size();
  h.pkl_crc = crc32(std::as_bytes(std::span<const char>(pkl.data(), pkl.size())));
  detail::zip_local_header(h.bytes, std::string(detail::torch_archive_prefix) + "data.pkl", 0);
  h.bytes.append(pkl);
  detail::zip_descriptor(h.bytes, h.pkl_crc, pkl.size());
  h.data_header = h.bytes.size();
  detail::zip_local_header(h.bytes, std::string(detail::torch_archive_prefix) + "data/0", h.bytes.size());
  return h;
}

/// What follows the tensor's `bytes` bytes (whose CRC-32 is `crc`) in the archive that starts
/// with `head`: data/0's descriptor, the record `version` ("3\n"), the central directory and the
/// end records.
inline std::string torch_archive_tail(const torch_archive_head& head, std::uint64_t bytes, std::uint32_t crc) {
  const std::string prefix(detail::torch_archive_prefix);
  std::vector<detail::zip_record> records;
  records.push_back({prefix + "data.pkl", 0, head.pkl_size, head.pkl_crc});
  records.push_back({prefix + "data/0", head.data_header, bytes, crc});
  std::string s;
  detail::zip_descriptor(s, crc, bytes);
  const std::string version = "3\n";
  const auto vb = std::as_bytes(std::span<const char>(version.data(), version.size()));
  const std::uint64_t version_at = head.bytes.size() + bytes + s.size();
  detail::zip_local_header(s, prefix + "version", version_at);
  s.append(version);
  detail::zip_descriptor(s, crc32(vb), version.size());
  records.push_back({prefix + "version", version_at, version.size(), crc32(vb)});
  detail::zip_directory(s, records, head.bytes.size() + bytes + s.size());
  return s;
}

/// The size of the torch.save archive of a tensor of `type` and `dims` (and so `bytes` bytes).
inline std::uint64_t torch_archive_size(dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) {
  const torch_archive_head head = torch_archive_head_of(type, dims);
  return head.bytes.size() + bytes + torch_archive_tail(head, bytes, 0).size();
}

/// torch.save(tensor) of a contiguous tensor whose row-major bytes are `data`, whole (what a
/// sink streams as head, bytes, tail).
inline std::string torch_save_bytes(dtype type, std::span<const std::int64_t> dims, std::span<const std::byte> data) {
  const torch_archive_head head = torch_archive_head_of(type, dims);
  std::string s = head.bytes;
  s.append(reinterpret_cast<const char*>(data.data()), data.size());
  s.append(torch_archive_tail(head, data.size(), crc32(data)));
  return s;
}

// ---------------------------------------------------------------------------------------------
// a plan's DCP targets

/// The data file of target rank `rank` in a DCP directory.
inline std::string dcp_data_file_name(index_t rank) { return "__" + std::to_string(rank) + "_0.distcp"; }

/// A target rank of a DCP checkpoint as one run writes it: the rank and the directory.
struct dcp_run_target {
  index_t rank = 0;
  std::filesystem::path dir;
};

/// The one refusal of a DCP target written in part. Its `.metadata` lists the chunks of every
/// target rank, so one run writes it whole: each of its `ranks` target ranks once, into its one
/// directory `dir`. `runs`: what each run that shares the work writes of it (the engine: its one
/// job; plan_part: the parts of a plan; MPI: the processes' shares); any other split is a
/// reshard::error, worded from the split alone, so every process of one split says the same.
/// `who` starts the message, `runs_are` names the runs ("parts", "processes"), `remedy` says how
/// to write it whole.
inline void check_whole_dcp_target(std::string_view who, const std::filesystem::path& dir, index_t ranks,
                                   const std::vector<std::vector<dcp_run_target>>& runs, std::string_view runs_are,
                                   std::string_view remedy) {
  std::vector<std::size_t> sizes;  // of the runs that write any of it
  for (const auto& r : runs)
    if (!r.empty()) sizes.push_back(r.size());
  std::string why;
  if (sizes.size() > 1) {
    why = "here split into " + std::to_string(sizes.size()) + " " + std::string(runs_are) + ", writing ";
    for (std::size_t k = 0; k < sizes.size(); ++k) why += (k ? " + " : "") + std::to_string(sizes[k]);
    why += " of them";
  } else if (sizes.size() == 1) {
    const auto& one = *std::find_if(runs.begin(), runs.end(), [](const auto& r) { return !r.empty(); });
    std::vector<bool> seen(static_cast<std::size_t>(std::max<index_t>(ranks, 0)), false);
    for (const auto& t : one) {
      if (t.rank < 0 || t.rank >= ranks) why = "here target rank " + std::to_string(t.rank) + " is not one of them";
      else if (t.dir != dir) why = "here target rank " + std::to_string(t.rank) + " goes into " + t.dir.string();
      else if (seen[static_cast<std::size_t>(t.rank)]) why = "here target rank " + std::to_string(t.rank) + " is given twice";
      if (!why.empty()) break;
      seen[static_cast<std::size_t>(t.rank)] = true;
    }
    if (why.empty() && static_cast<index_t>(one.size()) != ranks)
      why = "this run writes " + std::to_string(one.size()) + " of them";
  }
  if (why.empty()) return;
  report_error(std::string(who) + ": the PyTorch DCP checkpoint " + dir.string() +
               ", whose .metadata lists the chunks of every target rank, is written for all " + std::to_string(ranks) +
               " target ranks at once, into one directory, by one run; " + why + " (" + std::string(remedy) + ")");
}

/// The box item `it` writes as a chunk: its target box, or (a whole tensor: a raw copy, a
/// scalar, or an item of no target strategy) zeros and its dims.
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> dcp_chunk_box(const plan_item& it) {
  if (!it.raw && !it.scalar && it.target.offset.size() == it.dims.size())
    return {it.target.offset.to_vector(), it.target.extent.to_vector()};
  return {std::vector<std::int64_t>(it.dims.size(), 0), it.dims};
}

/// Checks that item `it` of a DCP target can be written (a dtype torch has, an archive under
/// 4 GiB); `op` starts the message.
inline void check_dcp_item(const plan_item& it, const std::string& op) {
  if (!torch_names_of(it.to))
    report_error(op + ": parameter " + detail::quote_name(it.name) + " is " + std::string(ms_name(it.to)) +
                 ", which a PyTorch DCP checkpoint cannot hold (torch has no such dtype)");
  if (torch_archive_size(it.to, it.dims, it.bytes) > detail::zip_u32_max)
    report_error(op + ": parameter " + detail::quote_name(it.name) + ": a chunk of " + std::to_string(it.bytes) +
                 " bytes; DCP chunks of 4 GiB or more are not written yet (split it across more target ranks)");
}

/// The `.metadata` of the DCP directory `dir` from the plan's targets whose path it is (in
/// their order): per item a chunk of its tensor (dcp_chunk_box), stored in its rank's data file
/// after the archives of the items before it, then the target's byte items; a tensor's size is the end of its farthest chunk
/// in every dim (the targets of a strategy cover it). Tensors in the order they first appear.
inline dcp_metadata dcp_metadata_of(const checkpoint_plan& p, const std::filesystem::path& dir, dcp_layout layout) {
  dcp_metadata md;
  md.layout = layout;
  std::map<std::string, std::size_t, std::less<>> index;
  for (const auto& t : p.targets) {
    if (t.format != checkpoint_format::dcp || t.path != dir) continue;
    const std::string file = dcp_data_file_name(t.rank);
    std::uint64_t at = 0;
    for (const auto& it : t.items) {
      auto [offsets, sizes] = dcp_chunk_box(it);
      const std::uint64_t length = torch_archive_size(it.to, it.dims, it.bytes);
      auto [pos, fresh] = index.try_emplace(it.name, md.tensors.size());
      if (fresh) md.tensors.push_back({it.name, it.to, std::vector<std::int64_t>(sizes.size(), 0), {}});
      dcp_tensor& dt = md.tensors[pos->second];
      for (std::size_t d = 0; d < sizes.size() && d < dt.size.size(); ++d)
        dt.size[d] = std::max(dt.size[d], offsets[d] + sizes[d]);
      dt.chunks.push_back({std::move(offsets), std::move(sizes), {file, at, length}});
      at += length;
    }
    for (const auto& b : t.byte_items) {  // after the tensors, copied as stored
      md.byte_items.push_back({b.name, {file, at, b.bytes}});
      at += b.bytes;
    }
  }
  return md;
}

/// Drops from the plan's DCP targets each chunk (parameter and box) that a lower target rank of
/// the same directory writes too: a replicated box is stored once, by the lowest rank holding it
/// (as torch's planner deduplicates). Call before the plan's totals are summed.
inline void dedup_dcp_chunks(checkpoint_plan& p) {
  using key = std::tuple<std::filesystem::path, std::string, std::vector<std::int64_t>, std::vector<std::int64_t>>;
  std::map<key, index_t> lowest;
  for (const auto& t : p.targets) {
    if (t.format != checkpoint_format::dcp) continue;
    for (const auto& it : t.items) {
      auto [o, s] = dcp_chunk_box(it);
      auto [pos, fresh] = lowest.try_emplace(key{t.path, it.name, std::move(o), std::move(s)}, t.rank);
      if (!fresh) pos->second = std::min(pos->second, t.rank);
    }
  }
  for (auto& t : p.targets) {
    if (t.format != checkpoint_format::dcp) continue;
    std::erase_if(t.items, [&](const plan_item& it) {
      auto [o, s] = dcp_chunk_box(it);
      return lowest.at(key{t.path, it.name, std::move(o), std::move(s)}) != t.rank;
    });
  }
}

}  // namespace reshard::io
