// fuzz/reference.hpp: the differential check of plan_convert.
//
// For two layouts A and B of one small tensor: plan(A, B) must throw reshard::error exactly when
// A or B is invalid or their shapes differ. Otherwise the plan's laws must hold, and converting
// the shards of a full tensor x under A must give, rank by rank, the reference "split x by B":
// each target rank's box of x cut out element by element (no plan, no copy jobs). split(x, B)
// and merge(B, shards) are checked against the same reference.
#pragma once

#include "check.hpp"
#include "decode.hpp"

#include <reshard/convert.hpp>
#include <reshard/layout.hpp>
#include <reshard/plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace reshard_fuzz {

inline bool is_valid(const reshard::layout& l) {
  try {
    reshard::validate(l);
    return true;
  } catch (const reshard::error&) {
    return false;
  }
}

/// The elements of box `b` of the row-major tensor `full` of `shape`, row-major.
inline std::vector<std::byte> cut(std::span<const std::byte> full, const reshard::index_list& shape,
                                  const reshard::box& b, std::size_t elem) {
  const std::size_t n = shape.size();
  std::vector<std::byte> out(static_cast<std::size_t>(reshard::volume(b)) * elem);
  if (out.empty()) return out;
  std::vector<reshard::index_t> idx(n, 0);
  for (std::size_t at = 0; at < out.size(); at += elem) {
    reshard::index_t flat = 0;
    for (std::size_t i = 0; i < n; ++i) flat = flat * shape[i] + b.offset[i] + idx[i];
    std::memcpy(out.data() + at, full.data() + flat * static_cast<reshard::index_t>(elem), elem);
    for (std::size_t i = n; i-- > 0;)
      if (++idx[i] < b.extent[i]) break;
      else idx[i] = 0;
  }
  return out;
}

inline bool inside(const reshard::box& inner, const reshard::box& outer) {
  if (inner.offset.size() != outer.offset.size()) return false;
  for (std::size_t i = 0; i < inner.offset.size(); ++i)
    if (inner.offset[i] < outer.offset[i] ||
        inner.offset[i] + inner.extent[i] > outer.offset[i] + outer.extent[i])
      return false;
  return true;
}

inline void check_plan_convert(const layout_pair& in) {
  using namespace reshard;
  const layout &a = in.a, &b = in.b;
  const std::size_t elem = in.element_bytes;
  const bool expect_ok = is_valid(a) && is_valid(b) && a.shape == b.shape;
  for (const layout* l : {&a, &b}) {  // the other entry points refuse an invalid layout too
    if (is_valid(*l)) continue;
    bool refused = false;
    try {
      merge(*l, {}, nullptr, elem);
    } catch (const error&) {
      refused = true;
    }
    FUZZ_CHECK(refused);
  }
  transfer_plan p;
  try {
    p = plan(a, b);
  } catch (const error&) {
    FUZZ_CHECK(!expect_ok);
    return;
  }
  FUZZ_CHECK(expect_ok);

  // the laws of plan.hpp
  const index_t ra = num_ranks(a), rb = num_ranks(b);
  std::vector<index_t> received(static_cast<std::size_t>(rb), 0);
  std::set<std::pair<index_t, index_t>> pairs;
  for (const transfer& t : p.transfers) {
    FUZZ_CHECK(t.src >= a.first_rank && t.src < a.first_rank + ra);
    FUZZ_CHECK(t.dst >= b.first_rank && t.dst < b.first_rank + rb);
    FUZZ_CHECK(volume(t.where) > 0);
    FUZZ_CHECK(inside(t.where, box_of(a, t.src)) && inside(t.where, box_of(b, t.dst)));
    FUZZ_CHECK(pairs.emplace(t.src, t.dst).second);
    received[static_cast<std::size_t>(t.dst - b.first_rank)] += volume(t.where);
  }
  for (index_t r = 0; r < rb; ++r) {
    const index_t t = b.first_rank + r;
    FUZZ_CHECK(received[static_cast<std::size_t>(r)] == volume(box_of(b, t)));
    const auto sources = rank_list(a, b, t);
    FUZZ_CHECK(std::is_sorted(sources.begin(), sources.end()));
    FUZZ_CHECK(static_cast<std::size_t>(std::count_if(p.transfers.begin(), p.transfers.end(),
                                                      [&](const transfer& x) { return x.dst == t; })) ==
               sources.size());
  }
  const plan_cost c = p.cost(static_cast<index_t>(elem));
  FUZZ_CHECK(c.cross_bytes == c.lower_bound_bytes);
  index_t covered = 0;
  for (const region& g : regions(a)) covered += volume(g.where);
  FUZZ_CHECK(covered == volume(a.shape));

  // convert against the reference, when the tensor is small
  if (volume(a.shape) > max_volume || ra > max_ranks || rb > max_ranks) return;
  std::vector<std::byte> x(static_cast<std::size_t>(volume(a.shape)) * elem);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::byte(static_cast<unsigned char>(i * 131 + i / 251));
  std::vector<std::vector<std::byte>> src, dst, want;
  for (index_t r = 0; r < ra; ++r) src.push_back(cut(x, a.shape, box_of(a, a.first_rank + r), elem));
  for (index_t r = 0; r < rb; ++r) {
    want.push_back(cut(x, b.shape, box_of(b, b.first_rank + r), elem));
    dst.emplace_back(want.back().size(), std::byte{0xA5});
  }
  std::vector<const std::byte*> sp;
  std::vector<std::byte*> dp;
  for (auto& s : src) sp.push_back(s.data());
  for (auto& d : dst) dp.push_back(d.data());
  convert(p, std::span<const std::byte* const>(sp), std::span<std::byte* const>(dp), elem);
  FUZZ_CHECK(dst == want);

  for (auto& d : dst) std::fill(d.begin(), d.end(), std::byte{0x5A});
  split(b, x.data(), std::span<std::byte* const>(dp), elem);
  FUZZ_CHECK(dst == want);

  std::vector<std::byte> merged(x.size(), std::byte{0x3C});
  std::vector<const std::byte*> cdp(dp.begin(), dp.end());
  merge(b, std::span<const std::byte* const>(cdp), merged.data(), elem);
  FUZZ_CHECK(merged == x);
}

}  // namespace reshard_fuzz
