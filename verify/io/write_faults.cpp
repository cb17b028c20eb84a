// Write faults below the writers of reshard/io: a file-size limit (EFBIG), a full disk (ENOSPC in
// a small tmpfs), a read-only file system (EROFS), and a process killed in the middle of a file
// (the test-only hook RESHARD_TEST_CRASH_AFTER, driven here through detail::crash_hook()). Every
// failure must be a reshard::error naming the destination and errno's text, and leave neither
// the destination nor a temporary; the temporaries of a killed process are removed by the next
// writer of the same destination, and nothing else is.
//
// The tmpfs tests run in a forked child that enters a private mount namespace (unshare); where
// that is not allowed they are skipped, saying so. RLIMIT_FSIZE needs nothing and always runs.
#include <reshard/io/ckpt.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/safetensors.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace reshard::io;
using namespace reshard_test;

namespace {

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  return v;
}

// The writers under test, each writing `bytes` of tensor data to `path`.
struct writer_case {
  const char* name;
  std::function<void(const fs::path&, std::size_t)> write;
};

const std::vector<writer_case>& writers() {
  static const std::vector<writer_case> all{
      {"atomic_file_writer",
       [](const fs::path& p, std::size_t bytes) {
         atomic_file_writer w(p, false, "test");
         const auto data = pattern(bytes);
         for (std::size_t at = 0; at < bytes; at += 100000)
           w.write(std::span<const std::byte>(data).subspan(at, std::min<std::size_t>(100000, bytes - at)));
         w.commit();
       }},
      {"ckpt_writer",
       [](const fs::path& p, std::size_t bytes) {
         ckpt_writer w(p, {.crc = true});
         const std::vector<std::int64_t> dims{static_cast<std::int64_t>(bytes / 4)};
         w.write("w", dtype::float32, dims, pattern(bytes / 4 * 4));
         w.commit();
       }},
      {"safetensors_writer",
       [](const fs::path& p, std::size_t bytes) {
         safetensors_writer w(p, {{"w", dtype::uint8, {static_cast<std::int64_t>(bytes)}}});
         w.append(pattern(bytes));
         w.commit();
       }},
  };
  return all;
}

// Restores RLIMIT_FSIZE and SIGXFSZ's action when the test ends.
class fsize_limit_guard {
 public:
  explicit fsize_limit_guard(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_ = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process: EFBIG is what we test
    struct ::rlimit l = saved_;
    l.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &l) == 0;
  }
  ~fsize_limit_guard() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_);
  }
  bool ok() const { return ok_; }

 private:
  struct ::rlimit saved_ {};
  void (*old_)(int) = SIG_DFL;
  bool ok_ = false;
};

// What a forked child reported: its wait status and the text it wrote.
struct child_result {
  int status = 0;
  std::string text;
  bool exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

constexpr int skip_code = 77;

// Runs `body` in a forked child; what it returns is sent back as text; it ends with exit code 0
// (or skip_code if body returns "SKIP: ..."), or dies.
child_result in_child(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, "pipe failed"};
  const ::pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string text;
    try {
      text = body();
    } catch (const std::exception& e) {
      text = std::string("unexpected exception: ") + e.what();
    }
    const char* p = text.data();
    for (std::size_t left = text.size(); left > 0;) {
      const ::ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(text.rfind("SKIP: ", 0) == 0 ? skip_code : 0);
  }
  ::close(fds[1]);
  child_result r;
  char buf[4096];
  for (::ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.text.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

// In the child: a private mount namespace with a tmpfs mounted on `dir`.
std::string mount_tmpfs(const fs::path& dir, const char* options, unsigned long flags = 0) {
  if (::unshare(CLONE_NEWNS) != 0) return std::string("SKIP: unshare(CLONE_NEWNS): ") + std::strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("SKIP: making / private: ") + std::strerror(errno);
  if (::mount("reshard-test", dir.c_str(), "tmpfs", flags, options) != 0)
    return std::string("SKIP: mount tmpfs: ") + std::strerror(errno);
  return {};
}

std::string listing(const fs::path& dir) {
  std::string out;
  for (const auto& e : fs::directory_iterator(dir)) out += e.path().filename().string() + " ";
  return out;
}

// In a child, with a tmpfs (`options`, `flags`) mounted on dest's directory: what
// wc.write(dest, bytes) threw ("did not throw" if nothing), then "\nleft: " and the files the
// mount holds afterwards.
child_result write_in_tmpfs(const writer_case& wc, const fs::path& dest, const char* options,
                            unsigned long flags, std::size_t bytes) {
  return in_child([&]() -> std::string {
    if (auto why = mount_tmpfs(dest.parent_path(), options, flags); !why.empty()) return why;
    std::string msg = "did not throw";
    try {
      wc.write(dest, bytes);
    } catch (const reshard::error& e) {
      msg = e.what();
    }
    return msg + "\nleft: " + listing(dest.parent_path());
  });
}

// A pid that no process has: a child's, after it was reaped.
::pid_t dead_pid() {
  const ::pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

// -- EFBIG

TEST(file_size_limit, every_writer_reports_efbig_and_leaves_nothing) {
  for (const auto& wc : writers()) {
    SCOPED_TRACE(wc.name);
    temp_dir dir;
    const fs::path dest = dir / "out.bin";
    {
      fsize_limit_guard limit(64 * 1024);
      ASSERT_TRUE(limit.ok());
      EXPECT_TRUE(throws_error([&] { wc.write(dest, 3 << 20); }, {dest.string(), "cannot write", "File too large"}));
    }
    EXPECT_EQ(dir.files(), std::vector<std::string>{}) << "no destination, no temporary";
    wc.write(dest, 3 << 20);  // without the limit the same write works
    EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
  }
}

// -- ENOSPC, EROFS

TEST(full_disk, every_writer_reports_enospc_and_leaves_nothing) {
  for (const auto& wc : writers()) {
    SCOPED_TRACE(wc.name);
    temp_dir dir;
    fs::create_directories(dir / "mnt");
    const fs::path dest = dir / "mnt" / "out.bin";
    const auto r = write_in_tmpfs(wc, dest, "size=256k", 0, 3 << 20);
    if (r.exited(skip_code)) GTEST_SKIP() << "SKIPPED (no mount namespace here): " << r.text;
    ASSERT_TRUE(r.exited(0)) << r.text;
    EXPECT_NE(r.text.find(dest.string()), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("cannot write"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("No space left on device"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("\nleft: "), std::string::npos) << r.text;
    EXPECT_EQ(r.text.substr(r.text.find("\nleft: ")), "\nleft: ") << "no destination, no temporary";
  }
}

TEST(read_only, every_writer_reports_erofs_and_leaves_nothing) {
  for (const auto& wc : writers()) {
    SCOPED_TRACE(wc.name);
    temp_dir dir;
    fs::create_directories(dir / "mnt");
    const fs::path dest = dir / "mnt" / "out.bin";
    const auto r = write_in_tmpfs(wc, dest, "size=256k", MS_RDONLY, 1000);
    if (r.exited(skip_code)) GTEST_SKIP() << "SKIPPED (no mount namespace here): " << r.text;
    ASSERT_TRUE(r.exited(0)) << r.text;
    EXPECT_NE(r.text.find(dest.string() + ": cannot create temporary file"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("Read-only file system\nleft: "), std::string::npos) << r.text;
    EXPECT_EQ(r.text.substr(r.text.find("\nleft: ")), "\nleft: ");
  }
}

// -- killed in the middle: the crash hook, and the cleanup of what a killed writer left

TEST(atomic_file_writer, temporaries_are_named_after_the_destination_and_the_process) {
  temp_dir dir;
  atomic_file_writer w(dir / "checkpoint_0.ckpt");
  const std::string name = w.temp_path().filename().string();
  const std::string prefix = "checkpoint_0.ckpt.reshard-" + std::to_string(::getpid()) + ".";
  EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  EXPECT_TRUE(name.ends_with(".tmp")) << name;  // never .ckpt or .safetensors: no reader takes it
}

TEST(crash_injection, the_process_dies_after_exactly_n_bytes_and_the_next_writer_cleans_up) {
  const std::size_t total = 3 << 20;
  for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000003}, std::uint64_t{total - 1},
                          std::uint64_t{total} /* every byte: dies before the rename */}) {
    SCOPED_TRACE(n);
    temp_dir dir;
    const fs::path dest = dir / "out.bin";
    const auto r = in_child([&]() -> std::string {
      detail::crash_hook().used = 0;
      detail::crash_hook().limit = n;
      writers()[0].write(dest, total);
      return "not killed";
    });
    ASSERT_TRUE(r.killed_by(SIGKILL)) << "status " << r.status << ": " << r.text;
    const auto files = dir.files();
    ASSERT_EQ(files.size(), 1u) << "only the temporary";
    EXPECT_EQ(files[0].rfind("out.bin.reshard-", 0), 0u) << files[0];
    EXPECT_TRUE(files[0].ends_with(".tmp")) << files[0];
    const auto bytes = read_bytes(dir / files[0]);
    ASSERT_EQ(bytes.size(), n) << "the first n bytes, no more";
    const auto want = pattern(total);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), want.begin()));
    // the next writer of the destination removes the dead process's temporary
    writers()[0].write(dest, 1000);
    EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
  }
  // n = every byte and the rename: the write completes
  temp_dir dir;
  const auto r = in_child([&]() -> std::string {
    detail::crash_hook().used = 0;
    detail::crash_hook().limit = total + 1;
    writers()[0].write(dir / "out.bin", total);
    return "done";
  });
  EXPECT_TRUE(r.exited(0) && r.text == "done") << "status " << r.status << ": " << r.text;
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
  EXPECT_EQ(fs::file_size(dir / "out.bin"), total);
}

TEST(stale_temporaries, only_the_temporaries_of_dead_processes_for_the_destination_go) {
  temp_dir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  const std::vector<std::string> stale{
      "x.ckpt.reshard-" + dead + ".0.tmp",
      "x.ckpt.reshard-" + dead + ".part",
      "x.ckpt.reshard-" + dead + ".part.reshard-" + dead + ".3.tmp",
  };
  const std::vector<std::string> kept{
      "x.ckpt",
      "x.ckpt.tmp",
      "x.ckpt.bak",
      "x.ckpt.reshard-" + self + ".0.tmp",                        // a running process: this one
      "x.ckpt.reshard-" + std::to_string(::getppid()) + ".part",  // and its parent
      "x.ckpt.reshard-" + dead,                                   // not the pattern: no suffix
      "x.ckpt.reshard-" + dead + ".",                             // nor an empty one
      "x.ckpt.reshard-abc.0.tmp",                                 // no pid
      "x.ckpt.reshard--1.0.tmp",
      "y.ckpt.reshard-" + dead + ".0.tmp",   // another destination
      "xx.ckpt.reshard-" + dead + ".0.tmp",  // another destination
  };
  for (const auto& f : stale) write_text(dir / f, "stale");
  for (const auto& f : kept) write_text(dir / f, "keep");
  fs::create_directory(dir / ("x.ckpt.reshard-" + dead + ".d.tmp"));  // not a regular file
  fs::create_symlink(dir / "x.ckpt", dir / ("x.ckpt.reshard-" + dead + ".l.tmp"));
  EXPECT_EQ(detail::remove_stale_temporaries(dir / "x.ckpt"), stale.size());
  auto want = kept;
  want.push_back("x.ckpt.reshard-" + dead + ".d.tmp");
  want.push_back("x.ckpt.reshard-" + dead + ".l.tmp");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dir.files(), want);
  EXPECT_EQ(detail::remove_stale_temporaries(dir / "x.ckpt"), 0u);
  EXPECT_EQ(detail::remove_stale_temporaries(dir / "missing" / "x.ckpt"), 0u);  // no directory: nothing
}

// A Hugging Face checkpoint directory D is swapped in from `D.reshard-<pid>.<n>.swap` beside it
// (io/staging.hpp): a killed run's swap directory goes with everything in it; one of a running
// process stays, and so do directories of other names.
TEST(stale_temporaries, the_swap_directories_of_dead_processes_go_with_their_contents) {
  temp_dir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  const fs::path stale = dir / ("hf.reshard-" + dead + ".3.swap");
  fs::create_directories(stale / "sub");
  write_text(stale / "model.safetensors", "old");
  write_text(stale / "sub" / "notes.txt", "old");
  fs::create_directories(dir / ("hf.reshard-" + dead + ".swap") /
                         "x");  // <pid>.<anything>, as for files
  const std::vector<std::string> kept{
      "hf.reshard-" + self + ".1.swap", "hf.reshard-" + dead + ".2.part",
      "hf.reshard-" + dead + ".2.swapx", "hg.reshard-" + dead + ".1.swap"};
  for (const auto& d : kept) fs::create_directories(dir / d / "x");
  EXPECT_EQ(detail::remove_stale_temporaries(dir / "hf"), 2u);
  auto want = kept;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dir.files(), want);
  EXPECT_TRUE(detail::is_temporary_name("hf.reshard-" + dead + ".3.swap"));
  EXPECT_TRUE(detail::is_temporary_name("a.b.reshard-1.2.part.reshard-1.3.tmp"));
  for (const char* name :
       {"config.json", "x.reshard-", "x.reshard-12", "x.reshard-12.", "x.reshard-a.1.part", ""})
    EXPECT_FALSE(detail::is_temporary_name(name)) << name;
}

// One scan of a directory for several destinations removes what a scan per destination would,
// including the temporaries of a destination that is itself a temporary (a staged output's).
TEST(stale_temporaries, one_scan_for_several_destinations_removes_what_one_scan_each_would) {
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  const std::string part = "c.ckpt.reshard-" + self + ".4.part";  // a staged output of this process
  const std::vector<std::string> names{
      "a.ckpt", "a.ckpt.reshard-" + dead + ".0.tmp", "a.ckpt.reshard-" + self + ".1.tmp",
      "b.ckpt.reshard-" + dead + ".7.part", "b.ckpt.reshard-" + dead + ".7.part.reshard-" + dead + ".2.tmp",
      part, part + ".reshard-" + dead + ".9.tmp", part + ".reshard-" + self + ".9.tmp",
      "ab.ckpt.reshard-" + dead + ".0.tmp", "a.ckpt.reshard-x.0.tmp", "other.reshard-" + dead + ".1.tmp"};
  const std::vector<std::vector<std::string>> destination_sets{
      {"a.ckpt"}, {"a.ckpt", "b.ckpt"}, {"b.ckpt", part}, {"c.ckpt", part}, {"a.ckpt", "b.ckpt", part, "ab.ckpt", "zz"}, {}};
  for (const auto& dests : destination_sets) {
    temp_dir one, each;
    for (const auto& n : names) write_text(one / n, "x"), write_text(each / n, "x");
    std::size_t removed_each = 0;
    for (const auto& d : dests) removed_each += detail::remove_stale_temporaries(each / d);
    EXPECT_EQ(detail::remove_stale_temporaries(one.path(), dests), removed_each);
    EXPECT_EQ(one.files(), each.files());
  }
  temp_dir dir;  // the counts, once
  for (const auto& n : names) write_text(dir / n, "x");
  const std::vector<std::string> all{"a.ckpt", "b.ckpt", part};
  EXPECT_EQ(detail::remove_stale_temporaries(dir.path(), all), 4u);
  EXPECT_EQ(dir.files().size(), names.size() - 4);
}

// A staged output's name is a temporary of this process: its writer scans for no stale
// temporaries (nothing dead can have left any under a name holding this pid); any other
// destination is scanned.
TEST(stale_temporaries, a_destination_named_for_this_process_is_its_own) {
  const std::string self = std::to_string(::getpid());
  EXPECT_TRUE(detail::own_temporary(fs::path("d") / ("x.ckpt.reshard-" + self + ".3.part")));
  EXPECT_FALSE(detail::own_temporary(fs::path("d") / ("x.ckpt.reshard-" + std::to_string(dead_pid()) + ".3.part")));
  EXPECT_FALSE(detail::own_temporary(fs::path("d") / "x.ckpt"));
  EXPECT_FALSE(detail::own_temporary(fs::path("x.reshard-" + self + ".3.part") / "x.ckpt"));  // the directory's
  EXPECT_EQ(detail::own_pid(), ::getpid());
  const auto r = in_child([&]() -> std::string {  // a forked child asks again
    return std::to_string(detail::own_pid()) + " " + std::to_string(::getpid());
  });
  ASSERT_TRUE(r.exited(0)) << r.status;
  const auto space = r.text.find(' ');
  ASSERT_NE(space, std::string::npos) << r.text;
  EXPECT_EQ(r.text.substr(0, space), r.text.substr(space + 1));
  EXPECT_NE(r.text.substr(0, space), self);
}

TEST(stale_temporaries, a_writer_removes_them_when_it_starts) {
  temp_dir dir;
  const std::string dead = std::to_string(dead_pid());
  write_text(dir / ("out.ckpt.reshard-" + dead + ".0.tmp"), "stale");
  write_text(dir / ("out.safetensors.reshard-" + dead + ".0.tmp"), "stale");
  {
    ckpt_writer w(dir / "out.ckpt");
    const auto files = dir.files();  // the stale one is gone; this writer's own temporary is there
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].find("out.ckpt.reshard-" + std::to_string(::getpid()) + "."), 0u) << files[0];
    EXPECT_EQ(files[1], "out.safetensors.reshard-" + dead + ".0.tmp") << "another destination's: kept";
  }
}
