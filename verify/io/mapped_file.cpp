// Tests of reshard/io/mapped_file.hpp and reshard/io/input_file.hpp: opening an input without
// blocking (FIFOs, sockets, directories, devices refused), the read-only mapping, the descriptors
// kept for reads, the atomic output file, and the staged outputs it writes (io/staging.hpp).
#include <reshard/io/input_file.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/mapped_file.hpp>
#include <reshard/io/staging.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace reshard::io;
using namespace reshard_test;

TEST(mapped_file, maps_the_whole_file) {
  temp_dir dir;
  const std::string text = "hello, mapping";
  write_text(dir / "a.bin", text);
  mapped_file f(dir / "a.bin");
  EXPECT_EQ(f.size(), text.size());
  ASSERT_EQ(f.bytes().size(), text.size());
  EXPECT_EQ(std::memcmp(f.bytes().data(), text.data(), text.size()), 0);
  EXPECT_EQ(f.path(), dir / "a.bin");
}

TEST(mapped_file, empty_file_is_an_empty_span) {
  temp_dir dir;
  write_text(dir / "empty", "");
  mapped_file f(dir / "empty");
  EXPECT_EQ(f.size(), 0u);
  EXPECT_TRUE(f.bytes().empty());
}

TEST(mapped_file, moves_keep_the_bytes_in_place) {
  temp_dir dir;
  write_text(dir / "a", "abcdef");
  mapped_file f(dir / "a");
  const std::byte* p = f.bytes().data();
  mapped_file g(std::move(f));
  EXPECT_EQ(g.bytes().data(), p);
  EXPECT_TRUE(f.bytes().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  mapped_file h;
  h = std::move(g);
  EXPECT_EQ(h.bytes().data(), p);
  EXPECT_EQ(h.size(), 6u);
}

// status(): what fstat said of the file that was opened (its identity and modification time),
// kept through moves, and still that file's after another is renamed over the path.
TEST(mapped_file, status_is_the_opened_files_identity_and_mtime) {
  temp_dir dir;
  write_text(dir / "a", "abcdef");
  struct ::stat st {};
  ASSERT_EQ(::stat((dir / "a").c_str(), &st), 0);
  mapped_file f(dir / "a");
  EXPECT_EQ(f.status().dev, st.st_dev);
  EXPECT_EQ(f.status().ino, st.st_ino);
  EXPECT_EQ(f.status().mtime_ns, static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
  const input_file in(dir / "a");
  EXPECT_EQ(in.status().ino, st.st_ino);
  write_text(dir / "b", "other");
  fs::rename(dir / "b", dir / "a");  // the path now names another file
  const mapped_file g(std::move(f));
  EXPECT_EQ(g.status().ino, st.st_ino);
  EXPECT_EQ(g.status().dev, st.st_dev);
  mapped_file h;
  EXPECT_EQ(h.status().ino, 0u);
  h = mapped_file(dir / "a");
  EXPECT_NE(h.status().ino, st.st_ino);
}

TEST(mapped_file, errors_name_the_path_and_errno_text) {
  temp_dir dir;
  const auto missing = (dir / "missing.ckpt").string();
  EXPECT_TRUE(throws_error([&] { mapped_file f(missing, "ckpt"); },
                           {"ckpt: ", missing, "cannot open for reading", "No such file or directory"}));
  EXPECT_TRUE(throws_error([&] { mapped_file f(dir.path()); }, {dir.path().string(), "not a regular file"}));
}

namespace {
// A Unix socket bound at `path` (closed with the test; the file stays until the directory goes).
struct bound_socket {
  int fd = -1;
  explicit bound_socket(const fs::path& path) {
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ::sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (fd < 0 || ::bind(fd, reinterpret_cast<const ::sockaddr*>(&a), sizeof a) != 0)
      ADD_FAILURE() << "bind " << path;
  }
  ~bound_socket() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

namespace {
// The descriptors this process holds open (/proc/self/fd, less the one listing it).
std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;
}
}  // namespace

// Files read in any order through read_descriptors sharing a budget of `capacity`: every read
// returns the file's bytes, the budget never keeps more than its capacity open (counted in
// /proc/self/fd too), a file whose descriptor was closed is opened again, and one mapped with
// `keep` is read through the descriptor it was mapped from (no opening: the count of open
// descriptors does not grow for it while the budget has room).
RC_GTEST_PROP(read_descriptor, reads_every_file_right_within_its_budget, ()) {
  const auto files = *rc::gen::inRange<std::size_t>(1, 12);
  const auto capacity = *rc::gen::inRange<std::size_t>(1, 6);
  const auto order = *rc::gen::container<std::vector<std::size_t>>(rc::gen::inRange<std::size_t>(0, files));
  const auto closes = *rc::gen::container<std::vector<bool>>(order.size(), rc::gen::weightedElement<bool>({{1, true}, {5, false}}));
  temp_dir dir;
  std::vector<std::string> text(files);
  for (std::size_t i = 0; i < files; ++i) {
    text[i] = "file " + std::to_string(i) + ": " + std::string(100 + 37 * i, static_cast<char>('a' + i));
    write_text(dir / std::to_string(i), text[i]);
  }
  const std::size_t before = open_descriptors();
  descriptor_budget budget(capacity);
  std::vector<std::unique_ptr<read_descriptor>> rd;
  std::vector<mapped_file> maps;
  for (std::size_t i = 0; i < files; ++i) {
    rd.push_back(std::make_unique<read_descriptor>(budget));
    if (i % 2 == 0) {  // every other file mapped first, its descriptor kept for the reads
      maps.emplace_back(dir / std::to_string(i), "test", nullptr, 0, rd.back().get());
      RC_ASSERT(budget.kept() == std::min(i / 2 + 1, capacity));
    }
    RC_ASSERT(budget.kept() <= capacity);
  }
  RC_ASSERT(open_descriptors() - before == budget.kept());
  if (files > 0 && capacity >= (files + 1) / 2) {  // room for every mapped file's descriptor: all still open
    for (std::size_t i = 0; i < files; i += 2) RC_ASSERT(rd[i]->is_open());
  }
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    const std::size_t at = k % 7, n = text[i].size() - at - k % 5;
    std::vector<std::byte> out(n);
    const bool was_open = rd[i]->is_open();
    const std::size_t open_before = open_descriptors();
    rd[i]->pread(out, at, dir / std::to_string(i), "test");
    RC_ASSERT(std::string(reinterpret_cast<const char*>(out.data()), n) == text[i].substr(at, n));
    RC_ASSERT(rd[i]->is_open());
    RC_ASSERT(budget.kept() <= capacity);
    RC_ASSERT(open_descriptors() - before == budget.kept());
    if (was_open) RC_ASSERT(open_descriptors() == open_before);  // read through the kept descriptor
    if (closes[k]) {
      rd[i]->close();
      RC_ASSERT(!rd[i]->is_open());
    }
  }
  rd.clear();
  RC_ASSERT(budget.kept() == 0u);
  RC_ASSERT(open_descriptors() == before);
}

// Two threads reading files through one budget smaller than the files: every byte right, the
// budget closes only idle descriptors (a read in flight keeps its own).
TEST(read_descriptor, threads_share_a_budget_smaller_than_the_files) {
  temp_dir dir;
  constexpr std::size_t files = 8;
  std::vector<std::string> text(files);
  for (std::size_t i = 0; i < files; ++i) {
    text[i] = std::string(4096 + i, static_cast<char>('A' + i));
    write_text(dir / std::to_string(i), text[i]);
  }
  descriptor_budget budget(2);
  std::vector<std::unique_ptr<read_descriptor>> rd;
  for (std::size_t i = 0; i < files; ++i) rd.push_back(std::make_unique<read_descriptor>(budget));
  std::atomic<int> wrong{0};
  auto reader = [&](std::size_t seed) {
    std::vector<std::byte> out(64);
    for (std::size_t k = 0; k < 3000; ++k) {
      const std::size_t i = (k * 5 + seed) % files;
      rd[i]->pread(out, (k * 13) % 4000, dir / std::to_string(i), "test");
      for (auto b : out)
        if (b != static_cast<std::byte>('A' + i)) ++wrong;
    }
  };
  std::thread a(reader, 0), b(reader, 3);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(budget.kept(), 2u + 2u);  // the capacity, and at most one in use per thread beyond it
  EXPECT_GE(descriptor_budget::default_capacity(), 1u);
}

// Over its capacity, a budget closes an idle descriptor not read since it was opened or last
// passed: one read since (marked by the read itself, which takes no lock of the budget's) gets a
// second chance, so the budget keeps the descriptors in use over those opened and left.
TEST(read_descriptor, a_budget_keeps_a_descriptor_read_lately_over_one_left) {
  temp_dir dir;
  for (const char* name : {"a", "b", "c", "d"}) write_text(dir / name, std::string(300, name[0]));
  descriptor_budget budget(2);
  read_descriptor a(budget), b(budget), c(budget), d(budget);
  std::vector<std::byte> out(10);
  a.pread(out, 5, dir / "a", "test");
  b.pread(out, 5, dir / "b", "test");
  a.pread(out, 7, dir / "a", "test");  // a read again since it was opened, b not
  c.pread(out, 0, dir / "c", "test");  // over the capacity: b closed
  EXPECT_TRUE(a.is_open());
  EXPECT_FALSE(b.is_open());
  EXPECT_TRUE(c.is_open());
  EXPECT_EQ(budget.kept(), 2u);
  a.pread(out, 3, dir / "a", "test");  // a read again (its mark was cleared as it was passed), c not
  d.pread(out, 0, dir / "d", "test");  // c closed
  EXPECT_TRUE(a.is_open());
  EXPECT_FALSE(c.is_open());
  EXPECT_TRUE(d.is_open());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), std::string(10, 'd'));
  b.pread(out, 1, dir / "b", "test");  // reopened
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), std::string(10, 'b'));
  EXPECT_EQ(budget.kept(), 2u);
}

TEST(input_file, reads_a_regular_file) {
  temp_dir dir;
  write_text(dir / "a.json", "{\"a\": 1}");
  input_file f(dir / "a.json", "strategy");
  EXPECT_EQ(f.size(), 8u);
  EXPECT_GE(f.fd(), 0);
  EXPECT_EQ(::fcntl(f.fd(), F_GETFL) & O_NONBLOCK, 0);  // cleared once known regular
  // by one F_SETFL that leaves it open for reading, nothing else set (no F_GETFL first)
  EXPECT_EQ(::fcntl(f.fd(), F_GETFL) & (O_ACCMODE | O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME | O_NONBLOCK), O_RDONLY);
  EXPECT_NE(::fcntl(f.fd(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(f.read_all(), "{\"a\": 1}");
  EXPECT_EQ(read_input_file(dir / "a.json", "x"), "{\"a\": 1}");
  write_text(dir / "empty", "");
  EXPECT_EQ(read_input_file(dir / "empty", "x"), "");
}

// Each kind of file that is not a regular file is refused at once (a FIFO without a writer
// blocked open(2) forever), naming the file and what it is; so is every reader built on it.
TEST(input_file, refuses_fifos_sockets_directories_and_devices) {
  temp_dir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const bound_socket sock(dir / "sock");
  fs::create_directory(dir / "d");
  const std::pair<fs::path, const char*> cases[] = {
      {dir / "fifo", "is a FIFO, not a regular file"},
      {dir / "sock", "is a socket, not a regular file"},
      {dir / "d", "is a directory, not a regular file"},
      {"/dev/zero", "is a character device, not a regular file"}};
  for (const auto& [path, what] : cases) {
    SCOPED_TRACE(path.string());
    EXPECT_TRUE(
        throws_error([&] { input_file f(path, "strategy"); }, {"strategy: ", path.string(), what}));
    EXPECT_TRUE(throws_error([&] { read_input_file(path, "--rename-map"); },
                             {"--rename-map: ", path.string(), what}));
    EXPECT_TRUE(
        throws_error([&] { mapped_file f(path, "ckpt"); }, {"ckpt: ", path.string(), what}));
  }
  EXPECT_TRUE(throws_error(
      [&] { input_file f(dir / "missing", "x"); },
      {"x: ", (dir / "missing").string(), "cannot open for reading: No such file or directory"}));
}

TEST(input_file, not_a_directory_says_what_the_path_is) {
  temp_dir dir;
  write_text(dir / "f", "x");
  EXPECT_EQ(reshard::io::detail::not_a_directory(dir / "f"), "is a regular file, not a directory");
  EXPECT_EQ(reshard::io::detail::not_a_directory(dir / "missing"), "does not exist");
  EXPECT_EQ(reshard::io::detail::not_a_directory("/dev/zero"),
            "is a character device, not a directory");
}

// A file that shrinks while it is read: the short read names the file, the offset and the counts.
TEST(input_file, pread_exact_names_a_file_truncated_while_being_read) {
  temp_dir dir;
  write_text(dir / "a", std::string(100, 'x'));
  input_file f(dir / "a", "checkpoint");
  std::vector<std::byte> buf(40);
  f.pread_exact(buf, 60);
  EXPECT_EQ(buf[39], std::byte{'x'});
  fs::resize_file(dir / "a", 70);
  EXPECT_TRUE(
      throws_error([&] { f.pread_exact(buf, 50); },
                   {"checkpoint: ", (dir / "a").string(),
                    "was truncated while being read: expected 40 bytes at offset 50, got 20"}));
}

// write(2) out of a mapping whose file shrank fails with EFAULT ("Bad address"); the writer
// names the source file instead, and leaves no temporary.
TEST(mapped_file, a_source_truncated_under_its_mapping_is_named_when_written) {
  temp_dir dir;
  write_text(dir / "src.ckpt", std::string(std::size_t{4} << 20, 'x'));
  const mapped_file src(dir / "src.ckpt", "ckpt");
  fs::resize_file(dir / "src.ckpt", 0);
  EXPECT_TRUE(throws_error(
      [&] {
        atomic_file_writer w(dir / "out.ckpt");
        w.write(
            src.bytes());  // larger than the writer's buffer: straight from the mapping to write(2)
        w.commit();
      },
      {(dir / "out.ckpt").string(), "the source " + (dir / "src.ckpt").string(),
       "was truncated while being read: its bytes from offset 0 are gone"}));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"src.ckpt"});
}

TEST(atomic_file_writer, commit_publishes_all_bytes) {
  temp_dir dir;
  {
    atomic_file_writer w(dir / "out.bin");
    EXPECT_EQ(w.temp_path().parent_path(), dir.path());  // same directory: rename is atomic
    EXPECT_NE(w.temp_path(), w.destination());
    EXPECT_FALSE(fs::exists(dir / "out.bin"));
    w.write(std::string_view("abc"));
    std::vector<std::byte> big(3u << 20, std::byte{0x5a});  // larger than the internal buffer
    w.write(big);
    w.write(std::string_view("xyz"));
    EXPECT_EQ(w.size(), 6u + big.size());
    EXPECT_FALSE(fs::exists(dir / "out.bin"));  // nothing visible before commit
    w.commit();
    EXPECT_TRUE(w.committed());
  }
  const auto bytes = read_bytes(dir / "out.bin");
  ASSERT_EQ(bytes.size(), 6u + (3u << 20));
  EXPECT_EQ(to_hex(std::span(bytes).first(3)), "616263");
  EXPECT_EQ(bytes[3 + 12345], std::byte{0x5a});
  EXPECT_EQ(to_hex(std::span(bytes).last(3)), "78797a");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});  // no temporary left
}

// Writes of any sizes (around the 1 MiB buffer), under every durability mode and both write
// modes, publish exactly their concatenation, the observer sees every byte once and in order,
// and the writer copies what it buffers. O_DIRECT (write_mode::direct) takes whole aligned
// blocks and writes the last partial one buffered: any total size works. A destination that is a
// staged output of this process (`<file>.reshard-<pid>.<n>.part`, io/staging.hpp) is written in
// place: no other file ever appears beside it, and commit() renames nothing. The one file in the
// directory while the writer writes is its temporary; an abandoned writer leaves nothing.
RC_GTEST_PROP(atomic_file_writer, writes_publish_their_concatenation_in_every_durability_mode, ()) {
  const auto mode = *rc::gen::element(durability::sync, durability::deferred, durability::none);
  const auto writes = *rc::gen::element(write_mode::buffered, write_mode::direct);
  const bool staged = *rc::gen::arbitrary<bool>();
  const bool abandon = *rc::gen::inRange(0, 6) == 0;
  const auto sizes = *rc::gen::container<std::vector<std::size_t>>(
      *rc::gen::inRange<std::size_t>(0, 40),
      rc::gen::weightedOneOf<std::size_t>(
          {{12, rc::gen::inRange<std::size_t>(0, 2048)},
           {6, rc::gen::inRange<std::size_t>(1000, 70000)},
           {1, rc::gen::element<std::size_t>((1u << 20) - 1, 1u << 20, (1u << 20) + 1, 9u << 20)}}));
  std::size_t total = 0;
  for (auto n : sizes) total += n;
  std::vector<std::byte> expect(total);
  for (std::size_t i = 0; i < total; ++i) expect[i] = static_cast<std::byte>((i * 131 + i / 251) & 0xFF);
  // direct writes on the system's temporary directory (a disk, usually), buffered on temp_root()
  temp_dir dir = writes == write_mode::direct ? temp_dir(fs::temp_directory_path()) : temp_dir();
  const fs::path dest = staged ? detail::unique_temp_path(dir / "out.bin", ".part") : dir / "out.bin";
  {
    atomic_file_writer w(dest, false, "test", mode, writes);
    RC_ASSERT(w.durability_mode() == mode);
    RC_ASSERT(w.in_place() == staged);
    RC_ASSERT((w.temp_path() == dest) == staged);
    RC_ASSERT(dir.files() == std::vector<std::string>{w.temp_path().filename().string()});
    // direct where the filesystem takes O_DIRECT, which every local disk filesystem does
    if (writes == write_mode::buffered) RC_ASSERT(!w.direct());
    if (writes == write_mode::direct && local_disk_filesystem(filesystem_name(dir.path()))) RC_ASSERT(w.direct());
    std::vector<std::byte> observed;
    w.observe([&](std::span<const std::byte> b) { observed.insert(observed.end(), b.begin(), b.end()); });
    std::vector<std::byte> scratch;
    std::size_t at = 0;
    for (auto n : sizes) {
      scratch.assign(expect.begin() + static_cast<std::ptrdiff_t>(at), expect.begin() + static_cast<std::ptrdiff_t>(at + n));
      w.write(scratch);
      std::fill(scratch.begin(), scratch.end(), std::byte{0xEE});  // the writer must have copied
      at += n;
      // its buffer grows with the file, up to its capacity: a small file allocates what it needs
      // (at most initial_buffer), not the whole capacity (thousands of small outputs)
      if (writes == write_mode::buffered) {
        RC_ASSERT(w.buffer_reserved() <= atomic_file_writer::buffer_capacity);
        RC_ASSERT(w.buffer_reserved() <= std::max(atomic_file_writer::initial_buffer, 2 * at));
      }
    }
    RC_ASSERT(w.size() == total);
    RC_ASSERT(dir.files() == std::vector<std::string>{w.temp_path().filename().string()});
    if (!abandon) {
      w.commit();
      RC_ASSERT(observed == expect);
    }
  }
  if (abandon) {  // the writer's destructor removed its temporary (the staged file itself)
    RC_ASSERT(dir.files().empty());
    return;
  }
  RC_ASSERT(read_bytes(dest) == expect);
  RC_ASSERT(dir.files() == std::vector<std::string>{dest.filename().string()});
}

// A direct write refused with EINVAL (a filesystem or device that takes O_DIRECT at fcntl and
// then refuses the writes; injected here through the test-only hook RESHARD_TEST_DIRECT_EINVAL_AFTER,
// detail::direct_refusal_hook()) turns the writer to buffered writes for the rest of the file: the
// file published is the same bytes, the observer sees every byte once and in order, and the writer
// says so (direct_refused()) exactly when a refused write was tried.
RC_GTEST_PROP(atomic_file_writer, a_refused_direct_write_turns_to_buffered_writes_of_the_same_bytes, ()) {
  const auto mode = *rc::gen::element(durability::sync, durability::deferred, durability::none);
  const auto allowed = *rc::gen::inRange<std::uint64_t>(0, 3);  // direct writes before the refusal
  // mostly under one aligned buffer (the refusal at commit), sometimes past one or two of them
  const auto sizes = *rc::gen::container<std::vector<std::size_t>>(
      *rc::gen::inRange<std::size_t>(0, 6),
      rc::gen::weightedOneOf<std::size_t>({{6, rc::gen::inRange<std::size_t>(0, 20000)},
                                           {1, rc::gen::inRange<std::size_t>((1u << 20) - 4096, (1u << 20) + 4097)}}));
  std::size_t total = 0;
  for (auto n : sizes) total += n;
  std::vector<std::byte> expect(total);
  for (std::size_t i = 0; i < total; ++i) expect[i] = static_cast<std::byte>((i * 37 + i / 4093) & 0xFF);
  temp_dir dir(fs::temp_directory_path());
  auto& hook = detail::direct_refusal_hook();
  const detail::scoped_test_limit refuse(hook, allowed);
  std::vector<std::byte> observed;
  {
    atomic_file_writer w(dir / "out.bin", false, "test", mode, write_mode::direct);
    const bool direct = w.direct();  // the filesystem took O_DIRECT (ext4, xfs, btrfs do)
    w.observe([&](std::span<const std::byte> b) { observed.insert(observed.end(), b.begin(), b.end()); });
    for (std::size_t at = 0; auto n : sizes) {
      w.write(std::span<const std::byte>(expect).subspan(at, n));
      at += n;
    }
    w.commit();
    RC_ASSERT(w.size() == total);
    // the direct writes tried: one per full MiB buffer, then one for the whole blocks left at commit
    const std::uint64_t tried = direct ? total / (1u << 20) + (total % (1u << 20) >= 4096 ? 1 : 0) : 0;
    RC_ASSERT(w.direct_refused() == (tried > allowed));
    RC_ASSERT(!w.direct());
  }
  RC_ASSERT(observed == expect);
  RC_ASSERT(read_bytes(dir / "out.bin") == expect);
  RC_ASSERT(dir.files() == std::vector<std::string>{"out.bin"});
}

TEST(atomic_file_writer, sync_files_fsyncs_and_names_a_missing_file) {
  temp_dir dir;
  std::vector<fs::path> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back(dir / ("f" + std::to_string(i)));
    atomic_file_writer w(files.back(), false, "test", durability::deferred);
    w.write(std::string_view("data"));
    w.commit();
  }
  sync_files(files, 8, "sync");  // no error
  files.push_back(dir / "missing");
  EXPECT_TRUE(throws_error([&] { sync_files(files, 8, "transform"); },
                           {"transform: ", (dir / "missing").string(), "cannot open to fsync", "No such file"}));
}

TEST(atomic_file_writer, uncommitted_writer_leaves_nothing) {
  temp_dir dir;
  {
    atomic_file_writer w(dir / "out.bin");
    w.write(std::string_view("partial"));
    EXPECT_TRUE(fs::exists(w.temp_path()));
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(atomic_file_writer, exception_during_writing_leaves_nothing) {
  temp_dir dir;
  EXPECT_THROW(
      {
        atomic_file_writer w(dir / "out.bin");
        w.write(std::string_view("partial"));
        throw std::runtime_error("producer failed");
      },
      std::runtime_error);
  EXPECT_TRUE(dir.files().empty());
}

TEST(atomic_file_writer, refuses_an_existing_destination) {
  temp_dir dir;
  write_text(dir / "out.bin", "old");
  const auto dest = (dir / "out.bin").string();
  EXPECT_TRUE(throws_error([&] { atomic_file_writer w(dest, false, "ckpt"); }, {"ckpt: ", dest, "destination exists"}));
  EXPECT_EQ(to_hex(read_bytes(dest)), "6f6c64");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
}

TEST(atomic_file_writer, refuses_a_destination_that_appears_before_commit) {
  temp_dir dir;
  const auto dest = dir / "out.bin";
  atomic_file_writer w(dest);
  w.write(std::string_view("new"));
  write_text(dest, "someone else");
  EXPECT_TRUE(throws_error([&] { w.commit(); }, {dest.string(), "destination exists"}));
  EXPECT_EQ(to_hex(read_bytes(dest)), to_hex(as_bytes("someone else")));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});  // temporary removed
}

TEST(atomic_file_writer, overwrite_replaces) {
  temp_dir dir;
  write_text(dir / "out.bin", "old");
  atomic_file_writer w(dir / "out.bin", true);
  w.write(std::string_view("new!"));
  w.commit();
  EXPECT_EQ(to_hex(read_bytes(dir / "out.bin")), to_hex(as_bytes("new!")));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
}

// A staged output of this process written in place, over a file of the same name (one a killed
// process of the same pid left): with overwrite it is truncated and rewritten, without it refused
// and left as it was; either way no other file appears.
TEST(atomic_file_writer, a_staged_destination_is_written_in_place) {
  temp_dir dir;
  const fs::path part = detail::unique_temp_path(dir / "out.bin", ".part");
  EXPECT_TRUE(detail::own_temporary(part));
  write_text(part, "an older and longer file");
  EXPECT_TRUE(throws_error([&] { atomic_file_writer w(part, false, "ckpt"); }, {"ckpt: ", part.string(), "destination exists"}));
  EXPECT_EQ(to_hex(read_bytes(part)), to_hex(as_bytes("an older and longer file")));
  {
    atomic_file_writer w(part, true, "ckpt", durability::deferred);
    EXPECT_TRUE(w.in_place());
    EXPECT_EQ(read_bytes(part).size(), 0u);  // truncated at construction
    w.write(std::string_view("new"));
    w.commit();
  }
  EXPECT_EQ(to_hex(read_bytes(part)), to_hex(as_bytes("new")));
  EXPECT_EQ(dir.files(), std::vector<std::string>{part.filename().string()});
  // another process's staged name is not this writer's temporary: written beside, renamed
  const fs::path other = dir / "out.bin.reshard-999999999.0.part";
  EXPECT_FALSE(detail::own_temporary(other));
  atomic_file_writer w(other, false, "ckpt");
  EXPECT_FALSE(w.in_place());
  EXPECT_NE(w.temp_path(), other);
}

// staged_outputs: a final name that exists is refused at prepare() without force (naming it,
// nothing written, the directories it made removed), taken with force; each staged file is
// written in place and renamed into place at commit, no other file beside it.
TEST(staged_outputs, refuses_an_existing_output_and_stages_each_file_in_place) {
  temp_dir dir;
  fs::create_directories(dir / "old");
  write_text(dir / "old" / "a.ckpt", "old");
  const std::vector<fs::path> finals{dir / "new" / "deep" / "b.ckpt", dir / "old" / "a.ckpt"};
  {
    staged_outputs out("transform", false, true);
    out.add(finals);
    EXPECT_TRUE(throws_error([&] { out.prepare(); }, {"transform: ", finals[1].string(), "exists (pass force"}));
  }
  EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"old", "old/a.ckpt"}));  // "new" removed again
  for (const bool sync : {true, false}) {
    staged_outputs out("transform", true, sync);
    const auto parts = out.add(finals);
    out.prepare();
    for (std::size_t i = 0; i < parts.size(); ++i) {
      atomic_file_writer w(parts[i], true, "test", durability::deferred);
      EXPECT_TRUE(w.in_place());
      w.write("file " + std::to_string(i));
      w.commit();
    }
    std::vector<std::string> staged{"deep", "deep/" + parts[0].filename().string()};
    if (!sync) staged.push_back("deep/b.ckpt");  // the first round's output, replaced at commit
    std::sort(staged.begin(), staged.end());
    EXPECT_EQ(list_tree(dir / "new"), staged);
    out.sync();
    EXPECT_EQ(out.commit(), finals);
    EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"new", "new/deep", "new/deep/b.ckpt", "old", "old/a.ckpt"}));
    EXPECT_EQ(to_hex(read_bytes(finals[1])), to_hex(as_bytes("file 1")));
  }
}

// staged_outputs::sync() fsyncs the staged files on a disk, opening each (a file gone is an error
// naming it), and on a filesystem in memory (tmpfs), where fsync does nothing, opens none of them
// (then the commit's rename names the file gone).
TEST(staged_outputs, sync_opens_no_file_on_a_filesystem_in_memory) {
  for (const fs::path& root : {fs::path("/dev/shm"), fs::temp_directory_path()}) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) continue;
    const bool memory = filesystem_name(root) == "tmpfs" || filesystem_name(root) == "ramfs";
    temp_dir dir(root);
    staged_outputs out("transform", false, true);
    const std::vector<fs::path> finals{dir / "x" / "a.ckpt", dir / "y" / "b.ckpt"};
    const auto parts = out.add(finals);
    EXPECT_FALSE(out.in_memory_only());  // not prepared yet
    out.prepare();
    EXPECT_EQ(out.in_memory_only(), memory) << root;  // its writers start no write-back there
    atomic_file_writer(parts[0], true, "test", durability::deferred).commit();  // parts[1] never written
    if (memory) {
      out.sync();
      EXPECT_TRUE(throws_error([&] { out.commit(); }, {finals[1].string(), "cannot rename", "No such file"})) << root;
    } else {
      EXPECT_TRUE(throws_error([&] { out.sync(); }, {parts[1].string(), "cannot open to fsync", "No such file"})) << root;
    }
  }
}

TEST(atomic_file_writer, missing_directory_is_reported) {
  temp_dir dir;
  const auto dest = dir / "no" / "such" / "out.bin";
  EXPECT_TRUE(throws_error([&] { atomic_file_writer w(dest); },
                           {dest.string(), "cannot create temporary file", "No such file or directory"}));
}

TEST(atomic_file_writer, misuse_is_a_contract_violation) {
  temp_dir dir;
  atomic_file_writer w(dir / "out.bin");
  w.commit();
  EXPECT_THROW(w.write(std::string_view("late")), reshard::contract_violation);
  EXPECT_THROW(w.commit(), reshard::contract_violation);
}

TEST(atomic_file_writer, concurrent_writers_use_distinct_temporaries) {
  temp_dir dir;
  atomic_file_writer a(dir / "x"), b(dir / "x");
  EXPECT_NE(a.temp_path(), b.temp_path());
  a.write(std::string_view("a"));
  b.write(std::string_view("b"));
  a.commit();
  EXPECT_TRUE(throws_error([&] { b.commit(); }, {"destination exists"}));
  EXPECT_EQ(to_hex(read_bytes(dir / "x")), "61");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"x"});
}

// automatic is direct exactly where outputs are fsynced on a local disk filesystem and no source
// is read from a mapping; an explicit mode is kept; a directory that does not exist yet is asked
// through its nearest existing ancestor.
TEST(write_mode, automatic_is_direct_only_for_durable_outputs_on_a_local_disk) {
  temp_dir dir(fs::temp_directory_path());  // a disk, usually; /dev/shm is asked below
  const bool disk = local_disk_filesystem(filesystem_name(dir.path()));
  const fs::path fresh = dir / "not" / "made" / "yet";
  for (const fs::path& p : {dir.path(), fresh}) {
    EXPECT_EQ(resolve_write_mode(write_mode::automatic, p, true, false), disk ? write_mode::direct : write_mode::buffered)
        << p;
    EXPECT_EQ(resolve_write_mode(write_mode::automatic, p, false, false), write_mode::buffered) << p;  // --no-sync
    EXPECT_EQ(resolve_write_mode(write_mode::automatic, p, true, true), write_mode::buffered) << p;   // mmap reads
    for (write_mode m : {write_mode::buffered, write_mode::direct}) {
      for (bool durable : {true, false}) {
        EXPECT_EQ(resolve_write_mode(m, p, durable, false), m) << p;
      }
    }
  }
  if (std::filesystem::is_directory("/dev/shm") && filesystem_name("/dev/shm") == "tmpfs") {
    EXPECT_EQ(resolve_write_mode(write_mode::automatic, "/dev/shm/x/y", true, false), write_mode::buffered);
  }
  for (const char* local : {"ext4", "xfs", "btrfs"}) EXPECT_TRUE(local_disk_filesystem(local)) << local;
  for (const char* other : {"tmpfs", "nfs", "fuse", "overlay", "zfs", ""}) EXPECT_FALSE(local_disk_filesystem(other)) << other;
  EXPECT_EQ(to_string(write_mode::direct), "direct");
  EXPECT_EQ(to_string(write_mode::buffered), "buffered");
  EXPECT_EQ(to_string(write_mode::automatic), "auto");
  for (write_mode m : {write_mode::automatic, write_mode::buffered, write_mode::direct}) {
    EXPECT_EQ(write_mode_from(to_string(m)), m);
  }
  EXPECT_EQ(write_mode_from("Direct"), std::nullopt);
}

TEST(filesystem_name, names_the_filesystem_by_its_statfs_magic) {
  EXPECT_EQ(filesystem_name("/proc/self"), "0x9fa0");  // procfs: not in the table, its magic in hex
  if (std::filesystem::is_directory("/dev/shm")) {
    const auto shm = filesystem_name("/dev/shm");
    EXPECT_TRUE(shm == "tmpfs" || shm == "ramfs") << shm;
    EXPECT_FALSE(remote_filesystem(shm));
  }
  EXPECT_EQ(filesystem_name("/no/such/path/here"), "");
  for (const char* remote : {"nfs", "fuse", "lustre", "cifs", "smb2", "ceph", "gpfs", "9p"})
    EXPECT_TRUE(remote_filesystem(remote)) << remote;
  for (const char* local : {"ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "", "0x9fa0"})
    EXPECT_FALSE(remote_filesystem(local)) << local;
}
