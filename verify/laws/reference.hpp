// verify/laws/reference.hpp: an independent model of layouts, written from the definitions
// (docs/spec: MindSpore's layout semantics, torch.chunk, DTensor's nested sharding), sharing no
// code with include/reshard/. It is slow on purpose (replica groups by enumerating every rank)
// and only used to check the library.
#pragma once

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "reshard.hpp"

namespace reshard::laws {

/// Slice k of a length-n range cut into p slices, by the definition of each split mode.
inline std::pair<index_t, index_t> reference_slice(index_t n, index_t p, index_t k, split_mode m) {
  switch (m) {
    case split_mode::divisible: {  // MindSpore: shape / slices each, exact
      const index_t len = n / p;
      return {k * len, (k + 1) * len};
    }
    case split_mode::chunk: {  // torch.chunk: ceil(n / p) each, the tail short or empty
      const index_t c = (n + p - 1) / p;
      return {std::min(k * c, n), std::min((k + 1) * c, n)};
    }
    case split_mode::balanced: {  // lengths differ by at most one, longer slices first
      const index_t q = n / p, r = n % p;
      const index_t lo = k * q + std::min(k, r);
      return {lo, lo + q + (k < r ? 1 : 0)};
    }
  }
  return {0, 0};
}

/// Row-major device coordinate of local rank r, last axis fastest.
inline index_list reference_coord(const index_list& dev, index_t r) {
  index_list c(dev.size(), 0);
  for (std::size_t a = dev.size(); a-- > 0;) {
    c[a] = r % dev[a];
    r /= dev[a];
  }
  return c;
}

/// The box each local rank of `l` holds, from the definitions:
///  * slice index of dim i = sum_k coord(axis_k) * prod(sizes of the axes listed after k);
///  * the slice is cut by `l.mode`, or by the dim's explicit sizes;
///  * optimizer sharding: dim 0 of the slice is cut again into `parts` pieces (chunk in chunk
///    mode, balanced otherwise, which is exact in divisible mode); a rank takes piece
///    (its position among the ranks holding the same slice, ascending) % parts.
inline std::vector<box> reference_boxes(const layout& l) {
  index_t ranks = 1;
  for (index_t d : l.dev_matrix) ranks *= d;
  const std::size_t nd = l.shape.size();
  std::vector<bool> used(l.dev_matrix.size(), false);
  for (const auto& ax : l.dim_axes)
    for (int a : ax) used[static_cast<std::size_t>(a)] = true;
  std::vector<index_list> coords;
  for (index_t r = 0; r < ranks; ++r) coords.push_back(reference_coord(l.dev_matrix, r));

  std::vector<box> out;
  for (index_t r = 0; r < ranks; ++r) {
    const index_list& c = coords[static_cast<std::size_t>(r)];
    box b;
    for (std::size_t i = 0; i < nd; ++i) {
      const auto& axes = l.dim_axes[i];
      index_t k = 0, p = 1;
      for (std::size_t j = 0; j < axes.size(); ++j) {
        index_t after = 1;
        for (std::size_t q = j + 1; q < axes.size(); ++q)
          after *= l.dev_matrix[static_cast<std::size_t>(axes[q])];
        k += c[static_cast<std::size_t>(axes[j])] * after;
        p *= l.dev_matrix[static_cast<std::size_t>(axes[j])];
      }
      index_t lo = 0, hi = 0;
      if (!l.split_sizes.empty() && !l.split_sizes[i].empty()) {
        for (index_t q = 0; q < k; ++q) lo += l.split_sizes[i][static_cast<std::size_t>(q)];
        hi = lo + l.split_sizes[i][static_cast<std::size_t>(k)];
      } else {
        std::tie(lo, hi) = reference_slice(l.shape[i], p, k, l.mode);
      }
      b.offset.push_back(lo);
      b.extent.push_back(hi - lo);
    }
    index_t group = 1;
    for (std::size_t a = 0; a < used.size(); ++a)
      if (!used[a]) group *= l.dev_matrix[a];
    const index_t parts = (l.opt.size == 0 || l.opt.size == 1) ? 1
                          : l.opt.size == -1                   ? group
                                                               : l.opt.size;
    if (parts > 1) {
      index_t pos = 0;  // ranks before r that agree with r on every used axis
      for (index_t q = 0; q < r; ++q) {
        bool same = true;
        for (std::size_t a = 0; a < used.size(); ++a)
          same = same && (!used[a] || coords[static_cast<std::size_t>(q)][a] == c[a]);
        pos += same ? 1 : 0;
      }
      const split_mode sub = l.mode == split_mode::chunk ? split_mode::chunk : split_mode::balanced;
      const auto [lo, hi] = reference_slice(b.extent[0], parts, pos % parts, sub);
      b.offset[0] += lo;
      b.extent[0] = hi - lo;
    }
    out.push_back(std::move(b));
  }
  return out;
}

/// torch DTensor's `_local_shard_size_and_offset`, verbatim: the piece of a length-`n` range
/// that chunk `k` of `p` gets, as (size, offset); an empty chunk sits at the end.
inline std::pair<index_t, index_t> torch_local_shard(index_t n, index_t p, index_t k) {
  const index_t full_chunk = (n + p - 1) / p;
  const index_t start = full_chunk * k;
  if (n < start) return {0, n};
  return {std::min(n, start + full_chunk) - start, start};
}

/// What DTensor computes for one tensor dim of length n sharded by several mesh axes (sizes
/// `mesh`, in the order they apply, coordinates `coord`): chunk, then chunk the chunk, ...
/// Returns [lo, hi).
inline std::pair<index_t, index_t> torch_nested_chunk(index_t n, const index_list& mesh,
                                                      const index_list& coord) {
  index_t offset = 0, size = n;
  for (std::size_t j = 0; j < mesh.size(); ++j) {
    const auto [s, o] = torch_local_shard(size, mesh[j], coord[j]);
    offset += o;
    size = s;
  }
  return {offset, offset + size};
}

}  // namespace reshard::laws
