// verify/gen/layouts.hpp: RapidCheck generators of valid reshard layouts, biased toward edge cases.
//
// Every generator builds its value by construction (never by filtering), so shrinking keeps it
// valid: device counts 1..64 factored over 1-4 axes (size-1 axes included), 0-d to 4-d shapes
// (size-1 and size-0 dims sometimes), replication (unused axes), tuple maps, optimizer sharding
// (a size dividing the replica group, or -1), uneven chunk/balanced splits, explicit split sizes
// and first_rank offsets (pipeline stages, meshes placed anywhere). Choices shrink toward the
// plainest option: fewer axes, replication, divisible mode, no optimizer sharding, rank 0.
//
// Failures print layouts in reshard's notation (showValue / PrintTo below, found by ADL).
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <utility>
#include <vector>

#include "reshard.hpp"

namespace reshard {
// Printers for RapidCheck (showValue) and GoogleTest (PrintTo), in reshard's notation.
inline void showValue(const layout& l, std::ostream& os) { os << to_string(l); }
inline void showValue(const box& b, std::ostream& os) { os << to_string(b); }
inline void showValue(const index_list& e, std::ostream& os) { os << to_string(e); }
inline void showValue(const transfer& t, std::ostream& os) {
  os << t.src << "->" << t.dst << ' ' << to_string(t.where);
}
inline void PrintTo(const layout& l, std::ostream* os) { *os << to_string(l); }
inline void PrintTo(const box& b, std::ostream* os) { *os << to_string(b); }
inline void PrintTo(const index_list& e, std::ostream* os) { *os << to_string(e); }
inline void PrintTo(const transfer& t, std::ostream* os) { showValue(t, *os); }
inline void PrintTo(const plan_cost& c, std::ostream* os) {
  *os << "{cross " << c.cross_bytes << ", local " << c.local_bytes << ", lower bound "
      << c.lower_bound_bytes << ", messages " << c.messages << ", max sent " << c.max_sent_bytes
      << ", mean sent " << c.mean_sent_bytes << "}";
}
}  // namespace reshard

namespace reshard::verify {

/// Knobs of the layout generators. The defaults give every edge case the suite cares about.
struct gen_options {
  index_t max_ranks = 64;      ///< device count 1..max_ranks
  index_t max_volume = 4096;   ///< elements of the global tensor (keeps properties fast)
  int max_dims = 4;            ///< tensor rank 0..max_dims
  bool zero_dims = true;       ///< dims of size 0 sometimes
  bool tuples = true;          ///< several device axes on one dim
  bool opt = true;             ///< optimizer sharding
  bool explicit_sizes = true;  ///< per-dim explicit split sizes (MindSpore param_split_shape)
  bool offsets = true;         ///< first_rank != 0 (stages, meshes placed anywhere)
  bool divisible = true, chunk = true, balanced = true;  ///< split modes to draw from
};

namespace detail {

// Uniform in [lo, hi] whatever RapidCheck's size; shrinks toward lo.
template <class T>
rc::Gen<T> uniform(T lo, T hi) {
  return rc::Gen<T>([=](const rc::Random& random, int) {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    const T v = static_cast<T>(lo + static_cast<T>(rc::Random(random).next() % span));
    return rc::shrinkable::shrinkRecur(v, [=](T x) { return rc::shrink::towards<T>(x, lo); });
  });
}

// Index i with probability w[i] / sum(w); shrinks toward 0, so list the plainest choice first.
inline std::size_t pick(const std::vector<std::size_t>& w) {
  const std::size_t total = std::accumulate(w.begin(), w.end(), std::size_t{0});
  std::size_t u = *uniform<std::size_t>(0, total - 1);
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u < w[i]) return i;
    u -= w[i];
  }
  return w.size() - 1;
}

// true with probability num/den; shrinks toward false.
inline bool chance(std::size_t num, std::size_t den) { return pick({den - num, num}) == 1; }

// An element of `v` (a non-empty std::vector or index_list), shrinking toward v[0].
template <class Container>
auto one_of(const Container& v) {
  return v[*uniform<std::size_t>(0, v.size() - 1)];
}

inline std::vector<index_t> prime_factors(index_t n) {
  std::vector<index_t> f;
  for (index_t p = 2; p * p <= n; ++p)
    while (n % p == 0) f.push_back(p), n /= p;
  if (n > 1) f.push_back(n);
  return f;
}

inline index_t product_of(const layout& l, const std::vector<int>& axes) {
  index_t p = 1;
  for (int a : axes) p *= l.dev_matrix[static_cast<std::size_t>(a)];
  return p;
}

// Largest r with r^k <= n (k >= 1).
inline index_t int_root(index_t n, int k) {
  index_t r = 1;
  while (true) {
    index_t p = 1;
    for (int i = 0; i < k; ++i) p *= r + 1;
    if (p > n) return r;
    ++r;
  }
}

}  // namespace detail

/// Device counts 1..max: small and awkward counts (primes, 6, 12, ...) more often than others.
inline rc::Gen<index_t> rank_counts(index_t max = 64) {
  return rc::gen::exec([max] {
    std::vector<index_t> nice;
    for (index_t v : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64})
      if (v <= max) nice.push_back(v);
    return detail::chance(3, 8) ? *detail::uniform<index_t>(1, max) : detail::one_of(nice);
  });
}

/// Device matrices of exactly `n` devices over 1-4 axes; axes of size 1 are common; a single
/// device sometimes has no axes at all.
inline rc::Gen<index_list> dev_matrices(index_t n) {
  return rc::gen::exec([n] {
    if (n == 1 && detail::chance(1, 8)) return index_list{};  // no axes at all: one device
    const std::size_t axes = 1 + detail::pick({3, 4, 3, 2});
    index_list dev(axes, 1);
    for (index_t p : detail::prime_factors(n)) dev[*detail::uniform<std::size_t>(0, axes - 1)] *= p;
    return dev;
  });
}

/// One dim's size, at most `cap`: 1, 0, sizes with many divisors, or anything.
inline rc::Gen<index_t> dim_sizes(index_t cap, bool zero = true) {
  return rc::gen::exec([cap, zero] {
    std::vector<index_t> composite;
    for (index_t v : {2,   4,   6,   8,   12,  16,  24,  30,  32,  36,  48,  60,   64,   72,  96,
                      120, 128, 144, 180, 240, 256, 360, 480, 512, 720, 840, 1024, 2048, 4096})
      if (v <= cap) composite.push_back(v);
    switch (detail::pick({3, zero ? 1u : 0u, composite.empty() ? 0u : 6u, 3})) {
      case 0:
        return index_t{1};
      case 1:
        return index_t{0};
      case 2:
        return detail::one_of(composite);
      default:
        return *detail::uniform<index_t>(1, cap);
    }
  });
}

/// Tensor shapes of 0 to max_dims dims and at most max_volume elements.
inline rc::Gen<index_list> shapes(gen_options o = {}) {
  return rc::gen::exec([o] {
    std::vector<std::size_t> w{1, 3, 4, 3, 2};
    w.resize(static_cast<std::size_t>(o.max_dims) + 1);
    const std::size_t nd = detail::pick(w);
    index_list s;
    index_t budget = o.max_volume;
    const bool zero = o.zero_dims && detail::chance(1, 4);  // size-0 dims in ~5% of shapes
    for (std::size_t i = 0; i < nd; ++i) {
      // about budget^(1/dims left) each, up to 4 times that, so one dim may dominate
      const int left = static_cast<int>(nd - i);
      const index_t cap =
          std::max<index_t>(1, std::min(budget, 4 * detail::int_root(budget, left)));
      s.push_back(*dim_sizes(cap, zero));
      if (s.back() > 0) budget /= s.back();
    }
    return s;
  });
}

/// Valid layouts of a tensor of shape `shape` over `ranks` devices (0 = draw the count).
inline rc::Gen<layout> layouts_of(index_list shape, gen_options o = {}, index_t ranks = 0) {
  return rc::gen::exec([shape, o, ranks] {
    layout l;
    const index_t n = ranks > 0 ? ranks : *rank_counts(o.max_ranks);
    l.dev_matrix = *dev_matrices(n);
    l.shape = shape;
    const std::size_t nd = shape.size(), naxes = l.dev_matrix.size();
    l.dim_axes.assign(nd, {});
    std::vector<split_mode> modes;
    std::vector<std::size_t> mode_w;
    if (o.divisible) modes.push_back(split_mode::divisible), mode_w.push_back(5);
    if (o.chunk) modes.push_back(split_mode::chunk), mode_w.push_back(3);
    if (o.balanced) modes.push_back(split_mode::balanced), mode_w.push_back(2);
    l.mode = modes[detail::pick(mode_w)];
    const bool divisible = l.mode == split_mode::divisible;

    // Place the device axes in a random order: each one replicates (unused) or splits a dim,
    // at a random position of that dim's tuple.
    std::vector<int> order(naxes);
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t k = naxes; k > 1; --k)
      std::swap(order[k - 1], order[*detail::uniform<std::size_t>(0, k - 1)]);
    std::vector<bool> expl(nd, false);  // dims that get explicit split sizes
    for (int a : order) {
      if (nd == 0 || !detail::chance(7, 10)) continue;
      const index_t size = l.dev_matrix[static_cast<std::size_t>(a)];
      const std::size_t want = *detail::uniform<std::size_t>(0, nd - 1);
      auto fits = [&](std::size_t d) {
        if (!o.tuples && !l.dim_axes[d].empty()) return false;
        if (!divisible || expl[d]) return true;
        return shape[d] % (detail::product_of(l, l.dim_axes[d]) * size) == 0;
      };
      std::size_t d = nd;
      for (std::size_t k = 0; k < nd && d == nd; ++k)
        if (fits((want + k) % nd)) d = (want + k) % nd;
      if (d == nd) {
        // nowhere to put it evenly: an uneven MindSpore split with explicit sizes, or replicate
        if (!o.explicit_sizes || !(o.tuples || l.dim_axes[want].empty()) || !detail::chance(1, 3))
          continue;
        d = want;
        expl[d] = true;
      }
      auto& ax = l.dim_axes[d];
      ax.insert(
          ax.begin() + static_cast<std::ptrdiff_t>(*detail::uniform<std::size_t>(0, ax.size())), a);
    }

    // Explicit slice lengths: a random composition of the dim's size into as many slices.
    for (std::size_t d = 0; d < nd; ++d) {
      if (!expl[d] && !(o.explicit_sizes && detail::chance(1, 10))) continue;
      const index_t p = detail::product_of(l, l.dim_axes[d]);
      index_list cuts{0};
      for (index_t k = 0; k + 1 < p; ++k) cuts.push_back(*detail::uniform<index_t>(0, shape[d]));
      cuts.push_back(shape[d]);
      std::sort(cuts.begin(), cuts.end());
      l.split_sizes.resize(nd);
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
        l.split_sizes[d].push_back(cuts[k + 1] - cuts[k]);
    }

    // Optimizer sharding: a size dividing the replica group (and, in divisible mode, every
    // dim-0 slice), or -1 for the whole group; sometimes the no-op size 1.
    std::vector<int> rep;
    for (std::size_t a = 0; a < naxes; ++a) {
      bool used = false;
      for (const auto& ax : l.dim_axes)
        used = used || std::find(ax.begin(), ax.end(), static_cast<int>(a)) != ax.end();
      if (!used) rep.push_back(static_cast<int>(a));
    }
    const index_t group = detail::product_of(l, rep);
    if (o.opt && nd > 0 && detail::chance(1, 2)) {
      index_list lengths;  // dim-0 slice lengths
      if (!l.split_sizes.empty() && !l.split_sizes[0].empty()) {
        lengths = l.split_sizes[0];
      } else {
        const index_t p0 = detail::product_of(l, l.dim_axes[0]);
        lengths = index_list(static_cast<std::size_t>(p0), shape[0] / p0);  // exact when divisible
      }
      index_list sizes;
      for (index_t s = 2; s <= group; ++s) {
        if (group % s != 0) continue;
        bool ok = true;
        for (index_t len : lengths) ok = ok && (!divisible || len % s == 0);
        if (ok) sizes.push_back(s);
      }
      // step: the rank stride of the innermost repeat axis (MindSpore's opt_weight_shard_step)
      index_t step = 1;
      if (!rep.empty())
        for (std::size_t a = static_cast<std::size_t>(rep.back()) + 1; a < naxes; ++a)
          step *= l.dev_matrix[a];
      if (!sizes.empty()) {
        l.opt.size = detail::one_of(sizes);
        l.opt.step = step;
        if (l.opt.size == group && detail::chance(1, 2)) l.opt.size = -1;
      } else if (detail::chance(1, 4)) {
        l.opt = {step, 1};  // size 1: the same as none
      }
    }

    if (o.offsets) {
      switch (detail::pick({6, 2, 2})) {
        case 1:  // pipeline stage 1..3
          l.first_rank = n * *detail::uniform<index_t>(1, 3);
          break;
        case 2:  // a mesh placed anywhere
          l.first_rank = *detail::uniform<index_t>(0, 100);
          break;
        default:
          break;
      }
    }
    validate(l, "generated layout");  // a generator bug if this throws
    return l;
  });
}

/// Valid layouts of a generated shape.
inline rc::Gen<layout> layouts(gen_options o = {}) {
  return rc::gen::exec([o] { return *layouts_of(*shapes(o), o); });
}

/// Two layouts of one tensor with independent device counts M and N (often not dividing each
/// other: 8->3, 6->4, 5->7, ...).
struct layout_pair {
  layout src, dst;
};
inline void showValue(const layout_pair& p, std::ostream& os) {
  os << "src " << to_string(p.src) << "\n  dst " << to_string(p.dst);
}
inline void PrintTo(const layout_pair& p, std::ostream* os) { showValue(p, *os); }

inline rc::Gen<layout_pair> layout_pairs(gen_options o = {}) {
  return rc::gen::exec([o] {
    const index_list shape = *shapes(o);
    index_t m = 0, n = 0;
    if (detail::chance(1, 3)) {
      static const std::vector<std::pair<index_t, index_t>> awkward{
          {8, 3}, {6, 4},   {5, 7},   {3, 8}, {4, 6}, {7, 5},  {12, 8}, {2, 3},
          {9, 6}, {16, 12}, {64, 48}, {1, 7}, {7, 1}, {10, 4}, {48, 64}};
      const auto [a, b] = detail::one_of(awkward);
      if (a <= o.max_ranks && b <= o.max_ranks) m = a, n = b;
    }
    layout src = *layouts_of(shape, o, m);
    layout dst = detail::chance(1, 20) ? src : *layouts_of(shape, o, n);
    return layout_pair{std::move(src), std::move(dst)};
  });
}

/// Element sizes of the supported types: 1, 2, 4 or 8 bytes.
inline rc::Gen<std::size_t> element_sizes() {
  return rc::gen::exec([] { return std::size_t{1} << detail::pick({1, 1, 1, 1}); });
}

}  // namespace reshard::verify

namespace rc {
template <>
struct Arbitrary<reshard::layout> {
  static Gen<reshard::layout> arbitrary() { return reshard::verify::layouts(); }
};
template <>
struct Arbitrary<reshard::verify::layout_pair> {
  static Gen<reshard::verify::layout_pair> arbitrary() { return reshard::verify::layout_pairs(); }
};
}  // namespace rc
