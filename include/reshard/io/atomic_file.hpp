// reshard/io/atomic_file.hpp: an output file that appears at its destination complete or not at
// all (atomic_file_writer: a temporary beside the destination, fsync, rename on commit), how its
// bytes reach the filesystem (write_mode, durability), and the filesystem names that decide it.
//
// POSIX only. Errors are reshard::error naming the path and the errno text, prefixed with the
// caller's context ("ckpt", "safetensors", ...). The temporaries' names and the fault injection
// for tests are in io/temporary_files.hpp.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/input_file.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/temporary_files.hpp>
#include <reshard/parallel.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace reshard::io {

/// When the bytes of an output file reach the disk.
enum class durability : std::uint8_t {
  /// commit() fsyncs the file before its rename and its directory after: crash-safe on its own.
  sync,
  /// Write-back starts while the file is written; commit() renames without waiting for it. The
  /// caller makes the file durable (sync_files) before it publishes it: several files then wait
  /// for the disk together instead of one after another. The workflows use this.
  deferred,
  /// Never fsynced. After a power cut or an OS crash, a file may be empty or torn under its final
  /// name: only for scratch outputs that can be made again.
  none,
};

/// How an output file's bytes go to its filesystem.
enum class write_mode : std::uint8_t {
  /// The default: `direct` where the outputs are made durable on a local disk filesystem (ext4,
  /// xfs, btrfs) and the sources are not read from mappings; `buffered` everywhere else (tmpfs,
  /// network and FUSE filesystems, --no-sync). resolve_write_mode decides, once per run.
  automatic,
  /// write(2) through the page cache; write-back started as the file grows.
  buffered,
  /// O_DIRECT: the bytes go from an aligned buffer of the writer to the disk, past the page cache
  /// (whose first touch of new pages is what varies most from run to run on a virtual machine:
  /// docs/benchmarks.md, "Durable writes"). The last partial block is written buffered, and the
  /// file is fsynced as in `buffered`. A filesystem that refuses O_DIRECT gets `buffered`.
  direct,
};

constexpr std::string_view to_string(write_mode m) noexcept {
  return m == write_mode::direct ? "direct" : m == write_mode::buffered ? "buffered" : "auto";
}

/// The write mode to_string names ("auto", "buffered", "direct"); nullopt for another name.
constexpr std::optional<write_mode> write_mode_from(std::string_view name) noexcept {
  for (write_mode m : {write_mode::automatic, write_mode::buffered, write_mode::direct})
    if (to_string(m) == name) return m;
  return std::nullopt;
}

/// The kind of filesystem that holds `path`, by its statfs(2) magic number: "ext4" (ext2/3/4),
/// "xfs", "btrfs", "zfs", "tmpfs", "ramfs", "overlay", "nfs", "fuse", "lustre", "cifs", "smb2",
/// "ceph", "gpfs", "9p", "squashfs"; "0x<magic>" for another; "" when statfs fails. Network and
/// FUSE filesystems are the ones where memory-mapped reads are known to be slow (remote_filesystem).
inline std::string filesystem_name(const std::filesystem::path& path) {
  struct ::statfs st {};
  if (::statfs(path.c_str(), &st) != 0) return {};
  static constexpr std::pair<std::uint64_t, const char*> names[] = {
      {0xEF53, "ext4"},       {0x58465342, "xfs"},    {0x9123683E, "btrfs"}, {0x2FC12FC1, "zfs"},
      {0x01021994, "tmpfs"},  {0x858458F6, "ramfs"},  {0x794C7630, "overlay"}, {0x6969, "nfs"},
      {0x65735546, "fuse"},   {0x0BD00BD0, "lustre"}, {0xFF534D42, "cifs"},  {0xFE534D42, "smb2"},
      {0x00C36400, "ceph"},   {0x47504653, "gpfs"},   {0x01021997, "9p"},    {0x73717368, "squashfs"}};
  const auto magic = static_cast<std::uint64_t>(static_cast<std::uint32_t>(st.f_type));
  for (const auto& [m, name] : names)
    if (m == magic) return name;
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(magic));
  return hex;
}

/// A filesystem of filesystem_name() reached over a network or through FUSE.
inline bool remote_filesystem(std::string_view name) noexcept {
  for (std::string_view n : {"nfs", "fuse", "lustre", "cifs", "smb2", "ceph", "gpfs", "9p"})
    if (name == n) return true;
  return false;
}

/// A local filesystem on a block device, where direct writes (write_mode::direct) skip the page
/// cache: "ext4", "xfs", "btrfs".
inline bool local_disk_filesystem(std::string_view name) noexcept {
  return name == "ext4" || name == "xfs" || name == "btrfs";
}

/// The write mode a run uses for outputs under `dir` (which need not exist yet: its nearest
/// existing ancestor is asked, one statfs): `requested` unless it is write_mode::automatic, which
/// is `direct` when the outputs are fsynced (`durable`), the sources are not read from mappings
/// (`mapped_reads`: their bytes must reach write(2) uncopied, so that a source truncated under
/// the run is named) and the filesystem is a local disk filesystem; `buffered` otherwise.
inline write_mode resolve_write_mode(write_mode requested, const std::filesystem::path& dir, bool durable,
                                     bool mapped_reads) {
  if (requested != write_mode::automatic) return requested;
  if (!durable || mapped_reads) return write_mode::buffered;
  std::filesystem::path p = dir;
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec))
    p = p.has_parent_path() && p.parent_path() != p ? p.parent_path() : std::filesystem::path();
  return local_disk_filesystem(filesystem_name(p.empty() ? "." : p)) ? write_mode::direct : write_mode::buffered;
}

/// Makes the named files' data and metadata durable (fsync each, up to `threads` at a time, as
/// disks and network filesystems serve several waits at once). Their names are not: fsync the
/// directories after renaming (detail::fsync_directory). Errors name the file
/// ("<context>: <file>: cannot fsync: <reason>").
inline void sync_files(std::span<const std::filesystem::path> files, unsigned threads = 8,
                       std::string_view context = "sync") {
  reshard::parallel_for(files.size(), std::max(1u, threads), [&](std::size_t i) {
    int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) detail::report_errno(context, files[i], "cannot open to fsync", errno);
    if (::fsync(fd) != 0) {
      const int err = errno;
      detail::close_fd(fd);
      detail::report_errno(context, files[i], "cannot fsync", err);
    }
    detail::close_fd(fd);
  });
}

/// An output file that appears at its destination complete or not at all. Bytes go to a unique
/// temporary `<destination>.reshard-<pid>.<n>.tmp` in the same directory; commit() flushes,
/// fsyncs and renames it over the destination, then fsyncs the directory. The destructor of an
/// uncommitted writer (an exception, an early return) removes the temporary; the temporaries of
/// killed processes are removed by the next writer of the same destination. A destination that
/// is itself a temporary of this process (a staged `.part` of io/staging.hpp, which no reader
/// takes for an output and which is renamed into place only once every file is complete) is
/// written in place: it is the writer's temporary, created (or, with `overwrite`, truncated) at
/// construction, removed by the destructor if uncommitted, and commit() renames nothing
/// (in_place()). An existing
/// destination is refused (at construction and again, atomically, at commit) unless `overwrite`
/// is true. Every failing call (open, write, fsync, close, rename) is an error naming the
/// destination, the temporary and errno's text (a full disk: "No space left on device").
///
/// write_mode::direct: the temporary is written with O_DIRECT, every byte through an aligned
/// buffer of buffer_capacity bytes written whole at offsets that are multiples of it, the last
/// partial block buffered at commit(); a filesystem that refuses O_DIRECT (or a direct write
/// that fails with EINVAL) turns the writer to buffered writes, the bytes unchanged.
class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path destination, bool overwrite = false,
                              std::string_view context = "atomic_file_writer", durability d = durability::sync,
                              write_mode w = write_mode::buffered)
      : dest_(std::move(destination)), context_(context), overwrite_(overwrite), durability_(d) {
    struct ::stat st {};
    if (!overwrite_ && ::lstat(dest_.c_str(), &st) == 0)
      report_error(context_ + ": " + dest_.string() + ": destination exists (pass overwrite to replace it)");
    in_place_ = detail::own_temporary(dest_);  // a staged output: written in place, no temporaries of it
    if (!in_place_) detail::remove_stale_temporaries(dest_);
    temp_ = in_place_ ? dest_ : detail::unique_temp_path(dest_);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (in_place_ && overwrite_ ? O_TRUNC : O_EXCL), 0666);
    if (fd_ < 0)
      detail::report_errno(context_, dest_, "cannot create temporary file " + temp_.string(), errno);
    if (w == write_mode::direct) start_direct();
  }

  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  atomic_file_writer(atomic_file_writer&& o) noexcept
      : dest_(std::move(o.dest_)),
        temp_(std::move(o.temp_)),
        context_(std::move(o.context_)),
        buffer_(std::move(o.buffer_)),
        aligned_(std::move(o.aligned_)),
        aligned_size_(std::exchange(o.aligned_size_, 0)),
        direct_(std::exchange(o.direct_, false)),
        refused_(o.refused_),
        fd_(std::exchange(o.fd_, -1)),
        size_(o.size_),
        written_(o.written_),
        kicked_(o.kicked_),
        overwrite_(o.overwrite_),
        in_place_(o.in_place_),
        durability_(o.durability_),
        committed_(std::exchange(o.committed_, true)),
        observer_(std::move(o.observer_)) {}
  atomic_file_writer& operator=(atomic_file_writer&&) = delete;

  ~atomic_file_writer() {
    detail::close_fd(fd_);
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  }

  /// Appends `bytes` (buffered).
  void write(std::span<const std::byte> bytes) {
    RESHARD_EXPECTS(fd_ >= 0 && !committed_, "atomic_file_writer: write after commit or failure");
    if (direct_) return write_direct(bytes);
    if (buffer_.size() + bytes.size() > buffer_capacity) flush();
    if (bytes.size() >= buffer_capacity) {
      write_fd(bytes);
    } else {
      reserve_for(bytes.size());
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
    size_ += bytes.size();
  }
  void write(std::string_view bytes) { write(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))); }

  /// Bytes written so far.
  std::uint64_t size() const noexcept { return size_; }
  const std::filesystem::path& destination() const noexcept { return dest_; }
  const std::filesystem::path& temp_path() const noexcept { return temp_; }
  bool committed() const noexcept { return committed_; }
  /// The destination is a temporary of this process, written in place (temp_path() is it).
  bool in_place() const noexcept { return in_place_; }

  durability durability_mode() const noexcept { return durability_; }
  /// True while the file is written with O_DIRECT (write_mode::direct, and the filesystem took it).
  bool direct() const noexcept { return direct_; }
  /// True when a direct write was refused with EINVAL and the writer turned to buffered writes.
  bool direct_refused() const noexcept { return refused_; }

  /// Calls `f` with every byte written from now on, in order (for a digest of the file).
  void observe(std::function<void(std::span<const std::byte>)> f) { observer_ = std::move(f); }

  /// Flushes, fsyncs (durability::sync) and renames the temporary to the destination (refusing
  /// an existing one unless `overwrite`; in_place(): no rename). On failure the temporary is
  /// removed and reshard::error thrown.
  void commit() {
    RESHARD_EXPECTS(fd_ >= 0 && !committed_, "atomic_file_writer: commit twice or after failure");
    if (direct_) finish_direct();
    flush();
    if (durability_ == durability::deferred) detail::start_writeback(fd_, kicked_, written_);
    if (durability_ == durability::sync && ::fsync(fd_) != 0) fail("cannot fsync " + temp_.string(), errno);
    if (detail::close_fd(fd_) != 0) fail("cannot close " + temp_.string(), errno);
    if (!in_place_) rename_into_place();  // in place: the destination holds the bytes already
    committed_ = true;
    if (durability_ == durability::sync) detail::fsync_directory(dest_.parent_path());
  }

  /// The bytes buffered before a write(2) (appends this large or larger go straight through).
  static constexpr std::size_t buffer_capacity = std::size_t{1} << 20;
  /// The buffer's first size: it grows (doubling) up to buffer_capacity as the file does, so that
  /// a small file, written with one write(2) at commit, allocates what it needs: thousands of
  /// ranks' files of a few dozen KiB, each taking buffer_capacity, made the heap grow and shrink
  /// by megabytes per file (brk, and page faults on the fresh pages).
  static constexpr std::size_t initial_buffer = std::size_t{64} << 10;
  /// The bytes the buffer can hold now without growing (for tests).
  std::size_t buffer_reserved() const noexcept { return buffer_.capacity(); }

 private:
  // Write-back is started every this many bytes (not durability::none), so that the disk writes
  // while the process computes the next bytes and the final fsync has little left to wait for.
  static constexpr std::uint64_t writeback_bytes = std::uint64_t{8} << 20;

  // Room in buffer_ for `n` more bytes (n + buffer_.size() <= buffer_capacity): its capacity
  // doubled, from initial_buffer, up to buffer_capacity, not grown by every append.
  void reserve_for(std::size_t n) {
    const std::size_t need = buffer_.size() + n;
    if (need <= buffer_.capacity()) return;
    buffer_.reserve(std::min(buffer_capacity, std::max({need, 2 * buffer_.capacity(), initial_buffer})));
  }

  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  // The alignment of direct writes' memory, offsets and lengths: a page, which every Linux block
  // device's logical block size divides.
  static constexpr std::size_t direct_alignment = 4096;
  static_assert(buffer_capacity % direct_alignment == 0);

  // Sets or clears O_DIRECT on fd_; false when the filesystem refuses it.
  bool set_o_direct(bool on) noexcept {
    const int flags = ::fcntl(fd_, F_GETFL);
    return flags >= 0 && ::fcntl(fd_, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) == 0;
  }
  // O_DIRECT on the open temporary, and the aligned buffer; left buffered when either fails.
  void start_direct() noexcept {
    if (!set_o_direct(true)) return;
    aligned_.reset(static_cast<std::byte*>(std::aligned_alloc(direct_alignment, buffer_capacity)));
    if (!aligned_) {
      set_o_direct(false);
      return;
    }
    direct_ = true;
  }
  // Back to buffered writes for good: the bytes still in the aligned buffer move to buffer_, and
  // the aligned buffer is freed first when more writes follow (`more`), so that the writer never
  // holds both buffers at their full size.
  void stop_direct(bool more) {
    set_o_direct(false);
    direct_ = false;
    std::vector<std::byte> rest(aligned_.get(), aligned_.get() + aligned_size_);
    aligned_.reset();
    aligned_size_ = 0;
    if (more) rest.reserve(buffer_capacity);
    buffer_ = std::move(rest);
  }
  void write_direct(std::span<const std::byte> bytes) {
    size_ += bytes.size();
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), buffer_capacity - aligned_size_);
      std::memcpy(aligned_.get() + aligned_size_, bytes.data(), n);
      aligned_size_ += n;
      bytes = bytes.subspan(n);
      if (aligned_size_ == buffer_capacity) flush_direct(buffer_capacity);
      if (!direct_) {  // a direct write was refused: the rest goes the buffered way
        buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
        return;
      }
    }
  }
  // Writes the first `n` bytes of the aligned buffer (a multiple of direct_alignment) directly
  // and keeps the rest; on EINVAL (the filesystem or device refuses this write), stop_direct().
  void flush_direct(std::size_t n) {
    if (n == 0) return;
    if (!write_fd(std::span<const std::byte>(aligned_.get(), n), true)) {
      refused_ = true;
      stop_direct(true);
      return;
    }
    std::memmove(aligned_.get(), aligned_.get() + n, aligned_size_ - n);
    aligned_size_ -= n;
  }
  // commit(): the whole blocks directly, then the last partial block through buffer_.
  void finish_direct() {
    flush_direct(aligned_size_ / direct_alignment * direct_alignment);
    if (direct_) stop_direct(false);
  }

  // commit(): the temporary renamed to the destination (one unit of the crash hook).
  void rename_into_place() {
    detail::crash_point();
    if (overwrite_) {
      if (::rename(temp_.c_str(), dest_.c_str()) != 0) fail("cannot rename " + temp_.string(), errno);
    } else if (int err = detail::rename_no_replace(temp_, dest_); err != 0) {
      if (err == EEXIST) {
        discard();
        report_error(context_ + ": " + dest_.string() + ": destination exists (pass overwrite to replace it)");
      }
      fail("cannot rename " + temp_.string(), err);
    }
  }

  void discard() noexcept {
    detail::close_fd(fd_);
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  [[noreturn]] void fail(const std::string& what, int err) {
    discard();
    detail::report_errno(context_, dest_, what, err);
  }
  void flush() {
    write_fd(buffer_);
    buffer_.clear();
  }
  // write(2)s all of `bytes`. `direct`: they are a whole aligned block of the aligned buffer;
  // returns false, nothing written, when the direct write is refused with EINVAL (the caller
  // turns to buffered writes).
  bool write_fd(std::span<const std::byte> bytes, bool direct = false) {
    if (direct && detail::direct_write_refused()) return false;  // test-only (the top of this file)
    const std::size_t allowed = static_cast<std::size_t>(detail::crash_allowance(bytes.size()));
    const bool crash = allowed < bytes.size();
    if (crash) {
      if (direct) set_o_direct(false);  // a length that is not a whole block: written buffered before the kill
      bytes = bytes.first(allowed);
    }
    bool wrote = false;  // some of the bytes are in the file (and were given to the observer)
    while (!bytes.empty()) {
      const ::ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n >= 0 && !wrote) {
        wrote = true;
        if (observer_) observer_(bytes);  // all of them: the loop writes the rest or fails
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        if (direct && err == EINVAL && !wrote) return false;
        if (err == EFAULT)  // the bytes come from a mapping whose file shrank
          if (std::string why = detail::truncated_source(bytes.data()); !why.empty()) {
            discard();
            report_error(context_ + ": " + dest_.string() + ": cannot write: " + why);
          }
        fail("cannot write " + temp_.string(), err);
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      written_ += static_cast<std::uint64_t>(n);
      // a short direct write leaves the offset inside a block: the rest (and, as the next direct
      // write then fails with EINVAL, the file's rest) goes buffered
      if (direct && !bytes.empty()) set_o_direct(false);
    }
    if (crash) detail::crash_now();
    if (!direct && durability_ != durability::none && written_ - kicked_ >= writeback_bytes) {
      detail::start_writeback(fd_, kicked_, written_);
      kicked_ = written_;
    }
    return true;
  }

  std::filesystem::path dest_;
  std::filesystem::path temp_;
  std::string context_;
  std::vector<std::byte> buffer_;
  std::unique_ptr<std::byte, free_deleter> aligned_;  // write_mode::direct: the aligned buffer
  std::size_t aligned_size_ = 0;                      // bytes in it
  bool direct_ = false;                               // O_DIRECT on fd_
  bool refused_ = false;                              // a direct write was refused (EINVAL)
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t written_ = 0;  // bytes passed to write(2)
  std::uint64_t kicked_ = 0;   // bytes whose write-back was started
  bool overwrite_ = false;
  bool in_place_ = false;  // the destination is this process's temporary: written in place
  durability durability_ = durability::sync;
  bool committed_ = false;
  std::function<void(std::span<const std::byte>)> observer_;
};

}  // namespace reshard::io
