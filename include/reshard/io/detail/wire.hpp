// reshard/io/detail/wire.hpp: bounded reading and writing of protobuf wire data through
// libprotobuf's CodedInputStream / CodedOutputStream, shared by ckpt.hpp and strategy.hpp.
// Internal: not part of reshard's API.
#pragma once

#include <reshard/error.hpp>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace reshard::io::detail {

namespace pbio = google::protobuf::io;

enum wire_type : std::uint32_t { wt_varint = 0, wt_fixed64 = 1, wt_len = 2, wt_sgroup = 3, wt_egroup = 4, wt_fixed32 = 5 };

constexpr std::uint32_t make_tag(std::uint32_t field, wire_type wt) noexcept { return field << 3 | wt; }
constexpr std::uint32_t tag_field(std::uint32_t tag) noexcept { return tag >> 3; }
constexpr std::uint32_t tag_wire(std::uint32_t tag) noexcept { return tag & 7u; }

/// Largest buffer one CodedInputStream may read.
inline constexpr std::size_t max_window = static_cast<std::size_t>(INT_MAX);

/// A protobuf message occupying exactly [data, data + size) (size <= max_window), read field by
/// field with CodedInputStream. Every failure calls `fail(reason)`, which must throw.
class wire_message {
 public:
  using fail_fn = std::function<void(const std::string&)>;

  wire_message(const std::byte* data, std::size_t size, fail_fn fail)
      : data_(data),
        size_(size),
        in_(reinterpret_cast<const std::uint8_t*>(data), static_cast<int>(std::min(size, max_window))),
        fail_(std::move(fail)) {
    if (size > max_window) this->fail("message of " + std::to_string(size) + " bytes exceeds protobuf's 2 GiB limit");
    in_.PushLimit(static_cast<int>(size));  // size <= max_window here
  }

  [[noreturn]] void fail(const std::string& reason) const {
    fail_(reason);
    report_error(reason);  // fail_ must throw; this keeps [[noreturn]] honest
  }

  /// The next tag, or 0 at the end of the message. A malformed tag fails.
  std::uint32_t next_tag() {
    const std::uint32_t tag = in_.ReadTag();
    if (tag == 0) {
      if (!in_.ConsumedEntireMessage() || position() != size_)
        fail("malformed field tag at byte " + std::to_string(position()) + " of a " + std::to_string(size_) +
             "-byte message (truncated or corrupt)");
      return 0;
    }
    if (tag_field(tag) == 0) fail("field number 0 at byte " + std::to_string(position()));
    return tag;
  }

  std::uint64_t varint(std::string_view what) {
    std::uint64_t v = 0;
    if (!in_.ReadVarint64(&v)) fail("truncated or malformed varint for " + std::string(what));
    return v;
  }
  /// The length prefix of the field `what` (its message built only on a failure: this runs for
  /// every field of every Value a checkpoint index reads).
  std::uint64_t length_of(std::string_view what) {
    std::uint64_t v = 0;
    if (!in_.ReadVarint64(&v)) fail("truncated or malformed varint for " + std::string(what) + " length");
    return v;
  }

  /// Reads a length prefix and checks it against the bytes left; returns the span of the payload
  /// without consuming it.
  std::span<const std::byte> length_delimited(std::string_view what) {
    const std::uint64_t len = length_of(what);
    const std::size_t left = size_ - position();
    if (len > left)
      fail(std::string(what) + " claims " + std::to_string(len) + " bytes but only " + std::to_string(left) +
           " remain (truncated file?)");
    return {data_ + position(), static_cast<std::size_t>(len)};
  }

  /// Reads a length-delimited field whole: returns its payload and moves past it.
  std::span<const std::byte> bytes(std::string_view what) {
    auto s = length_delimited(what);
    in_.Skip(static_cast<int>(s.size()));
    return s;
  }
  std::string string(std::string_view what) {
    auto s = bytes(what);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }

  /// Reads the repeated scalar field `what` whose tag `tag` was just read, packed (wire type 2)
  /// or not (wire type 0), calling `add(value)` for each value.
  template <class Add>
  void repeated_varint(std::uint32_t tag, std::string_view what, Add&& add) {
    if (tag_wire(tag) == wt_varint) {
      add(varint(what));
    } else if (tag_wire(tag) == wt_len) {
      auto payload = bytes(std::string("packed ") + std::string(what));
      wire_message inner(payload.data(), payload.size(), fail_);
      while (inner.position() < payload.size()) add(inner.varint(what));
    } else {
      fail(std::string(what) + " has wire type " + std::to_string(tag_wire(tag)) + ", expected varint or packed");
    }
  }

  /// Skips an unknown field (groups are refused: neither MindSpore format uses them).
  void skip(std::uint32_t tag) {
    switch (tag_wire(tag)) {
      case wt_varint: varint("unknown field"); break;
      case wt_fixed64: skip_bytes(8, tag); break;
      case wt_fixed32: skip_bytes(4, tag); break;
      case wt_len: bytes("unknown field " + std::to_string(tag_field(tag))); break;
      default:
        fail("unknown field " + std::to_string(tag_field(tag)) + " with unsupported wire type " +
             std::to_string(tag_wire(tag)));
    }
  }

  /// Fails unless the tag just read has wire type `wt`.
  void expect_wire(std::uint32_t tag, wire_type wt, std::string_view what) const {
    if (tag_wire(tag) != wt)
      fail(std::string(what) + " has wire type " + std::to_string(tag_wire(tag)) + ", expected " +
           std::to_string(wt));
  }

  /// Reads a length prefix; if the payload is complete, returns it and moves past it. If not,
  /// fails with "<context(name)><what> claims N bytes but only M remain", where name is the
  /// string field 1 at the start of the partial payload when it is readable (the parameter or
  /// node name of MindSpore's messages), so that truncation errors can name what was cut.
  /// `what` is a string, or a callable that makes it (called only on a failure).
  template <class What, class Context>
  std::span<const std::byte> bytes_or_named_truncation(What&& what, Context&& context) {
    const auto name = [&]() -> std::string {
      if constexpr (std::is_invocable_v<What&>) return what();
      else return std::string(what);
    };
    std::uint64_t len = 0;
    if (!in_.ReadVarint64(&len)) fail("truncated or malformed varint for " + name() + " length");
    const std::span<const std::byte> rest(data_ + position(), size_ - position());
    if (len > rest.size())
      report_named(context(peek_field1_string(rest)) + name() + " claims " + std::to_string(len) +
                   " bytes but only " + std::to_string(rest.size()) + " remain (truncated file?)");
    in_.Skip(static_cast<int>(len));
    return rest.first(static_cast<std::size_t>(len));
  }

  /// The string field 1 at the start of `partial` (a possibly truncated message), if complete.
  static std::optional<std::string> peek_field1_string(std::span<const std::byte> partial) {
    pbio::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(partial.data()),
                              static_cast<int>(std::min(partial.size(), max_window)));
    std::uint64_t len = 0;
    if (in.ReadTag() != make_tag(1, wt_len) || !in.ReadVarint64(&len)) return std::nullopt;
    const auto at = static_cast<std::size_t>(in.CurrentPosition());
    if (len > partial.size() - at) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(partial.data()) + at, static_cast<std::size_t>(len));
  }

  std::size_t position() const { return static_cast<std::size_t>(in_.CurrentPosition()); }
  std::size_t size() const noexcept { return size_; }
  const std::byte* data() const noexcept { return data_; }
  const fail_fn& failer() const noexcept { return fail_; }

 private:
  [[noreturn]] static void report_named(const std::string& message) { report_error(message); }
  void skip_bytes(std::size_t n, std::uint32_t tag) {
    if (size_ - position() < n || !in_.Skip(static_cast<int>(n)))
      fail("unknown field " + std::to_string(tag_field(tag)) + " is truncated");
  }

  const std::byte* data_;
  std::size_t size_;
  pbio::CodedInputStream in_;
  fail_fn fail_;
};

/// Appends protobuf wire data to a std::string through CodedOutputStream.
class wire_writer {
 public:
  wire_writer() = default;

  void tag(std::uint32_t field, wire_type wt) { out().WriteTag(make_tag(field, wt)); }
  void varint_field(std::uint32_t field, std::uint64_t v) {
    tag(field, wt_varint);
    out().WriteVarint64(v);
  }
  /// int32 / int64 field: negative values sign-extended to a 10-byte varint.
  void signed_field(std::uint32_t field, std::int64_t v) { varint_field(field, static_cast<std::uint64_t>(v)); }
  void bytes_field(std::uint32_t field, std::string_view bytes) {
    tag(field, wt_len);
    out().WriteVarint64(bytes.size());
    out().WriteRaw(bytes.data(), static_cast<int>(bytes.size()));
  }
  void raw(std::string_view bytes) { out().WriteRaw(bytes.data(), static_cast<int>(bytes.size())); }
  void length(std::uint64_t n) { out().WriteVarint64(n); }

  /// The bytes written so far; the writer can be used again afterwards.
  std::string take() {
    coded_.reset();
    stream_.reset();
    return std::exchange(buffer_, {});
  }

 private:
  pbio::CodedOutputStream& out() {
    if (!coded_) {
      stream_ = std::make_unique<pbio::StringOutputStream>(&buffer_);
      coded_ = std::make_unique<pbio::CodedOutputStream>(stream_.get());
    }
    return *coded_;
  }

  std::string buffer_;
  std::unique_ptr<pbio::StringOutputStream> stream_;
  std::unique_ptr<pbio::CodedOutputStream> coded_;
};

/// Bytes of the varint encoding of `v`.
inline std::size_t varint_size(std::uint64_t v) noexcept { return pbio::CodedOutputStream::VarintSize64(v); }

}  // namespace reshard::io::detail
