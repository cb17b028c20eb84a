// reshard/io/plan_wire.hpp: a checkpoint plan as compact bytes, for handing it from one process
// to others (reshard/mpi/transform.hpp did so before each process planned its own targets). The JSON of
// to_json / plan_from_json (plan_file.hpp) is the form to keep and read; at many ranks it is
// tens of megabytes of text whose parsing costs more than the run (docs/benchmarks.md), while
// these bytes are written and read at memory speed.
//
//   std::string bytes = plan_to_bytes(plan);
//   checkpoint_plan back = plan_from_bytes(bytes, "process 0");   // == plan
//
// The layout is this program's own, between processes of the same build: a magic "RSPLAN" and a
// version, then every field of the plan in declaration order; integers little-endian, 8 bytes
// (dtypes, formats and flags 1 byte), strings and lists as an 8-byte count then their elements.
// Not a file format: nothing promises that another version reads it. plan_from_bytes checks
// every count against the bytes left and every enum against its range, so a truncated or
// corrupt buffer is an error naming `origin`, never a crash.
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

namespace detail {

inline constexpr std::string_view plan_wire_magic = "RSPLAN";
inline constexpr std::uint64_t plan_wire_version = 2;

class plan_wire_writer {
 public:
  void u64(std::uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_.append(b, 8);
  }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  void list(const index_list& l) {
    u64(l.size());
    for (index_t v : l) i64(v);
  }
  void a_box(const box& b) {
    list(b.offset);
    list(b.extent);
  }
  std::string take() { return std::move(out_); }
  void raw(std::string_view s) { out_.append(s); }

 private:
  std::string out_;
};

class plan_wire_reader {
 public:
  plan_wire_reader(std::string_view bytes, std::string origin) : in_(bytes), origin_(std::move(origin)) {}

  std::uint64_t u64() {
    need(8, "a number");
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in_[at_ + i])} << (8 * i);
    at_ += 8;
    return v;
  }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  std::uint8_t u8() {
    need(1, "a byte");
    return static_cast<std::uint8_t>(in_[at_++]);
  }
  bool flag() {
    const std::uint8_t v = u8();
    if (v > 1) fail("a flag of " + std::to_string(v));
    return v == 1;
  }
  // A count of elements of at least `each` bytes that must fit in what is left.
  std::size_t count(std::size_t each) {
    const std::uint64_t n = u64();
    if (each != 0 && n > (in_.size() - at_) / each) fail("a count of " + std::to_string(n) + " beyond its end");
    return static_cast<std::size_t>(n);
  }
  std::string str() {
    const std::size_t n = count(1);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  index_list list() {
    const std::size_t n = count(8);
    index_list l;
    for (std::size_t i = 0; i < n; ++i) l.push_back(i64());
    return l;
  }
  box a_box() {
    box b;
    b.offset = list();
    b.extent = list();
    if (b.offset.size() != b.extent.size()) fail("a box whose offset and extent differ in rank");
    return b;
  }
  dtype a_dtype() {
    const std::uint8_t v = u8();
    if (v > static_cast<std::uint8_t>(dtype::str)) fail("dtype " + std::to_string(v));
    return static_cast<dtype>(v);
  }
  checkpoint_format a_format() {
    const std::uint8_t v = u8();
    if (v > static_cast<std::uint8_t>(checkpoint_format::dcp)) fail("format " + std::to_string(v));
    return static_cast<checkpoint_format>(v);
  }
  void expect(std::string_view s, const char* what) {
    need(s.size(), what);
    if (in_.substr(at_, s.size()) != s) fail(std::string("not ") + what);
    at_ += s.size();
  }
  bool done() const noexcept { return at_ == in_.size(); }
  [[noreturn]] void fail(const std::string& why) const {
    report_error(origin_ + ": the plan's bytes: " + why + " at byte " + std::to_string(at_) +
                 " (truncated or corrupt)");
  }

 private:
  void need(std::size_t n, const char* what) const {
    if (in_.size() - at_ < n) fail(std::string("they end before ") + what);
  }
  std::string_view in_;
  std::size_t at_ = 0;
  std::string origin_;
};

}  // namespace detail

/// The plan as compact bytes (see the header comment); plan_from_bytes reads them back.
inline std::string plan_to_bytes(const checkpoint_plan& p) {
  detail::plan_wire_writer w;
  w.raw(detail::plan_wire_magic);
  w.u64(detail::plan_wire_version);
  w.u64(p.sources.size());
  for (const auto& [r, s] : p.sources) {
    w.i64(r);
    w.str(s.path.native());
    w.u64(s.bytes_read);
    w.u64(s.size);
    w.i64(s.mtime_ns);
  }
  w.u64(p.targets.size());
  for (const auto& t : p.targets) {
    w.i64(t.rank);
    w.str(t.path.native());
    w.u8(static_cast<std::uint8_t>(t.format));
    w.u64(t.files.size());
    for (const auto& f : t.files) w.str(f.native());
    w.str(t.safetensors_format);
    w.u64(t.items.size());
    for (const auto& it : t.items) {
      w.str(it.source_name);
      w.str(it.name);
      w.u8(static_cast<std::uint8_t>(it.from));
      w.u8(static_cast<std::uint8_t>(it.to));
      w.u64(it.dims.size());
      for (auto d : it.dims) w.i64(d);
      w.u8(it.scalar ? 1 : 0);
      w.u64(it.bytes);
      w.u64(it.source_bytes);
      w.u64(it.own_rank_bytes);
      w.u8(it.raw ? 1 : 0);
      w.i64(it.source_rank);
      w.u64(it.stored.size());
      for (const auto& g : it.stored) w.u64(g.offset), w.u64(g.bytes);
      w.a_box(it.target);
      w.u64(it.transfers.size());
      for (const auto& x : it.transfers) {
        w.i64(x.rank);
        w.a_box(x.where);
        w.u64(x.bytes);
      }
      w.u64(it.file);
    }
    w.u64(t.byte_items.size());
    for (const auto& b : t.byte_items) {
      w.str(b.name);
      w.str(b.file.native());
      w.u64(b.offset);
      w.u64(b.bytes);
    }
  }
  w.u64(p.bytes_read);
  w.u64(p.bytes_written);
  w.u64(p.cross_bytes);
  w.u64(p.lower_bound_bytes);
  w.u64(p.jobs);
  w.u64(p.buffer_bytes);
  w.u64(p.peak_memory_bound);
  w.u64(p.casts.size());
  for (const auto& c : p.casts) {
    w.str(c.name);
    w.u8(static_cast<std::uint8_t>(c.from));
    w.u8(static_cast<std::uint8_t>(c.to));
  }
  w.u64(p.warnings.size());
  for (const auto& s : p.warnings) w.str(s);
  w.u64(p.holds.size());
  for (const auto& [name, by_rank] : p.holds) {
    w.str(name);
    w.u64(by_rank.size());
    for (const auto& [r, b] : by_rank) {
      w.i64(r);
      w.a_box(b);
    }
  }
  w.u8(p.crc ? 1 : 0);
  w.u64(p.chunk_bytes);
  w.u8(p.dcp_torch == dcp_layout::torch_1_13 ? 1 : 0);
  return w.take();
}

/// The plan plan_to_bytes wrote; errors name `origin`. Checks the bytes, not the plan
/// (check_checkpoint_plan does that).
inline checkpoint_plan plan_from_bytes(std::string_view bytes, const std::string& origin) {
  detail::plan_wire_reader r(bytes, origin);
  r.expect(detail::plan_wire_magic, "a plan (its magic)");
  if (const std::uint64_t v = r.u64(); v != detail::plan_wire_version)
    r.fail("version " + std::to_string(v) + ", this program reads version " + std::to_string(detail::plan_wire_version));
  checkpoint_plan p;
  for (std::size_t n = r.count(8 * 5), i = 0; i < n; ++i) {
    const index_t rank = r.i64();
    plan_source s;
    s.path = r.str();
    s.bytes_read = r.u64();
    s.size = r.u64();
    s.mtime_ns = r.i64();
    if (!p.sources.emplace(rank, std::move(s)).second) r.fail("source rank " + std::to_string(rank) + " twice");
  }
  p.targets.resize(r.count(8 * 5));
  for (auto& t : p.targets) {
    t.rank = r.i64();
    t.path = r.str();
    t.format = r.a_format();
    t.files.resize(r.count(8));
    for (auto& f : t.files) f = r.str();
    t.safetensors_format = r.str();
    t.items.resize(r.count(8 * 10));
    for (auto& it : t.items) {
      it.source_name = r.str();
      it.name = r.str();
      it.from = r.a_dtype();
      it.to = r.a_dtype();
      it.dims.resize(r.count(8));
      for (auto& d : it.dims) d = r.i64();
      it.scalar = r.flag();
      it.bytes = r.u64();
      it.source_bytes = r.u64();
      it.own_rank_bytes = r.u64();
      it.raw = r.flag();
      it.source_rank = r.i64();
      it.stored.resize(r.count(16));
      for (auto& g : it.stored) g.offset = r.u64(), g.bytes = r.u64();
      it.target = r.a_box();
      it.transfers.resize(r.count(8 * 4));
      for (auto& x : it.transfers) {
        x.rank = r.i64();
        x.where = r.a_box();
        x.bytes = r.u64();
      }
      it.file = static_cast<std::size_t>(r.u64());
    }
    t.byte_items.resize(r.count(8 * 4));
    for (auto& b : t.byte_items) {
      b.name = r.str();
      b.file = r.str();
      b.offset = r.u64();
      b.bytes = r.u64();
    }
  }
  p.bytes_read = r.u64();
  p.bytes_written = r.u64();
  p.cross_bytes = r.u64();
  p.lower_bound_bytes = r.u64();
  const std::uint64_t jobs = r.u64();
  if (jobs > 0xffffffffu) r.fail("jobs " + std::to_string(jobs));
  p.jobs = static_cast<unsigned>(jobs);
  p.buffer_bytes = r.u64();
  p.peak_memory_bound = r.u64();
  p.casts.resize(r.count(10));
  for (auto& c : p.casts) {
    c.name = r.str();
    c.from = r.a_dtype();
    c.to = r.a_dtype();
  }
  p.warnings.resize(r.count(8));
  for (auto& s : p.warnings) s = r.str();
  for (std::size_t n = r.count(16), i = 0; i < n; ++i) {
    std::string name = r.str();
    rank_boxes by_rank(r.count(8 * 3));
    for (auto& [rank, b] : by_rank) {
      rank = r.i64();
      b = r.a_box();
    }
    if (!p.holds.emplace(std::move(name), std::move(by_rank)).second) r.fail("a parameter's held boxes twice");
  }
  p.crc = r.flag();
  p.chunk_bytes = r.u64();
  p.dcp_torch = r.flag() ? dcp_layout::torch_1_13 : dcp_layout::torch_2;
  if (!r.done()) r.fail("bytes after the plan");
  return p;
}

}  // namespace reshard::io
