// reshard/box.hpp: an axis-aligned box of a tensor (global offset and extent per dim).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reshard/error.hpp"

namespace reshard {

using index_t = std::int64_t;
using extents = std::vector<index_t>;

namespace detail {
// A vector of n copies of v, built element by element: clang-14 with libstdc++-12 cannot
// constant-evaluate the sized constructors, resize() or assign() of vectors of trivial types.
template <class T>
constexpr std::vector<T> filled(std::size_t n, T v) {
  std::vector<T> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(v);
  return out;
}
}  // namespace detail

/// A box of a tensor: for each dim the half-open range [offset, offset + extent).
/// A 0-d tensor's box has no dims and holds one element.
struct box {
  extents offset;
  extents extent;

  friend constexpr bool operator==(const box&, const box&) = default;
};

/// Number of elements in `b`.
constexpr index_t volume(const box& b) {
  index_t v = 1;
  for (index_t e : b.extent) v *= e;
  return v;
}

/// Number of elements of a tensor of shape `s`.
constexpr index_t volume(const extents& s) {
  index_t v = 1;
  for (index_t e : s) v *= e;
  return v;
}

/// The intersection of two boxes of the same rank (extent 0 where they do not meet).
// @post volume(intersect(a, b)) <= min(volume(a), volume(b))
constexpr box intersect(const box& a, const box& b) {
  RESHARD_EXPECTS(a.offset.size() == b.offset.size(), "intersect: boxes of different rank");
  box r;
  r.offset = detail::filled<index_t>(a.offset.size(), 0);
  r.extent = detail::filled<index_t>(a.offset.size(), 0);
  for (std::size_t i = 0; i < a.offset.size(); ++i) {
    const index_t lo = a.offset[i] > b.offset[i] ? a.offset[i] : b.offset[i];
    const index_t ahi = a.offset[i] + a.extent[i], bhi = b.offset[i] + b.extent[i];
    const index_t hi = ahi < bhi ? ahi : bhi;
    r.offset[i] = lo;
    r.extent[i] = hi > lo ? hi - lo : 0;
  }
  return r;
}

namespace detail {
constexpr void append_int(std::string& s, index_t v) {
  if (v < 0) {
    s += '-';
    // careful with the most negative value: work in unsigned
    auto u = static_cast<std::uint64_t>(-(v + 1)) + 1;
    char buf[24]{};
    int n = 0;
    while (u) buf[n++] = static_cast<char>('0' + u % 10), u /= 10;
    while (n) s += buf[--n];
    return;
  }
  char buf[24]{};
  int n = 0;
  do buf[n++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v);
  while (n) s += buf[--n];
}
constexpr void append_list(std::string& s, const extents& v) {
  s += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    append_int(s, v[i]);
  }
  s += ']';
}
}  // namespace detail

/// The list notation used everywhere in reshard: `[2,4]`.
constexpr std::string to_string(const extents& v) {
  std::string s;
  detail::append_list(s, v);
  return s;
}

/// Prints a box as its per-dim ranges: `[0:4,2:4]`.
constexpr std::string to_string(const box& b) {
  std::string s = "[";
  for (std::size_t i = 0; i < b.offset.size(); ++i) {
    if (i) s += ',';
    detail::append_int(s, b.offset[i]);
    s += ':';
    detail::append_int(s, b.offset[i] + b.extent[i]);
  }
  return s + ']';
}

}  // namespace reshard
