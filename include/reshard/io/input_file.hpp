// reshard/io/input_file.hpp: the one way reshard opens a file to read it, so that no input can
// hang the program: input_file opens with O_NONBLOCK (a FIFO without a writer does not block the
// open), checks with fstat on the descriptor that it is a regular file, and refuses anything else
// (a FIFO, a socket, a directory, a device such as /dev/zero) with an error naming the file and
// what it is ("strategy: s.ckpt: is a FIFO, not a regular file"). Also read_input_file (a whole
// file as text, for the JSON files) and pread_exact (a positioned read that names a file
// truncated while being read).
//
// POSIX only. Errors are reshard::error prefixed with the caller's context ("ckpt", "strategy",
// "--rename-map", ...), then the path.
#pragma once

#include <reshard/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

namespace detail {
[[noreturn]] inline void report_errno(std::string_view context, const std::filesystem::path& path,
                                      std::string_view what, int err) {
  report_error(std::string(context) + ": " + path.string() + ": " + std::string(what) + ": " +
               std::strerror(err));
}

inline int close_fd(int& fd) noexcept {
  int rc = 0;
  if (fd >= 0) rc = ::close(fd);
  fd = -1;
  return rc;
}

/// What a file of mode `mode` is, for messages: "a FIFO", "a socket", "a directory", ...
inline const char* file_type_name(::mode_t mode) noexcept {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

/// Why `path` is not a directory, for messages: "does not exist", "is a regular file, not a
/// directory", ...
inline std::string not_a_directory(const std::filesystem::path& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? std::string("does not exist")
                           : std::string("cannot be examined: ") + std::strerror(errno);
  return std::string("is ") + file_type_name(st.st_mode) + ", not a directory";
}

[[noreturn]] inline void report_not_regular(std::string_view context,
                                            const std::filesystem::path& path, ::mode_t mode) {
  report_error(std::string(context) + ": " + path.string() + ": is " + file_type_name(mode) +
               ", not a regular file");
}
}  // namespace detail

/// Reads exactly `out.size()` bytes at `offset` of the open file `fd` (`path` and `context` name
/// it in errors). A file that ends first was truncated while being read: "<context>: <path>: was
/// truncated while being read: expected N bytes at offset O, got M".
inline void pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset,
                        const std::filesystem::path& path, std::string_view context) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ::ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<::off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::report_errno(context, path, "cannot read", errno);
    }
    if (n == 0)
      report_error(std::string(context) + ": " + path.string() +
                   ": was truncated while being read: expected " + std::to_string(out.size()) +
                   " bytes at offset " + std::to_string(offset) + ", got " + std::to_string(done));
    done += static_cast<std::size_t>(n);
  }
}

/// A regular file open for reading. Opening never blocks, whatever the path names: the file is
/// opened with O_NONBLOCK (cleared once it is known to be a regular file) and refused, with an
/// error naming it and what it is, when it is a FIFO, a socket, a directory or a device.
/// Move-only; the descriptor is closed by the destructor unless release()d.
/// What fstat(2) said of a file when it was opened: its identity and modification time.
struct file_status {
  dev_t dev = 0;
  ino_t ino = 0;
  std::int64_t mtime_ns = 0;  ///< nanoseconds since the epoch
};

class input_file {
 public:
  /// Opens `path`; `context` prefixes error messages ("ckpt: /a/b.ckpt: cannot open for reading:
  /// ...").
  explicit input_file(std::filesystem::path path, std::string_view context = "input")
      : path_(std::move(path)), context_(context) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) {
      const int err = errno;
      // a socket cannot be opened at all (ENXIO): say what it is rather than errno's text
      struct ::stat st {};
      if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        detail::report_not_regular(context_, path_, st.st_mode);
      detail::report_errno(context_, path_, "cannot open for reading", err);
    }
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat", errno);
    if (!S_ISREG(st.st_mode)) {
      detail::close_fd(fd_);
      detail::report_not_regular(context_, path_, st.st_mode);
    }
    // One call, no F_GETFL first: F_SETFL sets only the status flags it can change (O_APPEND,
    // O_ASYNC, O_DIRECT, O_NOATIME, O_NONBLOCK), of which the open above set O_NONBLOCK alone.
    if (::fcntl(fd_, F_SETFL, 0) != 0) fail("cannot clear O_NONBLOCK", errno);
    size_ = static_cast<std::uint64_t>(st.st_size);
    status_ = {st.st_dev, st.st_ino,
               static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
  }

  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  input_file(input_file&& o) noexcept
      : path_(std::move(o.path_)),
        context_(std::move(o.context_)),
        fd_(std::exchange(o.fd_, -1)),
        size_(o.size_),
        status_(o.status_) {}
  input_file& operator=(input_file&&) = delete;
  ~input_file() { detail::close_fd(fd_); }

  int fd() const noexcept { return fd_; }
  /// The size fstat gave when the file was opened.
  std::uint64_t size() const noexcept { return size_; }
  /// The identity and modification time fstat gave when the file was opened.
  const file_status& status() const noexcept { return status_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  /// Gives up the descriptor: the caller closes it.
  int release() noexcept { return std::exchange(fd_, -1); }

  /// The whole file, read to its end.
  std::string read_all() const {
    std::string text;
    text.reserve(static_cast<std::size_t>(size_));
    char buf[65536];
    while (true) {
      const ::ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        detail::report_errno(context_, path_, "cannot read", errno);
      }
      if (n == 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    return text;
  }

  /// pread_exact on this file.
  void pread_exact(std::span<std::byte> out, std::uint64_t offset) const {
    io::pread_exact(fd_, out, offset, path_, context_);
  }

 private:
  [[noreturn]] void fail(std::string_view what, int err) {
    detail::close_fd(fd_);
    detail::report_errno(context_, path_, what, err);
  }

  std::filesystem::path path_;
  std::string context_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  file_status status_;
};

/// The whole of the regular file `path` (input_file: a FIFO, a socket, a directory or a device is
/// an error naming it); `context` prefixes errors.
inline std::string read_input_file(const std::filesystem::path& path, std::string_view context) {
  return input_file(path, context).read_all();
}

}  // namespace reshard::io
