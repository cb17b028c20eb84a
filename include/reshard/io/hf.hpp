// reshard/io/hf.hpp: Hugging Face sharded safetensors checkpoints, a directory of
// `model-00001-of-0000K.safetensors` files with `model.safetensors.index.json` (or a single
// `model.safetensors`), read as one checkpoint of full tensors and planned for writing.
//
//   hf_checkpoint        the shards mapped side by side into one reserved address range, so that
//                        a tensor of any shard is a span of one mapping and its logical offset
//                        (the address minus the range's start) names the shard and the offset
//                        in it; the engine reads it like one file (by pread or from the mapping)
//   is_hf_directory      a directory holding the index or model.safetensors
//   hf_shards            Hugging Face's rule for filling shards of at most max_shard_bytes
//   hf_shard_name        "model-00002-of-00005.safetensors"
//   is_hf_shard_name     whether a file's name is of that form
//   hf_index_json        the text of model.safetensors.index.json
//
// The facts (file names, index fields, the sharding rule, the shards' metadata) are in
// docs/formats.md, section 7.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/json_reader.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

/// The index file of a sharded Hugging Face checkpoint.
inline constexpr std::string_view hf_index_name = "model.safetensors.index.json";
/// The file of an unsharded Hugging Face checkpoint.
inline constexpr std::string_view hf_single_name = "model.safetensors";

/// Whether `dir` is a directory holding a Hugging Face checkpoint (its index, or model.safetensors).
inline bool is_hf_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return false;
  return std::filesystem::is_regular_file(dir / hf_index_name, ec) ||
         std::filesystem::is_regular_file(dir / hf_single_name, ec);
}

/// Shard k (0-based) of `count`: "model-00001-of-00003.safetensors"; "model.safetensors" when
/// there is one shard.
inline std::string hf_shard_name(std::size_t k, std::size_t count) {
  if (count == 1) return std::string(hf_single_name);
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, count);
  return name;
}

/// Whether `name` is a shard's name as hf_shard_name makes it, "model-NNNNN-of-NNNNN.safetensors"
/// (five digits each): the files of a Hugging Face checkpoint that replacing it removes.
inline bool is_hf_shard_name(std::string_view name) noexcept {
  constexpr std::string_view head = "model-", mid = "-of-", tail = ".safetensors";
  const auto digits = [&](std::size_t at) {
    for (std::size_t i = at; i < at + 5; ++i)
      if (name[i] < '0' || name[i] > '9') return false;
    return true;
  };
  if (name.size() != head.size() + 5 + mid.size() + 5 + tail.size()) return false;
  return name.substr(0, head.size()) == head && digits(head.size()) &&
         name.substr(head.size() + 5, mid.size()) == mid && digits(head.size() + 5 + mid.size()) &&
         name.substr(name.size() - tail.size()) == tail;
}

/// Hugging Face's rule for filling shards, over tensor sizes in order: a tensor larger than
/// `max_shard_bytes` gets a shard of its own; otherwise it joins the current shard unless that
/// would exceed the bound, in which case a new shard starts. Returns each shard's first index.
inline std::vector<std::size_t> hf_shards(std::span<const std::uint64_t> sizes, std::uint64_t max_shard_bytes) {
  std::vector<std::size_t> first;
  std::uint64_t current = 0;
  bool open = false;  // a shard that may take more tensors
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > max_shard_bytes) {
      first.push_back(i);
      open = false;
      continue;
    }
    if (!open || current + sizes[i] > max_shard_bytes) {
      first.push_back(i);
      open = true;
      current = 0;
    }
    current += sizes[i];
  }
  return first;
}

/// The text of model.safetensors.index.json: {"metadata": {"total_size": T}, "weight_map":
/// {name: file}}, keys sorted, indented by 2, ending in a newline (as Hugging Face writes it).
inline std::string hf_index_json(std::uint64_t total_size, const std::map<std::string, std::string>& weight_map) {
  nlohmann::ordered_json j;
  j["metadata"]["total_size"] = total_size;
  auto& w = j["weight_map"];
  w = nlohmann::ordered_json::object();
  for (const auto& [name, file] : weight_map) w[name] = file;
  return j.dump(2) + "\n";
}

/// The weight_map of the text of a model.safetensors.index.json (tensor -> shard file), read
/// strictly (json_reader.hpp); `source` names the file in messages. Other keys ("metadata", and
/// whatever else a writer adds) are not read. Every file must be a plain name in the directory.
inline std::map<std::string, std::string> decode_hf_index(std::string_view text, std::string_view source) {
  const std::string who = "hf: " + std::string(source) + ": ";
  const auto j = parse_json_strict<nlohmann::json>(text, who);
  if (!j.is_object()) report_error(who + "not a JSON object");
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) report_error(who + "no object \"weight_map\" {tensor: file}");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      report_error(who + "weight_map: the file of tensor " + detail::quote_name(name) + " is not a string");
    const auto& f = file.get_ref<const std::string&>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      report_error(who + "weight_map: tensor " + detail::quote_name(name) + ": " + detail::quote_name(f) +
                   " is not a file name in the directory");
    weight_map.emplace(name, f);
  }
  if (weight_map.empty()) report_error(who + "weight_map lists no tensor");
  return weight_map;
}

/// A Hugging Face checkpoint directory, its shards memory-mapped side by side in one address
/// range (each shard at a page boundary, a page of no access between them) and indexed. Not
/// movable: the entries point into the range.
class hf_checkpoint {
 public:
  /// One tensor: its shard and its bytes in the range.
  struct entry {
    safetensors_entry tensor;  // data points into the range
    std::size_t shard = 0;
  };

  explicit hf_checkpoint(std::filesystem::path dir) : dir_(std::move(dir)) {
    namespace fs = std::filesystem;
    const std::string who = "hf: " + dir_.string() + ": ";
    std::error_code ec;
    if (!fs::is_directory(dir_, ec)) report_error(who + "not a directory");
    std::map<std::string, std::string> weight_map;  // tensor -> shard file
    if (fs::is_regular_file(dir_ / hf_index_name, ec)) {
      const fs::path index = dir_ / hf_index_name;
      const mapped_file f(index, "hf");
      const auto b = f.bytes();
      weight_map = decode_hf_index(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), index.string());
      for (const auto& [name, file] : weight_map) shard_names_.insert(file);
      // a model.safetensors beside an index that does not list it: loaders differ on which one
      // they read (the index, or the single file), so neither is guessed at
      if (fs::exists(dir_ / hf_single_name, ec) && !shard_names_.count(std::string(hf_single_name)))
        report_error(who + "holds both " + std::string(hf_index_name) + " and " + std::string(hf_single_name) +
                     ", which the index does not list: which one is the checkpoint is ambiguous (remove the one "
                     "that is stale)");
    } else if (fs::is_regular_file(dir_ / hf_single_name, ec)) {
      shard_names_.insert(std::string(hf_single_name));
    } else {
      report_error(who + "holds neither " + std::string(hf_index_name) + " nor " + std::string(hf_single_name) +
                   " (not a Hugging Face checkpoint)");
    }
    map_shards();
    // index each shard; with an index, every tensor must be in the shard it names, and in no other
    std::map<std::string, std::size_t> seen;  // tensor -> entry
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const auto& s = shards_[k];
      const auto idx = index_safetensors(range(k), s.path.string());
      for (const auto& e : idx.entries) {
        if (!weight_map.empty()) {
          const auto w = weight_map.find(e.name);
          if (w == weight_map.end())
            report_error("hf: " + s.path.string() + ": tensor " + detail::quote_name(e.name) + " is not in " +
                         std::string(hf_index_name) + "'s weight_map");
          if (w->second != s.path.filename().string())
            report_error("hf: " + s.path.string() + ": tensor " + detail::quote_name(e.name) + " is also here, but " +
                         std::string(hf_index_name) + " puts it in " + w->second);
        }
        if (!seen.emplace(e.name, entries_.size()).second)
          report_error("hf: " + s.path.string() + ": tensor " + detail::quote_name(e.name) + " is in two shards");
        entries_.push_back({e, k});
      }
    }
    for (const auto& [name, file] : weight_map)
      if (!seen.count(name))
        report_error("hf: " + (dir_ / file).string() + ": has no tensor " + detail::quote_name(name) + ", which " +
                     std::string(hf_index_name) + " puts there");
    // the order of the shards, then of the data in each (the order the writer filled them)
    std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) {
      return a.shard != b.shard ? a.shard < b.shard : a.tensor.begin < b.tensor.begin;
    });
  }

  ~hf_checkpoint() { close_for_reads(); }
  hf_checkpoint(const hf_checkpoint&) = delete;
  hf_checkpoint& operator=(const hf_checkpoint&) = delete;

  const std::filesystem::path& path() const noexcept { return dir_; }
  /// The tensors, in shard order and, in each shard, data order.
  std::span<const entry> entries() const noexcept { return entries_; }
  /// The shards' files, in name order.
  std::vector<std::filesystem::path> shard_paths() const {
    std::vector<std::filesystem::path> out;
    for (const auto& s : shards_) out.push_back(s.path);
    return out;
  }
  /// The shards' total size in bytes.
  std::uint64_t file_size() const noexcept { return size_; }
  /// The reserved range: every shard's bytes, and the gaps between them.
  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(map_.base), static_cast<std::size_t>(map_.size)};
  }
  /// The logical offset of a byte of a shard: its distance from the range's start.
  std::uint64_t offset_of(const std::byte* p) const noexcept {
    return static_cast<std::uint64_t>(p - static_cast<const std::byte*>(map_.base));
  }
  /// Reads `out.size()` bytes at logical offset `offset` (within one shard, or running on into
  /// the next) with pread(2) from the shards' files.
  void pread_into(std::span<std::byte> out, std::uint64_t offset) const {
    while (!out.empty()) {
      // the last shard starting at or before `offset`
      const auto next = std::upper_bound(shards_.begin(), shards_.end(), offset,
                                         [](std::uint64_t o, const shard& s) { return o < s.at; });
      const std::size_t k = next == shards_.begin() ? 0 : static_cast<std::size_t>(next - shards_.begin()) - 1;
      const auto& s = shards_[k];
      if (offset < s.at || offset >= s.at + s.size)
        report_error("hf: " + dir_.string() + ": logical offset " + std::to_string(offset) + " is in no shard");
      const std::uint64_t in = offset - s.at;
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), s.size - in));
      pread_exact(read_fd(k), out.first(n), in, s.path, "hf");
      out = out.subspan(n);
      offset += n;
    }
  }
  /// Closes the descriptors pread_into() opened (reopened if read again).
  void close_for_reads() const noexcept {
    const std::lock_guard<std::mutex> lock(*fd_mutex_);
    for (auto& s : shards_) detail::close_fd(s.fd);
  }

 private:
  struct shard {
    std::filesystem::path path;
    std::uint64_t at = 0, size = 0;  // offset in the range, file size
    mutable int fd = -1;             // for pread_into
  };

  std::span<const std::byte> range(std::size_t k) const noexcept {
    return {static_cast<const std::byte*>(map_.base) + shards_[k].at, static_cast<std::size_t>(shards_[k].size)};
  }

  // Reserves the range and maps every shard into it.
  void map_shards() {
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    std::uint64_t at = 0;
    std::vector<input_file> files;  // open until mapped: the file mapped is the file checked
    for (const auto& name : shard_names_) {
      shard s;
      s.path = dir_ / name;
      files.emplace_back(s.path, "hf");  // a regular file, or an error naming what it is
      s.size = files.back().size();
      s.at = at;
      at += (s.size + page - 1) / page * page + page;  // a page of no access after each shard
      size_ += s.size;
      shards_.push_back(std::move(s));
    }
    const std::uint64_t reserved = std::max<std::uint64_t>(at, page);
    void* base = ::mmap(nullptr, static_cast<std::size_t>(reserved), PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) detail::report_errno("hf", dir_, "cannot reserve address space for the shards", errno);
    map_.base = base;
    map_.size = reserved;
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const auto& s = shards_[k];
      if (s.size == 0) continue;
      void* p = ::mmap(static_cast<std::byte*>(map_.base) + s.at, static_cast<std::size_t>(s.size),
                       PROT_READ, MAP_SHARED | MAP_FIXED, files[k].fd(), 0);
      if (p == MAP_FAILED) detail::report_errno("hf", s.path, "cannot map", errno);
      detail::note_mapping(p, static_cast<std::size_t>(s.size), s.path);
    }
  }

  int read_fd(std::size_t k) const {
    const std::lock_guard<std::mutex> lock(*fd_mutex_);
    auto& s = shards_[k];
    if (s.fd < 0) {
      s.fd = input_file(s.path, "hf").release();
      ::posix_fadvise(s.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    return s.fd;
  }

  std::filesystem::path dir_;
  std::set<std::string> shard_names_;
  std::vector<shard> shards_;
  std::vector<entry> entries_;
  struct reservation {  // unmapped also when the constructor throws
    void* base = nullptr;
    std::uint64_t size = 0;
    reservation() = default;
    reservation(const reservation&) = delete;
    reservation& operator=(const reservation&) = delete;
    ~reservation() {
      if (!base) return;
      detail::forget_mappings(base, static_cast<std::size_t>(size));
      ::munmap(base, static_cast<std::size_t>(size));
    }
  } map_;
  std::uint64_t size_ = 0;
  std::unique_ptr<std::mutex> fd_mutex_ = std::make_unique<std::mutex>();
};

}  // namespace reshard::io
