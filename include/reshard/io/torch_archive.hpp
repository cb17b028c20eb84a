// reshard/io/torch_archive.hpp: the zip archives `torch.save` writes, read in place from a byte
// span (a whole file, or the range of a DCP `.distcp` file that holds one saved item), and the
// tensor such an archive holds (see docs/formats.md#9-pytorch-distributed-checkpoints-dcp).
//
// Layout (PyTorch's PyTorchStreamWriter): a zip whose entries are all stored (method 0), each
// named `<prefix>/<record>` with one prefix ("archive" when saved to a stream): `data.pkl` (the
// pickled object), `data/<key>` (the raw bytes of each storage, padded by the local header's
// extra field to 64-byte alignment), `version`, and in later versions `byteorder` and
// `.data/serialization_id`. Local headers carry sizes 0 and a data descriptor follows each
// entry (flag bit 3); the central directory has the real sizes. torch writes a zip64 end of
// central directory (and its locator) always; zip64 sizes and offsets (extra field 1) are read
// when an entry needs them.
//
// torch_archive checks the structure and refuses, naming the archive and the entry: a missing or
// inconsistent end of central directory (a truncated archive), an entry outside the archive or
// overlapping the central directory, a compressed or encrypted entry, a local header that
// disagrees with the central directory, two entries of one name, and names without the common
// prefix. Entries are spans into the input: nothing is copied.
//
// read_torch_tensor decodes `data.pkl` of a saved tensor (refusing a `byteorder` entry other than
// `little`) (pickle.hpp, with torch.save's
// persistent ids): `_rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// hooks[, metadata])`, the storage `('storage', torch.<T>Storage, key, location, numel)`. It
// checks the storage entry's size (numel times the element size), that the tensor lies inside
// its storage, and that the strides are row-major contiguous (a stride of a dimension of size 1
// is free, as in torch); a strided view is refused, naming its size and stride.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/pickle.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// One entry of a torch.save archive.
struct torch_archive_entry {
  std::string name;                ///< the full name, "archive/data/0"
  std::span<const std::byte> data; ///< its bytes, inside the archive's span
  std::uint32_t crc32 = 0;         ///< the CRC-32 the central directory records
  std::uint64_t offset = 0;        ///< where `data` begins, from the archive's first byte
};

namespace detail {
inline std::uint64_t zip_le(std::span<const std::byte> b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}
inline constexpr std::uint32_t zip_local_sig = 0x04034b50, zip_central_sig = 0x02014b50,
                               zip_end_sig = 0x06054b50, zip64_end_sig = 0x06064b50,
                               zip64_locator_sig = 0x07064b50;
}  // namespace detail

/// A torch.save archive read in place. Its entries point into the span it was given, which must
/// outlive it.
class torch_archive {
 public:
  torch_archive() = default;

  /// Reads the archive `bytes`; `name` names it in errors ("<name>: torch archive: <reason>").
  torch_archive(std::span<const std::byte> bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {
    read_directory();
  }

  const std::string& name() const noexcept { return name_; }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// The entries in central-directory order.
  const std::vector<torch_archive_entry>& entries() const noexcept { return entries_; }
  /// The common directory of the entries ("archive").
  const std::string& prefix() const noexcept { return prefix_; }

  /// The entry `<prefix>/<record>` ("data.pkl", "data/0"), or nullptr.
  const torch_archive_entry* find(std::string_view record) const {
    for (const auto& e : entries_)
      if (e.name.size() == prefix_.size() + 1 + record.size() && e.name.compare(prefix_.size() + 1, record.size(), record) == 0)
        return &e;
    return nullptr;
  }
  /// The entry `<prefix>/<record>`, or an error naming it.
  const torch_archive_entry& at(std::string_view record) const {
    const auto* e = find(record);
    if (!e) fail("has no entry " + io::detail::quote_name(prefix_ + "/" + std::string(record)));
    return *e;
  }
  /// The pickled object.
  std::span<const std::byte> data_pkl() const { return at("data.pkl").data; }

  /// Checks the CRC-32 of `entry` (one pass over its bytes).
  void check_crc(const torch_archive_entry& entry) const {
    if (io::crc32(entry.data) != entry.crc32) fail("entry " + io::detail::quote_name(entry.name) + " fails its CRC-32");
  }

  [[noreturn]] void fail(const std::string& why) const { report_error(name_ + ": torch archive: " + why); }

 private:
  void need(std::uint64_t at, std::uint64_t n, const char* what) const {
    if (at > bytes_.size() || n > bytes_.size() - at)
      fail(std::string(what) + " at byte " + std::to_string(at) + " runs past the end of the " +
           std::to_string(bytes_.size()) + "-byte archive (truncated?)");
  }
  std::uint64_t le(std::uint64_t at, int n) const { return detail::zip_le(bytes_, static_cast<std::size_t>(at), n); }

  void read_directory() {
    using namespace detail;
    if (bytes_.size() < 22) fail("is " + std::to_string(bytes_.size()) + " bytes, too short for a zip archive (truncated?)");
    // the end of central directory record: the last one whose comment reaches the end exactly
    std::optional<std::uint64_t> end;
    const std::uint64_t lowest = bytes_.size() >= 22 + 65535 ? bytes_.size() - 22 - 65535 : 0;
    for (std::uint64_t p = bytes_.size() - 22 + 1; p-- > lowest;) {
      if (le(p, 4) == zip_end_sig && p + 22 + le(p + 20, 2) == bytes_.size()) {
        end = p;
        break;
      }
    }
    if (!end) fail("has no end of central directory record (truncated?)");
    std::uint64_t count = le(*end + 10, 2), cd_size = le(*end + 12, 4), cd_offset = le(*end + 16, 4);
    if (le(*end + 4, 2) != 0 || le(*end + 6, 2) != 0 || le(*end + 8, 2) != count) fail("spans several disks");
    std::uint64_t cd_limit = *end;  // the central directory ends before this
    if (*end >= 20 && le(*end - 20, 4) == zip64_locator_sig) {
      const auto z = le(*end - 20 + 8, 8);
      if (le(*end - 20 + 4, 4) != 0 || le(*end - 20 + 16, 4) != 1) fail("zip64 locator spans several disks");
      if (z > *end - 20 || *end - 20 - z < 56) fail("zip64 end of central directory at byte " + std::to_string(z) + " is not before its locator");
      if (le(z, 4) != zip64_end_sig) fail("no zip64 end of central directory record at byte " + std::to_string(z));
      if (le(z + 16, 4) != 0 || le(z + 20, 4) != 0 || le(z + 24, 8) != le(z + 32, 8)) fail("zip64 record spans several disks");
      const std::uint64_t c64 = le(z + 32, 8), s64 = le(z + 40, 8), o64 = le(z + 48, 8);
      auto agree = [](std::uint64_t v32, std::uint64_t v64, std::uint64_t all_ones) { return v32 == all_ones || v32 == v64; };
      if (!agree(count, c64, 0xFFFF) || !agree(cd_size, s64, 0xFFFFFFFF) || !agree(cd_offset, o64, 0xFFFFFFFF))
        fail("its zip64 and zip end of central directory records disagree");
      count = c64;
      cd_size = s64;
      cd_offset = o64;
      cd_limit = z;
    }
    if (cd_offset > cd_limit || cd_size != cd_limit - cd_offset)
      fail("central directory (" + std::to_string(cd_size) + " bytes at byte " + std::to_string(cd_offset) +
           ") does not end where its end record begins (byte " + std::to_string(cd_limit) + ")");
    if (count > cd_size / 46) fail(std::to_string(count) + " entries cannot fit in a " + std::to_string(cd_size) + "-byte central directory");
    std::set<std::string> names;
    std::uint64_t at = cd_offset;
    for (std::uint64_t i = 0; i < count; ++i) {
      need(at, 46, "central directory entry");
      if (le(at, 4) != zip_central_sig) fail("central directory entry " + std::to_string(i) + " has a bad signature");
      const auto flags = le(at + 8, 2), method = le(at + 10, 2);
      const auto crc = static_cast<std::uint32_t>(le(at + 16, 4));
      std::uint64_t csize = le(at + 20, 4), usize = le(at + 24, 4);
      const auto nlen = le(at + 28, 2), elen = le(at + 30, 2), clen = le(at + 32, 2);
      std::uint64_t local = le(at + 42, 4);
      need(at + 46, nlen + elen + clen, "central directory entry");
      if (at + 46 + nlen + elen + clen > cd_limit) fail("central directory entry " + std::to_string(i) + " runs past the central directory");
      std::string name(reinterpret_cast<const char*>(bytes_.data()) + at + 46, static_cast<std::size_t>(nlen));
      const auto shown = io::detail::quote_name(name);
      // zip64 extended information: the fields whose 32-bit value is all ones, in this order
      for (std::uint64_t x = at + 46 + nlen; x + 4 <= at + 46 + nlen + elen;) {
        const auto id = le(x, 2), len = le(x + 2, 2);
        if (x + 4 + len > at + 46 + nlen + elen) fail("entry " + shown + " has a malformed extra field");
        if (id == 1) {
          std::uint64_t y = x + 4;
          for (auto* f : {&usize, &csize, &local}) {
            if (*f != 0xFFFFFFFF) continue;
            if (y + 8 > x + 4 + len) fail("entry " + shown + " has a short zip64 extra field");
            *f = le(y, 8);
            y += 8;
          }
        }
        x += 4 + len;
      }
      if (flags & 1u) fail("entry " + shown + " is encrypted");
      if (method != 0) fail("entry " + shown + " is compressed (method " + std::to_string(method) + "); torch.save stores entries uncompressed");
      if (csize != usize) fail("entry " + shown + " is stored with " + std::to_string(csize) + " bytes for " + std::to_string(usize));
      if (!names.insert(name).second) fail("has two entries named " + shown);
      // the local header, then the data
      need(local, 30, ("local header of entry " + shown).c_str());
      if (le(local, 4) != zip_local_sig) fail("entry " + shown + ": no local header at byte " + std::to_string(local));
      if (le(local + 8, 2) != 0) fail("entry " + shown + " is compressed in its local header (method " + std::to_string(le(local + 8, 2)) + ")");
      const auto lnlen = le(local + 26, 2), lelen = le(local + 28, 2);
      need(local + 30, lnlen + lelen, ("local header of entry " + shown).c_str());
      if (lnlen != nlen || std::string_view(reinterpret_cast<const char*>(bytes_.data()) + local + 30, lnlen) != name)
        fail("entry " + shown + ": its local header names another entry");
      const std::uint64_t data = local + 30 + lnlen + lelen;
      if (data > cd_offset || usize > cd_offset - data)
        fail("entry " + shown + " (" + std::to_string(usize) + " bytes at byte " + std::to_string(data) +
             ") runs into the central directory at byte " + std::to_string(cd_offset));
      entries_.push_back({std::move(name), bytes_.subspan(static_cast<std::size_t>(data), static_cast<std::size_t>(usize)), crc, data});
      at += 46 + nlen + elen + clen;
    }
    if (entries_.empty()) fail("has no entries");
    const auto slash = entries_[0].name.find('/');
    if (slash == std::string::npos || slash == 0) fail("entry " + io::detail::quote_name(entries_[0].name) + " is not inside a directory");
    prefix_ = entries_[0].name.substr(0, slash);
    for (const auto& e : entries_)
      if (e.name.size() <= prefix_.size() + 1 || e.name.compare(0, prefix_.size() + 1, prefix_ + "/") != 0)
        fail("entry " + io::detail::quote_name(e.name) + " is outside the archive's directory " + io::detail::quote_name(prefix_));
  }

  std::span<const std::byte> bytes_;
  std::string name_;
  std::string prefix_;
  std::vector<torch_archive_entry> entries_;
};

/// A tensor saved by torch.save: its dtype, shape and row-major bytes (a span into the archive).
struct torch_tensor {
  io::dtype type = io::dtype::float32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  ///< prod(shape) elements, row-major
  std::string storage_key;          ///< the storage's record, "data/<key>"
  std::int64_t storage_offset = 0;  ///< in elements
};

/// The dtypes reshard holds that torch has: the dtype, torch's name of it and its storage class
/// (what torch.save pickles). Read by torch_storage_dtype and torch_dtype, written by
/// dcp_writer.hpp.
struct torch_dtype_names {
  io::dtype type;
  std::string_view name, storage;
};
inline constexpr std::array<torch_dtype_names, 10> torch_dtype_table{{
    {io::dtype::float32, "float32", "FloatStorage"},   {io::dtype::float64, "float64", "DoubleStorage"},
    {io::dtype::float16, "float16", "HalfStorage"},    {io::dtype::bfloat16, "bfloat16", "BFloat16Storage"},
    {io::dtype::int64, "int64", "LongStorage"},        {io::dtype::int32, "int32", "IntStorage"},
    {io::dtype::int16, "int16", "ShortStorage"},       {io::dtype::int8, "int8", "CharStorage"},
    {io::dtype::uint8, "uint8", "ByteStorage"},        {io::dtype::boolean, "bool", "BoolStorage"}}};

/// The dtype of the torch storage class `name` ("FloatStorage"), if reshard holds it.
inline std::optional<io::dtype> torch_storage_dtype(std::string_view name) noexcept {
  for (const auto& e : torch_dtype_table)
    if (e.storage == name) return e.type;
  return std::nullopt;
}

/// The dtype of the torch dtype `name` ("float32", "bfloat16"), if reshard holds it.
inline std::optional<io::dtype> torch_dtype(std::string_view name) noexcept {
  for (const auto& e : torch_dtype_table)
    if (e.name == name) return e.type;
  return std::nullopt;
}

/// torch's names of `type`, or null when torch has no such dtype (uint16, uint32, uint64, str).
inline const torch_dtype_names* torch_names_of(io::dtype type) noexcept {
  for (const auto& e : torch_dtype_table)
    if (e.type == type) return &e;
  return nullptr;
}

namespace detail {
/// The ints of a tuple (a size or a stride) of data.pkl, each at least `min`.
inline std::vector<std::int64_t> torch_ints(const torch_archive& a, const pickle_node& n, const char* what, std::int64_t min) {
  if (n.kind != pickle_kind::tuple) a.fail(std::string("data.pkl: the tensor's ") + what + " is " + describe(n) + ", not a tuple");
  std::vector<std::int64_t> v;
  for (const auto* x : n.items) {
    if (x->kind != pickle_kind::integer || x->integer < min)
      a.fail(std::string("data.pkl: the tensor's ") + what + " holds " + describe(*x));
    v.push_back(x->integer);
  }
  return v;
}
}  // namespace detail

/// The tensor the archive holds, its bytes in place.
/// @post result.data.size() == prod(result.shape) * element_size(result.type)
inline torch_tensor read_torch_tensor(const torch_archive& a) {
  pickle_options opt;
  opt.persistent_ids = true;
  const auto doc = unpickle(a.data_pkl(), a.name() + ": data.pkl", opt);
  const auto& root = doc.root();
  if (root.kind != pickle_kind::object || !root.callable->is_global("torch._utils", "_rebuild_tensor_v2"))
    a.fail("data.pkl holds " + describe(root) + ", not a tensor (torch._utils._rebuild_tensor_v2)");
  const auto& args = root.arguments();
  if (args.size() != 6 && args.size() != 7)
    a.fail("data.pkl: _rebuild_tensor_v2 has " + std::to_string(args.size()) + " arguments, not 6 or 7");
  if (args.size() == 7 && !(args[6]->kind == pickle_kind::none || (args[6]->kind == pickle_kind::dict && args[6]->entries.empty())))
    a.fail("data.pkl: the tensor carries metadata (" + describe(*args[6]) + ")");
  // the storage: ('storage', torch.<T>Storage, key, location, numel)
  const auto& pid = *args[0];
  if (pid.kind != pickle_kind::persistent_id) a.fail("data.pkl: the tensor's storage is " + describe(pid) + ", not a persistent id");
  const auto& sid = *pid.items[0];
  if (sid.kind != pickle_kind::tuple || sid.items.size() != 5 || sid.items[0]->kind != pickle_kind::string ||
      sid.items[0]->text != "storage" || sid.items[1]->kind != pickle_kind::global || sid.items[2]->kind != pickle_kind::string ||
      sid.items[3]->kind != pickle_kind::string || sid.items[4]->kind != pickle_kind::integer || sid.items[4]->integer < 0)
    a.fail("data.pkl: the storage id is " + describe(sid) + ", not ('storage', type, key, location, numel)");
  const auto& type = *sid.items[1];
  const auto dt = type.text == "torch" ? torch_storage_dtype(type.name) : std::nullopt;
  if (!dt) a.fail("data.pkl: storage type " + type.qualified_name() + " is not supported");
  if (const auto* order = a.find("byteorder");
      order && (order->data.size() != 6 || std::memcmp(order->data.data(), "little", 6) != 0))
    a.fail("byteorder is not 'little': big-endian storages are not supported");
  torch_tensor t;
  t.type = *dt;
  t.storage_key = "data/" + sid.items[2]->text;
  const auto numel = static_cast<std::uint64_t>(sid.items[4]->integer);
  const auto es = element_size(t.type);
  const auto& storage = a.at(t.storage_key);
  if (numel > storage.data.size() / es || numel * es != storage.data.size())
    a.fail("storage " + io::detail::quote_name(t.storage_key) + " holds " + std::to_string(storage.data.size()) +
           " bytes, not " + std::to_string(numel) + " elements of " + std::to_string(es) + " bytes");
  if (args[1]->kind != pickle_kind::integer || args[1]->integer < 0)
    a.fail("data.pkl: the storage offset is " + describe(*args[1]));
  t.storage_offset = args[1]->integer;
  t.shape = detail::torch_ints(a, *args[2], "size", 0);
  const auto stride = detail::torch_ints(a, *args[3], "stride", 0);
  if (stride.size() != t.shape.size())
    a.fail("data.pkl: size " + io::detail::format_dims(t.shape) + " and stride " + io::detail::format_dims(stride) + " differ in rank");
  if (args[4]->kind != pickle_kind::boolean) a.fail("data.pkl: requires_grad is " + describe(*args[4]));
  if (args[5]->kind != pickle_kind::dict) a.fail("data.pkl: the backward hooks are " + describe(*args[5]));
  // elements, with overflow refused; then row-major contiguity (size-1 dimensions are free)
  std::uint64_t n = 1;
  for (auto d : t.shape) {
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
      a.fail("data.pkl: size " + io::detail::format_dims(t.shape) + " overflows");
    n *= static_cast<std::uint64_t>(d);
  }
  if (n > 0) {
    std::uint64_t expect = 1;
    for (std::size_t i = t.shape.size(); i-- > 0;) {
      if (t.shape[i] != 1 && static_cast<std::uint64_t>(stride[i]) != expect)
        a.fail("data.pkl: stride " + io::detail::format_dims(stride) + " of size " + io::detail::format_dims(t.shape) +
               " is not contiguous (row-major); strided tensors are not supported");
      expect *= static_cast<std::uint64_t>(t.shape[i]);
    }
  }
  const auto off = static_cast<std::uint64_t>(t.storage_offset);
  if (off > numel || n > numel - off)
    a.fail("data.pkl: the tensor (" + std::to_string(n) + " elements from " + std::to_string(off) +
           ") lies outside its storage of " + std::to_string(numel) + " elements");
  t.data = storage.data.subspan(static_cast<std::size_t>(off * es), static_cast<std::size_t>(n * es));
  return t;
}

}  // namespace reshard::io
