// reshard/io/mapped_file.hpp: a read-only memory mapping of a whole file, and the registry of
// live mappings that lets a failed write out of a truncated source name that source.
//
// POSIX only. Errors are reshard::error naming the path and the errno text, prefixed with the
// caller's context ("ckpt", "safetensors", ...). Positioned reads from kept descriptors are in
// io/read_descriptor.hpp; atomic output files in io/atomic_file.hpp.
#pragma once

#include <reshard/io/input_file.hpp>
#include <reshard/io/read_descriptor.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/mman.h>

namespace reshard::io {

namespace detail {
// The live read-only mappings of source files (mapped_file, hf_checkpoint's shards), so that a
// write(2) out of a mapping whose file shrank (EFAULT: the pages past the new end are gone) can
// name the source instead of "Bad address".
struct mapped_range {
  std::size_t size = 0;
  std::filesystem::path path;
};
struct mapping_registry {
  std::mutex mutex;
  std::map<std::uintptr_t, mapped_range> ranges;  // by first byte
};
inline mapping_registry& mappings() {
  static mapping_registry r;
  return r;
}
/// Records that [base, base + size) maps the file `path` from its first byte.
inline void note_mapping(const void* base, std::size_t size, const std::filesystem::path& path) {
  if (size == 0) return;
  auto& r = mappings();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.ranges[reinterpret_cast<std::uintptr_t>(base)] = {size, path};
}
/// Forgets the mappings recorded in [base, base + size).
inline void forget_mappings(const void* base, std::size_t size) noexcept {
  auto& r = mappings();
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.ranges.erase(r.ranges.lower_bound(b), r.ranges.lower_bound(b + std::max<std::size_t>(size, 1)));
}
/// For bytes that could not be read (EFAULT) out of a recorded mapping: "the source <file> was
/// truncated while being read: its bytes from offset O are gone"; empty if no mapping holds them.
inline std::string truncated_source(const void* p) {
  auto& r = mappings();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.ranges.upper_bound(a);
  if (it == r.ranges.begin()) return {};
  --it;
  if (a - it->first >= it->second.size) return {};
  return "the source " + it->second.path.string() +
         " was truncated while being read: its bytes from offset " + std::to_string(a - it->first) +
         " are gone";
}
}  // namespace detail

/// address) for the lifetime of the mapping, across moves. An empty file maps to an empty span.
class mapped_file {
 public:
  mapped_file() = default;

  /// Maps `path`. `context` prefixes error messages ("ckpt: /a/b.ckpt: cannot open: ...").
  /// With `copy`, a file of at most `copy_most` bytes is also read into *copy with one pread(2)
  /// on the same descriptor (copied() tells): a caller that only parses a small file's headers
  /// reads them there, and the mapping's pages stay untouched (no page faults, nothing to
  /// release), its spans then rebased onto bytes(). With `keep`, the descriptor the file was
  /// mapped from is kept there for the reads that follow (one open of the file for both).
  explicit mapped_file(std::filesystem::path path, std::string_view context = "mapped_file",
                       std::vector<std::byte>* copy = nullptr, std::uint64_t copy_most = 0,
                       read_descriptor* keep = nullptr)
      : path_(std::move(path)) {
    input_file in(path_, context);  // a regular file, or an error naming what it is
    size_ = in.size();
    status_ = in.status();
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, in.fd(), 0);
      if (p == MAP_FAILED) detail::report_errno(context, path_, "cannot map", errno);
      data_ = static_cast<const std::byte*>(p);
      try {
        detail::note_mapping(data_, size_, path_);
        if (copy && size_ <= copy_most) {
          copy->resize(static_cast<std::size_t>(size_));
          in.pread_exact(*copy, 0);
          copied_ = true;
        }
      } catch (...) {
        unmap();
        throw;
      }
    }
    if (keep) keep->adopt(in.release(), size_);
  }  // the mapping keeps the file alive

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        status_(o.status_), copied_(o.copied_) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      status_ = o.status_;
      copied_ = o.copied_;
    }
    return *this;
  }
  ~mapped_file() { unmap(); }

  const std::filesystem::path& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, static_cast<std::size_t>(size_)}; }
  /// The file's identity and modification time when it was mapped (input_file::status).
  const file_status& status() const noexcept { return status_; }
  /// The constructor read the file into its `copy` too.
  bool copied() const noexcept { return copied_; }

 private:
  void unmap() noexcept {
    if (data_) {
      detail::forget_mappings(data_, size_);
      ::munmap(const_cast<std::byte*>(data_), size_);
    }
    data_ = nullptr;
    size_ = 0;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  file_status status_;
  bool copied_ = false;
};

}  // namespace reshard::io
