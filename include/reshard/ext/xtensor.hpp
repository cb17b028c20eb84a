// reshard/ext/xtensor.hpp: split, merge and convert xtensor containers (opt-in: needs xtensor).
//
// Shards are row-major xtensor containers whose shape is the rank's box extent: xt::xarray,
// xt::xtensor, or adaptors over existing memory (xt::adapt). Containers that are not row-major
// are rejected with reshard::error rather than copied silently.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "reshard/convert.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

namespace detail {

template <class E>
void expect_row_major_shape(const E& e, const index_list& want, const std::string& what) {
  if (e.layout() != xt::layout_type::row_major)
    report_error(what + " is not a row-major container");
  bool same = e.dimension() == want.size();
  for (std::size_t i = 0; same && i < want.size(); ++i)
    same = static_cast<index_t>(e.shape()[i]) == want[i];
  if (!same) {
    index_list got;
    for (std::size_t i = 0; i < e.dimension(); ++i) got.push_back(static_cast<index_t>(e.shape()[i]));
    report_error(what + " has shape " + to_string(got) + ", expected " + to_string(want));
  }
}

template <class T>
xt::xarray<T> empty_of(const index_list& shape) {
  std::vector<std::size_t> s(shape.begin(), shape.end());
  return xt::xarray<T>::from_shape(s);
}

}  // namespace detail

/// Executes `p` from source containers (one per local source rank) into target containers (one
/// per local target rank), all already shaped as their rank's box. Works with adaptors.
template <class Src, class Dst>
void convert_into(const transfer_plan& p, const std::vector<Src>& src, std::vector<Dst>& dst,
                  convert_options o = {}) {
  using T = typename Src::value_type;
  static_assert(std::is_same_v<T, typename Dst::value_type>,
                "convert_into: source and target containers hold different element types");
  if (src.size() != static_cast<std::size_t>(num_ranks(p.src)) ||
      dst.size() != static_cast<std::size_t>(num_ranks(p.dst)))
    report_error("convert_into: " + std::to_string(src.size()) + " source and " +
                 std::to_string(dst.size()) + " target containers for a plan from " +
                 to_string(p.src) + " to " + to_string(p.dst));
  std::vector<const std::byte*> s(src.size());
  std::vector<std::byte*> d(dst.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    const index_t r = p.src.first_rank + static_cast<index_t>(i);
    detail::expect_row_major_shape(src[i], box_of(p.src, r).extent,
                                   "convert_into: source shard of rank " + std::to_string(r));
    s[i] = reinterpret_cast<const std::byte*>(src[i].data());
  }
  for (std::size_t i = 0; i < dst.size(); ++i) {
    const index_t r = p.dst.first_rank + static_cast<index_t>(i);
    detail::expect_row_major_shape(dst[i], box_of(p.dst, r).extent,
                                   "convert_into: target shard of rank " + std::to_string(r));
    d[i] = reinterpret_cast<std::byte*>(dst[i].data());
  }
  convert(p, std::span<const std::byte* const>(s), std::span<std::byte* const>(d), sizeof(T), o);
}

/// Executes `p` on xt::xarray shards and returns the target shards.
// @post convert(plan(A, B), split(A, x)) == split(B, x)
template <class T>
std::vector<xt::xarray<T>> convert(const transfer_plan& p, const std::vector<xt::xarray<T>>& src,
                                   convert_options o = {}) {
  std::vector<xt::xarray<T>> dst;
  const index_t n = num_ranks(p.dst);
  dst.reserve(static_cast<std::size_t>(n));
  for (index_t r = 0; r < n; ++r)
    dst.push_back(detail::empty_of<T>(box_of(p.dst, p.dst.first_rank + r).extent));
  convert_into(p, src, dst, o);
  return dst;
}

/// The shards of `full` under layout `l`, one per local rank.
template <class T>
std::vector<xt::xarray<T>> split(const layout& l, const xt::xarray<T>& full,
                                 convert_options o = {}) {
  detail::expect_row_major_shape(full, l.shape, "split: the full tensor");
  std::vector<xt::xarray<T>> out;
  std::vector<std::byte*> d;
  const index_t n = num_ranks(l);
  out.reserve(static_cast<std::size_t>(n));
  for (index_t r = 0; r < n; ++r) {
    out.push_back(detail::empty_of<T>(box_of(l, l.first_rank + r).extent));
    d.push_back(reinterpret_cast<std::byte*>(out.back().data()));
  }
  split(l, reinterpret_cast<const std::byte*>(full.data()), std::span<std::byte* const>(d),
        sizeof(T), o);
  return out;
}

/// The full tensor from the shards of layout `l` (MindSpore merge_sliced_parameter).
template <class T>
xt::xarray<T> merge(const layout& l, const std::vector<xt::xarray<T>>& shards,
                    convert_options o = {}) {
  if (shards.size() != static_cast<std::size_t>(num_ranks(l)))
    report_error("merge: " + std::to_string(shards.size()) + " shards given for " + to_string(l) +
                 ", which has " + std::to_string(num_ranks(l)) + " ranks");
  std::vector<const std::byte*> s(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const index_t r = l.first_rank + static_cast<index_t>(i);
    detail::expect_row_major_shape(shards[i], box_of(l, r).extent,
                                   "merge: shard of rank " + std::to_string(r));
    s[i] = reinterpret_cast<const std::byte*>(shards[i].data());
  }
  xt::xarray<T> full = detail::empty_of<T>(l.shape);
  merge(l, std::span<const std::byte* const>(s), reinterpret_cast<std::byte*>(full.data()),
        sizeof(T), o);
  return full;
}

}  // namespace reshard
