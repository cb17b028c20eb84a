// Shared helpers of the verify/io tests: temporary directories, byte files, hex, the Python
// cross-check runner and an assertion on reshard::error messages.
#pragma once

#include <gtest/gtest.h>
#include <reshard/error.hpp>

#include "../testing.hpp"  // error_of

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace reshard_test {

namespace fs = std::filesystem;

/// Where temporary directories go: /dev/shm when usable (the writers fsync every file, which is
/// free on tmpfs and slow on a disk), else the system temporary directory.
inline fs::path temp_root() {
  static const fs::path root = [] {
    std::error_code ec;
    if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK | X_OK) == 0) return fs::path("/dev/shm");
    return fs::temp_directory_path();
  }();
  return root;
}

/// A fresh directory under temp_root(), removed with its content.
class temp_dir {
 public:
  temp_dir() : temp_dir(temp_root()) {}
  /// Under `root` (fs::temp_directory_path(): a disk where /dev/shm is the default root).
  explicit temp_dir(const fs::path& root) {
    static std::atomic<int> counter{0};
    path_ = root / ("reshard_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(std::string_view name) const { return path_ / std::string(name); }
  /// The names of the files in the directory, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

// Every path under `root` (relative, sorted): what a run that must write nothing leaves alone.
inline std::vector<std::string> list_tree(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    out.push_back(
        e.path().lexically_relative(root).string());  // (fs::relative would follow a symlink)
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

inline void write_bytes(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
inline void write_text(const fs::path& path, std::string_view text) {
  write_bytes(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

inline std::vector<std::byte> from_hex(std::string_view hex) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<std::byte>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  return out;
}

inline std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (auto b : bytes) {
    s += digits[std::to_integer<int>(b) >> 4];
    s += digits[std::to_integer<int>(b) & 15];
  }
  return s;
}

struct py_result {
  int status = -1;  ///< exit status; -1 when the script could not be run
  std::string output;
};

inline std::string shell_quote(std::string_view s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs verify/python/<script> <args...> with $RESHARD_TEST_PY from $RESHARD_SOURCE_DIR,
/// capturing stdout and stderr. A missing environment variable is a test failure.
inline py_result run_python(std::string_view script, const std::vector<std::string>& args) {
  const char* py = std::getenv("RESHARD_TEST_PY");
  const char* src = std::getenv("RESHARD_SOURCE_DIR");
  if (!py || !*py) {
    ADD_FAILURE() << "RESHARD_TEST_PY is not set: the test runner must set it to a Python with protobuf and numpy "
                     "(/usr/bin/python3)";
    return {};
  }
  if (!src || !*src) {
    ADD_FAILURE() << "RESHARD_SOURCE_DIR is not set: the test runner must set it to the repository root";
    return {};
  }
  std::string cmd = shell_quote(py) + " " + shell_quote((fs::path(src) / "verify" / "python" / script).string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>&1";
  py_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return r;
  }
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Passes when fn() throws reshard::error whose message contains every one of `parts`.
template <class F>
::testing::AssertionResult throws_error(F&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
  } catch (const reshard::error& e) {
    const std::string msg = e.what();
    for (auto p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace reshard_test
