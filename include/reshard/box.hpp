// reshard/box.hpp: an axis-aligned box of a tensor (global offset and extent per dim).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <type_traits>
#include <vector>

#include "reshard/error.hpp"

namespace reshard {

using index_t = std::int64_t;

/// A short list of integers (a shape, an offset, a device matrix, slice bounds): a vector that
/// keeps up to four entries inline, so that boxes of tensors up to 4-d never allocate; longer
/// lists live on the heap. constexpr throughout. (Formerly `extents`, kept as a deprecated alias:
/// it holds offsets and bounds too, and mdspan readers take `extents` for a shape.)
class index_list {
 public:
  using value_type = index_t;
  using size_type = std::size_t;
  using iterator = index_t*;
  using const_iterator = const index_t*;
  static constexpr size_type inline_capacity = 4;

  constexpr index_list() = default;
  constexpr index_list(std::initializer_list<index_t> values) {
    for (index_t v : values) push_back(v);
  }
  constexpr index_list(size_type n, index_t value) {
    if (n <= inline_capacity) {
      for (size_type i = 0; i < n; ++i) small_[i] = value;
      size_ = n;
      return;
    }
    for (size_type i = 0; i < n; ++i) push_back(value);
  }
  template <class It, class = decltype(*std::declval<It>(), ++std::declval<It&>())>
  constexpr index_list(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<index_t>(*first));
  }
  constexpr index_list(const std::vector<index_t>& values)  // NOLINT: implicit on purpose
      : index_list(values.begin(), values.end()) {}
  constexpr index_list(const index_list&) = default;
  constexpr index_list& operator=(const index_list&) = default;
  // A moved-from list is empty: the implicit moves would leave size_ above the inline capacity
  // with an emptied heap vector, so reading or growing it again overran the heap.
  constexpr index_list(index_list&& o) noexcept : big_(std::move(o.big_)), size_(o.size_) {
    for (size_type i = 0; i < inline_capacity; ++i) small_[i] = o.small_[i];
    o.big_.clear();
    o.size_ = 0;
  }
  constexpr index_list& operator=(index_list&& o) noexcept {
    if (this != &o) {
      for (size_type i = 0; i < inline_capacity; ++i) small_[i] = o.small_[i];
      big_ = std::move(o.big_);
      size_ = o.size_;
      o.big_.clear();
      o.size_ = 0;
    }
    return *this;
  }

  constexpr size_type size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr index_t* data() { return size_ <= inline_capacity ? small_ : big_.data(); }
  constexpr const index_t* data() const {
    return size_ <= inline_capacity ? small_ : big_.data();
  }
  constexpr iterator begin() { return data(); }
  constexpr iterator end() { return data() + size_; }
  constexpr const_iterator begin() const { return data(); }
  constexpr const_iterator end() const { return data() + size_; }
  constexpr index_t& operator[](size_type i) { return data()[i]; }
  constexpr const index_t& operator[](size_type i) const { return data()[i]; }
  constexpr index_t& front() { return data()[0]; }
  constexpr const index_t& front() const { return data()[0]; }
  constexpr index_t& back() { return data()[size_ - 1]; }
  constexpr const index_t& back() const { return data()[size_ - 1]; }

  constexpr void push_back(index_t v) {
    if (size_ < inline_capacity) {
      small_[size_++] = v;
      return;
    }
    if (size_ == inline_capacity) {  // move to the heap
      big_.reserve(2 * inline_capacity);
      for (size_type i = 0; i < inline_capacity; ++i) big_.push_back(small_[i]);
    }
    big_.push_back(v);
    ++size_;
  }
  constexpr void pop_back() {
    --size_;
    if (size_ > inline_capacity) {
      big_.pop_back();
    } else if (size_ == inline_capacity) {  // back inline
      for (size_type i = 0; i < inline_capacity; ++i) small_[i] = big_[i];
      big_.clear();
    }
  }
  constexpr void clear() {
    big_.clear();
    size_ = 0;
  }
  constexpr void resize(size_type n, index_t value = 0) {
    while (size_ > n) pop_back();
    while (size_ < n) push_back(value);
  }
  constexpr void reserve(size_type) {}
  constexpr void assign(size_type n, index_t value) {
    clear();
    resize(n, value);
  }
  /// Replaces the entries with the `n` values at `p`.
  constexpr void assign_n(const index_t* p, size_type n) {
    if (n <= inline_capacity) {
      big_.clear();
      for (size_type i = 0; i < n; ++i) small_[i] = p[i];
      size_ = n;
      return;
    }
    clear();
    for (size_type i = 0; i < n; ++i) push_back(p[i]);
  }
  template <class It, class = decltype(*std::declval<It>(), ++std::declval<It&>())>
  constexpr void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(static_cast<index_t>(*first));
  }
  /// Inserts `v` before `pos`; returns an iterator to it.
  constexpr iterator insert(const_iterator pos, index_t v) {
    const auto at = static_cast<size_type>(pos - begin());
    push_back(v);
    for (size_type i = size_ - 1; i > at; --i) {
      const index_t tmp = (*this)[i];
      (*this)[i] = (*this)[i - 1];
      (*this)[i - 1] = tmp;
    }
    return begin() + at;
  }
  /// The entries as a std::vector.
  constexpr std::vector<index_t> to_vector() const { return {begin(), end()}; }

  friend constexpr bool operator==(const index_list& a, const index_list& b) {
    if (a.size_ != b.size_) return false;
    for (size_type i = 0; i < a.size_; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

 private:
  index_t small_[inline_capacity]{};
  std::vector<index_t> big_;
  size_type size_ = 0;
};

/// The former name of index_list.
using extents [[deprecated("reshard::extents is now reshard::index_list")]] = index_list;

namespace detail {
// A vector of n copies of v, built element by element: clang-14 with libstdc++-12 cannot
// constant-evaluate the sized constructors, resize() or assign() of vectors of trivial types.
template <class T>
constexpr std::vector<T> filled(std::size_t n, T v) {
  std::vector<T> out;
  if (!std::is_constant_evaluated()) {  // one fill instead of n push_backs
    out.assign(n, v);
    return out;
  }
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(v);
  return out;
}
}  // namespace detail

/// A box of a tensor: for each dim the half-open range [offset, offset + extent).
/// A 0-d tensor's box has no dims and holds one element.
struct box {
  index_list offset;
  index_list extent;

  friend constexpr bool operator==(const box&, const box&) = default;
};

/// Number of elements in `b`.
constexpr index_t volume(const box& b) {
  index_t v = 1;
  for (index_t e : b.extent) v *= e;
  return v;
}

/// Number of elements of a tensor of shape `s`.
constexpr index_t volume(const index_list& s) {
  index_t v = 1;
  for (index_t e : s) v *= e;
  return v;
}

/// The intersection of two boxes of the same rank (extent 0 where they do not meet).
// @post volume(intersect(a, b)) <= min(volume(a), volume(b))
constexpr box intersect(const box& a, const box& b) {
  RESHARD_EXPECTS(a.offset.size() == b.offset.size(), "intersect: boxes of different rank");
  box r;
  r.offset = index_list(a.offset.size(), 0);
  r.extent = index_list(a.offset.size(), 0);
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
constexpr void append_list(std::string& s, const index_list& v) {
  s += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    append_int(s, v[i]);
  }
  s += ']';
}
}  // namespace detail

/// The list notation used everywhere in reshard: `[2,4]`.
constexpr std::string to_string(const index_list& v) {
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
