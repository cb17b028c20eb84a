// reshard/io/dtype.hpp: element types of MindSpore checkpoints and their names in the
// file formats reshard reads and writes (MindSpore `tensor_type`, safetensors, numpy).
//
// Int4 (MindSpore `qint4x2`): MindSpore stores such a tensor as int8 storage of the same shape,
// each byte holding two 4-bit values (`Tensor.init_data` allocates `np.ndarray(shape, int8)`
// for qint4x2). reshard therefore treats one Int4 *element* as one opaque byte: element_size is
// 1, `dims` give the byte storage shape, and slicing keeps every byte bit-exact. A file whose
// Int4 content is ceil(n/2) bytes for n = prod(dims) (a hypothetical nibble-per-element layout)
// does not match this rule and is reported, never guessed at.
//
// str: numpy UCS-4 text, 4 bytes a character; element_size is 4 (one character).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>

namespace reshard::io {

/// The element types that can appear in a MindSpore checkpoint (`TensorProto.tensor_type`).
enum class dtype : std::uint8_t {
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  float32,
  float64,
  boolean,
  bfloat16,
  int4,  ///< MindSpore qint4x2: one byte per element, holding two 4-bit values
  str,   ///< numpy UCS-4 text, one element = one 4-byte character
};

namespace detail {
struct dtype_names {
  dtype type;
  std::string_view ms;           // MindSpore tensor_type
  std::string_view safetensors;  // empty: no safetensors dtype
  std::string_view numpy;        // numpy (ml_dtypes for bfloat16) name of the storage
  std::size_t size;              // bytes per element
};
inline constexpr std::array<dtype_names, 15> dtype_table{{
    {dtype::int8, "Int8", "I8", "int8", 1},
    {dtype::uint8, "UInt8", "U8", "uint8", 1},
    {dtype::int16, "Int16", "I16", "int16", 2},
    {dtype::uint16, "UInt16", "U16", "uint16", 2},
    {dtype::int32, "Int32", "I32", "int32", 4},
    {dtype::uint32, "UInt32", "U32", "uint32", 4},
    {dtype::int64, "Int64", "I64", "int64", 8},
    {dtype::uint64, "UInt64", "U64", "uint64", 8},
    {dtype::float16, "Float16", "F16", "float16", 2},
    {dtype::float32, "Float32", "F32", "float32", 4},
    {dtype::float64, "Float64", "F64", "float64", 8},
    {dtype::boolean, "Bool", "BOOL", "bool", 1},
    {dtype::bfloat16, "BFloat16", "BF16", "bfloat16", 2},
    {dtype::int4, "Int4", "", "int8", 1},
    {dtype::str, "str", "", "str", 4},
}};
constexpr const dtype_names& names_of(dtype t) noexcept {
  return dtype_table[static_cast<std::size_t>(t)];
}
}  // namespace detail

/// Every dtype, in enum order.
inline constexpr std::array<dtype, 15> all_dtypes{
    dtype::int8,    dtype::uint8,   dtype::int16,   dtype::uint16,  dtype::int32,
    dtype::uint32,  dtype::int64,   dtype::uint64,  dtype::float16, dtype::float32,
    dtype::float64, dtype::boolean, dtype::bfloat16, dtype::int4,   dtype::str};

/// MindSpore's `tensor_type` string: "Float32", "BFloat16", "Int4", "str", ...
constexpr std::string_view ms_name(dtype t) noexcept { return detail::names_of(t).ms; }

/// The dtype whose MindSpore `tensor_type` is exactly `name` (case-sensitive), if any.
/// @post !r || ms_name(*r) == name
constexpr std::optional<dtype> dtype_from_ms_name(std::string_view name) noexcept {
  for (const auto& n : detail::dtype_table)
    if (n.ms == name) return n.type;
  return std::nullopt;
}

/// Bytes of one element (Int4: 1, the byte holding two 4-bit values; str: 4, one character).
constexpr std::size_t element_size(dtype t) noexcept { return detail::names_of(t).size; }

/// The safetensors dtype name ("F32", "BF16", ...); none for Int4 and str. (MindSpore stores an
/// Int4 tensor in safetensors as "I8" with `__metadata__[name] == "Int4"`; see safetensors.hpp.)
constexpr std::optional<std::string_view> safetensors_name(dtype t) noexcept {
  auto s = detail::names_of(t).safetensors;
  if (s.empty()) return std::nullopt;
  return s;
}

/// The dtype of safetensors dtype name `name` (one of BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32
/// I64 U64 F64), if any.
/// @post !r || safetensors_name(*r) == name
constexpr std::optional<dtype> dtype_from_safetensors_name(std::string_view name) noexcept {
  for (const auto& n : detail::dtype_table)
    if (!n.safetensors.empty() && n.safetensors == name) return n.type;
  return std::nullopt;
}

/// The numpy name of the element storage: "float32", "bool", "bfloat16" (ml_dtypes), "str";
/// Int4 is stored as "int8" (its qint4x2 bytes), so this is the one name that does not map back.
constexpr std::string_view numpy_name(dtype t) noexcept { return detail::names_of(t).numpy; }

/// The dtype of numpy name `name` ("int8" is always Int8, never Int4); also accepts "bool_" and
/// "str_".
/// @post !r || numpy_name(*r) == name || name is an alias
constexpr std::optional<dtype> dtype_from_numpy_name(std::string_view name) noexcept {
  if (name == "bool_") return dtype::boolean;
  if (name == "str_") return dtype::str;
  for (const auto& n : detail::dtype_table)
    if (n.type != dtype::int4 && n.numpy == name) return n.type;
  return std::nullopt;
}

/// The dtype named `name` in any of the namings above: MindSpore's ("Float32", "BFloat16"),
/// numpy's ("float32", "bfloat16") or safetensors' ("F32", "BF16").
constexpr std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
  if (auto t = dtype_from_ms_name(name)) return t;
  if (auto t = dtype_from_numpy_name(name)) return t;
  return dtype_from_safetensors_name(name);
}

inline std::ostream& operator<<(std::ostream& os, dtype t) { return os << ms_name(t); }

/// Number of elements of `shape` (1 for the empty shape); none if a dimension is negative or the
/// product exceeds 2^63 - 1.
constexpr std::optional<std::uint64_t> element_count(std::span<const std::int64_t> shape) noexcept {
  constexpr std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t n = 1;
  bool zero = false;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) zero = true;
  }
  if (zero) return 0;
  for (std::int64_t d : shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (n > limit / u) return std::nullopt;
    n *= u;
  }
  return n;
}

/// Bytes of a dense row-major tensor of `shape` and `t`; none on a negative dimension or overflow.
/// @post r == element_count(shape) * element_size(t) when that fits in int64
constexpr std::optional<std::uint64_t> byte_size(dtype t, std::span<const std::int64_t> shape) noexcept {
  constexpr std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  auto n = element_count(shape);
  if (!n) return std::nullopt;
  const std::uint64_t s = element_size(t);
  if (*n > limit / s) return std::nullopt;
  return *n * s;
}

}  // namespace reshard::io
