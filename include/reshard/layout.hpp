// reshard/layout.hpp: how a tensor is laid out over a grid of devices.
//
// A layout is a device matrix (sizes of the device axes, row-major, last axis fastest), for each
// tensor dim the device axes that split it (outermost first), the global shape, the split
// convention for uneven sizes, optional optimizer sharding of dim 0, and the global id of its
// first rank (pipeline stage offset, or a mesh placed anywhere).
//
// Printed notation (MindSpore's right-counted axes):
//   dev[2,4] map[1,-1] shape[8,4]
//   dev[4,2,2] map[[2,1],0] shape[8,8] opt[step=2,size=4] split=chunk ranks[8..23]
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"

namespace reshard {

/// How a dim whose size does not divide evenly is split into slices.
enum class split_mode : std::uint8_t {
  divisible,  ///< MindSpore: every slice the same length; an uneven size is an error
  chunk,      ///< torch.chunk: slices of ceil(n/p); the last ones smaller or empty
  balanced,   ///< lengths differ by at most one, the longer slices first
};

constexpr const char* to_string(split_mode m) {
  switch (m) {
    case split_mode::divisible: return "divisible";
    case split_mode::chunk: return "chunk";
    case split_mode::balanced: return "balanced";
  }
  return "?";
}

/// Optimizer sharding (MindSpore opt_weight_shard_step / opt_weight_shard_size): dim 0 of each
/// rank's slice is split again into `size` parts among the ranks of its replica group; a rank
/// holds part (position in its replica group) % size. size 0 or 1: none; -1: the whole group.
struct opt_shard {
  index_t step = 0;
  index_t size = 0;
  friend constexpr bool operator==(const opt_shard&, const opt_shard&) = default;
};

/// A tensor's layout over a device grid. Device axes are counted from the LEFT here (axis 0 is
/// the outermost); MindSpore's right-counted tensor maps are converted by mindspore_layout().
struct layout {
  index_list dev_matrix;                     ///< sizes of the device axes
  std::vector<std::vector<int>> dim_axes;  ///< per tensor dim: splitting axes, outermost first
  index_list shape;                          ///< global shape
  split_mode mode = split_mode::divisible;
  std::vector<index_list> split_sizes;  ///< per dim: explicit slice lengths, or {} to use `mode`
  opt_shard opt{};
  index_t first_rank = 0;  ///< global id of local rank 0

  friend constexpr bool operator==(const layout&, const layout&) = default;
};

/// Number of ranks of the layout's device grid.
constexpr index_t num_ranks(const layout& l) {
  index_t n = 1;
  for (index_t d : l.dev_matrix) n *= d;
  return n;
}

/// Prints `l` in reshard's notation (see the top of this header).
constexpr std::string to_string(const layout& l) {
  std::string s = "dev";
  detail::append_list(s, l.dev_matrix);
  s += " map[";
  const auto nd = static_cast<index_t>(l.dev_matrix.size());  // index_t: axes may be any int
  for (std::size_t i = 0; i < l.dim_axes.size(); ++i) {
    if (i) s += ',';
    const auto& ax = l.dim_axes[i];
    if (ax.empty()) {
      s += "-1";
    } else if (ax.size() == 1) {
      detail::append_int(s, nd - 1 - ax[0]);
    } else {
      s += '[';
      for (std::size_t k = 0; k < ax.size(); ++k) {
        if (k) s += ',';
        detail::append_int(s, nd - 1 - ax[k]);
      }
      s += ']';
    }
  }
  s += "] shape";
  detail::append_list(s, l.shape);
  if (l.opt != opt_shard{}) {
    s += " opt[step=";
    detail::append_int(s, l.opt.step);
    s += ",size=";
    detail::append_int(s, l.opt.size);
    s += ']';
  }
  if (l.mode != split_mode::divisible) {
    s += " split=";
    s += to_string(l.mode);
  }
  for (std::size_t i = 0; i < l.split_sizes.size(); ++i) {
    if (l.split_sizes[i].empty()) continue;
    s += " sizes";
    detail::append_int(s, static_cast<index_t>(i));
    s += '=';
    detail::append_list(s, l.split_sizes[i]);
  }
  if (l.first_rank != 0) {
    s += " ranks[";
    detail::append_int(s, l.first_rank);
    s += "..";
    // the last rank; error messages also print invalid layouts, whose rank count may overflow
    index_t n = 1;
    for (index_t d : l.dev_matrix) n = n > 0 && d >= 1 && d <= (index_t{1} << 31) / n ? n * d : 0;
    if (n > 0 && l.first_rank <= std::numeric_limits<index_t>::max() - n)
      detail::append_int(s, l.first_rank + n - 1);
    else
      s += '?';
    s += ']';
  }
  return s;
}

namespace detail {

inline constexpr index_t max_ranks = index_t{1} << 31;     // devices of one layout, global ids
inline constexpr index_t max_elements = index_t{1} << 56;  // elements of one tensor

[[noreturn]] inline void layout_error(const layout& l, std::string_view what,
                                      const std::string& why) {
  report_error(std::string(what) + " " + to_string(l) + ": " + why);
}

// Slice boundaries of a length-n range split into `parts` slices: parts+1 monotone offsets.
constexpr index_list split_bounds(index_t n, index_t parts, split_mode mode) {
  index_list b(static_cast<std::size_t>(parts) + 1, 0);
  if (mode == split_mode::chunk) {
    const index_t c = (n + parts - 1) / parts;
    for (index_t k = 0; k <= parts; ++k) b[k] = k * c < n ? k * c : n;
  } else {  // balanced; divisible is balanced with no remainder
    const index_t q = n / parts, r = n % parts;
    for (index_t k = 0; k <= parts; ++k) b[k] = k * q + (k < r ? k : r);
  }
  return b;
}

constexpr index_t axes_product(const layout& l, const std::vector<int>& axes) {
  index_t p = 1;
  for (int a : axes) p *= l.dev_matrix[a];
  return p;
}

// Axes that split no dim: their coordinates enumerate a replica group.
constexpr std::vector<int> repeat_axes(const layout& l) {
  std::vector<char> used = filled<char>(l.dev_matrix.size(), 0);
  for (const auto& ax : l.dim_axes)
    for (int a : ax) used[a] = 1;
  std::vector<int> r;
  for (std::size_t a = 0; a < used.size(); ++a)
    if (!used[a]) r.push_back(static_cast<int>(a));
  return r;
}

// Number of parts the optimizer sharding splits dim 0 of a slice into (1 = none).
constexpr index_t opt_parts(const layout& l) {
  if (l.opt.size == 0 || l.opt.size == 1) return 1;
  if (l.opt.size == -1) return axes_product(l, repeat_axes(l));
  return l.opt.size;
}

}  // namespace detail

/// Checks that `l` is a valid layout; on failure throws reshard::error naming `what` (for
/// example "source layout"), the layout, the offending dim or axis and the reason.
constexpr void validate(const layout& l, std::string_view what = "layout") {
  const auto nd = l.dev_matrix.size();
  index_t n = 1;
  for (std::size_t a = 0; a < nd; ++a) {
    if (l.dev_matrix[a] < 1)
      detail::layout_error(l, what, "device matrix axis " + std::to_string(a) + " has size " +
                                        std::to_string(l.dev_matrix[a]) + " (must be >= 1)");
    if (l.dev_matrix[a] > detail::max_ranks / n)
      detail::layout_error(l, what, "device matrix has more than 2^31 devices");
    n *= l.dev_matrix[a];
  }
  if (l.dim_axes.size() != l.shape.size())
    detail::layout_error(l, what, "tensor map has " + std::to_string(l.dim_axes.size()) +
                                      " entries but the shape has " +
                                      std::to_string(l.shape.size()) + " dims");
  if (l.first_rank < 0 || l.first_rank > detail::max_ranks - n)
    detail::layout_error(l, what, "first rank " + std::to_string(l.first_rank) +
                                      " is out of range (global rank ids stop at 2^31)");
  std::vector<int> seen = detail::filled(nd, -1);
  index_t elements = 1;
  for (std::size_t i = 0; i < l.dim_axes.size(); ++i) {
    if (l.shape[i] < 0)
      detail::layout_error(l, what, "dim " + std::to_string(i) + " has negative size " +
                                        std::to_string(l.shape[i]));
    if (l.shape[i] > 0 && elements > detail::max_elements / l.shape[i])
      detail::layout_error(l, what, "the tensor has more than 2^56 elements");
    elements *= l.shape[i] > 0 ? l.shape[i] : 1;
    for (int a : l.dim_axes[i]) {
      if (a < 0 || static_cast<std::size_t>(a) >= nd)
        detail::layout_error(l, what, "dim " + std::to_string(i) + " names device axis " +
                                          std::to_string(static_cast<index_t>(nd) - 1 - a) +
                                          ", but the device matrix has " + std::to_string(nd) +
                                          " axes");
      if (seen[a] >= 0)
        detail::layout_error(l, what, "device axis " +
                                          std::to_string(static_cast<index_t>(nd) - 1 - a) +
                                          " splits both dim " + std::to_string(seen[a]) +
                                          " and dim " + std::to_string(i));
      seen[a] = static_cast<int>(i);
    }
  }
  if (!l.split_sizes.empty() && l.split_sizes.size() != l.shape.size())
    detail::layout_error(l, what, "split sizes are given for " +
                                      std::to_string(l.split_sizes.size()) +
                                      " dims but the shape has " + std::to_string(l.shape.size()));
  for (std::size_t i = 0; i < l.shape.size(); ++i) {
    const index_t p = detail::axes_product(l, l.dim_axes[i]);
    if (!l.split_sizes.empty() && !l.split_sizes[i].empty()) {
      const auto& s = l.split_sizes[i];
      if (static_cast<index_t>(s.size()) != p)
        detail::layout_error(l, what, "dim " + std::to_string(i) + " has " +
                                          std::to_string(s.size()) + " explicit slice sizes but " +
                                          std::to_string(p) + " slices");
      index_t sum = 0;
      for (index_t v : s) {
        if (v < 0)
          detail::layout_error(l, what, "dim " + std::to_string(i) + " has a negative slice size");
        if (v > l.shape[i] - sum)  // checked before adding: no overflow
          detail::layout_error(l, what, "dim " + std::to_string(i) +
                                            ": explicit slice sizes sum to more than the dim's "
                                            "size " + std::to_string(l.shape[i]));
        sum += v;
      }
      if (sum != l.shape[i])
        detail::layout_error(l, what, "dim " + std::to_string(i) + ": explicit slice sizes sum to " +
                                          std::to_string(sum) + ", not to the dim's size " +
                                          std::to_string(l.shape[i]));
    } else if (l.mode == split_mode::divisible && l.shape[i] % p != 0) {
      detail::layout_error(l, what, "dim " + std::to_string(i) + " of size " +
                                        std::to_string(l.shape[i]) + " does not divide into " +
                                        std::to_string(p) +
                                        " equal slices (divisible mode; use chunk or balanced "
                                        "for uneven shards)");
    }
  }
  if (l.opt.size < -1 || l.opt.step < 0)
    detail::layout_error(l, what, "optimizer sharding step " + std::to_string(l.opt.step) +
                                      " and size " + std::to_string(l.opt.size) +
                                      " must be >= 0 (size -1 = the whole replica group)");
  const index_t parts = detail::opt_parts(l);
  if (parts > 1) {
    const index_t group = detail::axes_product(l, detail::repeat_axes(l));
    if (l.shape.empty())
      detail::layout_error(l, what, "optimizer sharding needs a tensor with at least one dim");
    if (group % parts != 0)
      detail::layout_error(l, what, "optimizer sharding size " + std::to_string(parts) +
                                        " does not divide the replica group size " +
                                        std::to_string(group));
    if (l.mode == split_mode::divisible) {
      // every dim-0 slice must divide into `parts` equal parts. Without listing the slices: a
      // layout of 2^30 slices must not allocate 2^30 bounds just to be checked.
      const auto bad_slice = [&](std::size_t k, index_t rows) {
        detail::layout_error(l, what, "optimizer sharding splits dim 0 slices into " +
                                          std::to_string(parts) + " parts, but slice " +
                                          std::to_string(k) + " has " + std::to_string(rows) +
                                          " rows");
      };
      if (!l.split_sizes.empty() && !l.split_sizes[0].empty()) {
        for (std::size_t k = 0; k < l.split_sizes[0].size(); ++k)
          if (l.split_sizes[0][k] % parts != 0) bad_slice(k, l.split_sizes[0][k]);
      } else {  // balanced: the first r slices have q + 1 rows, the others q
        const index_t p0 = detail::axes_product(l, l.dim_axes[0]);
        const index_t q = l.shape[0] / p0, r = l.shape[0] % p0;
        if (r > 0 && (q + 1) % parts != 0) bad_slice(0, q + 1);
        if (q % parts != 0) bad_slice(static_cast<std::size_t>(r), q);
      }
    }
  }
}

namespace detail {

// Per-dim slice boundaries of a (valid) layout; dim 0 includes the optimizer-sharding parts:
// leaf index of dim 0 = slice * parts + part.
constexpr std::vector<index_list> dim_bounds(const layout& l) {
  std::vector<index_list> out(l.shape.size());
  for (std::size_t i = 0; i < l.shape.size(); ++i) {
    const index_t p = axes_product(l, l.dim_axes[i]);
    if (!l.split_sizes.empty() && !l.split_sizes[i].empty()) {
      out[i].push_back(0);
      for (index_t v : l.split_sizes[i]) out[i].push_back(out[i].back() + v);
    } else {
      out[i] = split_bounds(l.shape[i], p, l.mode);
    }
  }
  const index_t parts = opt_parts(l);
  if (parts > 1) {
    const split_mode sub = l.mode == split_mode::chunk ? split_mode::chunk : split_mode::balanced;
    index_list b{0};
    for (std::size_t k = 0; k + 1 < out[0].size(); ++k) {
      const index_list s = split_bounds(out[0][k + 1] - out[0][k], parts, sub);
      for (index_t j = 1; j <= parts; ++j) b.push_back(out[0][k] + s[j]);
    }
    out[0] = std::move(b);
  }
  return out;
}

// Leaf index per dim of local rank `r` (coordinates row-major, last axis fastest).
constexpr void leaf_of(const layout& l, index_t r, index_t parts, const std::vector<int>& rep,
                       index_list& coord, index_list& leaf) {
  const std::size_t nd = l.dev_matrix.size();
  if (coord.size() != nd) coord = index_list(nd, 0);
  for (std::size_t a = nd; a-- > 0;) {
    coord[a] = r % l.dev_matrix[a];
    r /= l.dev_matrix[a];
  }
  if (leaf.size() != l.shape.size()) leaf = index_list(l.shape.size(), 0);
  for (std::size_t i = 0; i < l.shape.size(); ++i) {
    index_t k = 0;
    for (int a : l.dim_axes[i]) k = k * l.dev_matrix[a] + coord[a];
    leaf[i] = k;
  }
  if (parts > 1) {
    index_t pos = 0;
    for (int a : rep) pos = pos * l.dev_matrix[a] + coord[a];
    leaf[0] = leaf[0] * parts + pos % parts;
  }
}

constexpr void expect_rank(const layout& l, index_t rank, const char* op) {
  if (rank < l.first_rank || rank >= l.first_rank + num_ranks(l))
    report_error(std::string(op) + ": rank " + std::to_string(rank) + " is not a rank of " +
                 to_string(l));
}

}  // namespace detail

/// The box of the global tensor held by global rank `rank`.
// @post for every rank r of l: box_of(l, r) lies inside the tensor
constexpr box box_of(const layout& l, index_t rank) {
  validate(l);
  detail::expect_rank(l, rank, "box_of");
  const auto bounds = detail::dim_bounds(l);
  index_list coord, leaf;
  detail::leaf_of(l, rank - l.first_rank, detail::opt_parts(l), detail::repeat_axes(l), coord,
                  leaf);
  box b;
  for (std::size_t i = 0; i < leaf.size(); ++i) {
    b.offset.push_back(bounds[i][leaf[i]]);
    b.extent.push_back(bounds[i][leaf[i] + 1] - bounds[i][leaf[i]]);
  }
  return b;
}

/// The shape of the slice global rank `rank` holds.
constexpr index_list slice_shape(const layout& l, index_t rank) { return box_of(l, rank).extent; }

// ---------------------------------------------------------------------------------------------
// Builders: MindSpore tensor maps, DTensor placements, JAX partition specs, plain layouts.

/// One entry of a MindSpore tensor map: an axis counted from the right (-1 = unsplit), or a
/// tuple of axes (leftmost listed = outermost), e.g. {1, -1} or {{2, 1}, 0}.
/// A trivially copyable value (at most 8 axes in a tuple), so that braced tensor maps can be
/// used in constant expressions.
struct map_entry {
  static constexpr std::size_t max_axes = 8;
  index_t axis[max_axes]{};
  std::size_t count = 0;

  constexpr map_entry(index_t a) : axis{a}, count{1} {}  // NOLINT: implicit on purpose
  constexpr map_entry(std::initializer_list<index_t> tuple) {
    for (index_t a : tuple) push(a);
  }
  constexpr explicit map_entry(const std::vector<index_t>& tuple) {
    for (index_t a : tuple) push(a);
  }
  constexpr std::vector<index_t> axes() const { return {axis, axis + count}; }

 private:
  // Not a template: clang 14 cannot constant-evaluate a member template that a constructor
  // calls before the class is complete, which made tuple maps unusable in constant expressions.
  constexpr void push(index_t a) {
    if (count == max_axes)
      report_error("mindspore_layout: a tensor map tuple entry has more than 8 axes");
    axis[count++] = a;
  }
};
using tensor_map = std::vector<map_entry>;

struct mindspore_options {
  opt_shard opt{};
  index_t stage = 0;  ///< pipeline stage: the layout lives on ranks stage*n .. stage*n+n-1
  split_mode mode = split_mode::divisible;
  index_list param_split_shape{};  ///< explicit lengths of dim 0's slices (MindSpore manual split)
  std::string_view name = "mindspore_layout";  ///< what error messages call this layout
};

/// A layout in MindSpore's convention: `map[i]` names the device axis counted from the RIGHT end
/// of `dev` (-1 = unsplit), or a tuple of such axes.
constexpr layout mindspore_layout(index_list dev, const tensor_map& map, index_list shape,
                                  mindspore_options o = {}) {
  layout l;
  l.dev_matrix = std::move(dev);
  l.shape = std::move(shape);
  l.mode = o.mode;
  l.opt = o.opt;
  const auto nd = static_cast<index_t>(l.dev_matrix.size());
  std::size_t bad = map.size();  // the first entry naming an axis out of range, reported below
  index_t bad_axis = 0;
  for (std::size_t i = 0; i < map.size(); ++i) {
    std::vector<int> axes;
    const std::vector<index_t> e = map[i].axes();
    for (index_t m : e) {
      if (m == -1 && e.size() == 1) break;
      if ((m < 0 || m >= nd) && bad == map.size()) bad = i, bad_axis = m;
      // out-of-range axes are kept (clamped) so that the layout's notation shows them
      axes.push_back(static_cast<int>(nd - 1 - std::clamp<index_t>(m, -(1 << 20), 1 << 20)));
    }
    l.dim_axes.push_back(std::move(axes));
  }
  if (!o.param_split_shape.empty()) {
    l.split_sizes.assign(l.shape.size(), {});
    if (l.shape.empty())
      report_error(std::string(o.name) + ": param_split_shape given for a 0-d tensor");
    l.split_sizes[0] = std::move(o.param_split_shape);
  }
  if (bad < map.size())
    report_error(std::string(o.name) + " " + to_string(l) + ": tensor_map[" + std::to_string(bad) +
                 "] = " + std::to_string(bad_axis) + " is out of range for device matrix " +
                 to_string(l.dev_matrix) + " (valid: -1 or 0.." + std::to_string(nd - 1) + ")");
  validate(l, o.name);
  const index_t n = num_ranks(l);  // bounded by validate
  if (o.stage < 0 || o.stage > (detail::max_ranks - n) / n)
    report_error(std::string(o.name) + " " + to_string(l) + ": pipeline stage " +
                 std::to_string(o.stage) + " is out of range (global rank ids stop at 2^31)");
  l.first_rank = o.stage * n;
  return l;
}

/// The MindSpore tensor map of `l`, the inverse of mindspore_layout's: per tensor dim -1
/// (unsplit), the device axis counted from the right, or a tuple of such axes (leftmost =
/// outermost). Strategy files, the JSON layouts and the Python module all write it from here.
/// @post mindspore_layout(l.dev_matrix, mindspore_tensor_map(l), l.shape, {l.opt, stage}) == l
///       (for a layout of mindspore_layout, with its stage)
constexpr tensor_map mindspore_tensor_map(const layout& l) {
  const auto nd = static_cast<index_t>(l.dev_matrix.size());
  tensor_map map;
  map.reserve(l.dim_axes.size());
  for (const auto& axes : l.dim_axes) {
    if (axes.empty()) {
      map.emplace_back(index_t{-1});
    } else if (axes.size() == 1) {
      map.emplace_back(nd - 1 - axes[0]);
    } else {
      std::vector<index_t> tuple;
      for (int a : axes) tuple.push_back(nd - 1 - a);
      map.emplace_back(tuple);
    }
  }
  return map;
}

/// The unsplit layout on one device (MindSpore's "no strategy file"), at global rank `rank`.
constexpr layout full_layout(index_list shape, index_t rank = 0) {
  layout l;
  l.dev_matrix = {1};
  l.dim_axes.resize(shape.size());
  l.shape = std::move(shape);
  l.first_rank = rank;
  validate(l, "full_layout");
  return l;
}

/// DTensor-style placements, one per mesh axis.
struct shard {
  index_t dim;
  friend constexpr bool operator==(const shard&, const shard&) = default;
};
struct replicate {
  friend constexpr bool operator==(const replicate&, const replicate&) = default;
};
using placement = std::variant<shard, replicate>;

struct dtensor_options {
  /// Per tensor dim, the mesh axes sharding it, outermost first; {} (default) = mesh order.
  std::vector<std::vector<int>> shard_order{};
  split_mode mode = split_mode::chunk;  ///< DTensor pads like torch.chunk
  index_t first_rank = 0;
};

/// A layout from DTensor placements over `mesh` (sizes of the mesh axes, axis 0 outermost). With
/// several mesh axes on one dim, each axis splits the previous axis's chunk (DTensor's nesting).
constexpr layout dtensor_layout(index_list mesh, const std::vector<placement>& placements,
                                index_list shape, dtensor_options o = {}) {
  if (placements.size() != mesh.size())
    report_error("dtensor_layout: " + std::to_string(placements.size()) +
                 " placements for a mesh of " + std::to_string(mesh.size()) + " axes " +
                 to_string(mesh));
  layout l;
  l.dev_matrix = std::move(mesh);
  l.dim_axes.resize(shape.size());
  l.shape = std::move(shape);
  l.mode = o.mode;
  l.first_rank = o.first_rank;
  for (std::size_t a = 0; a < placements.size(); ++a) {
    if (const auto* s = std::get_if<shard>(&placements[a])) {
      if (s->dim < 0 || s->dim >= static_cast<index_t>(l.shape.size()))
        report_error("dtensor_layout: placement " + std::to_string(a) + " is Shard(" +
                     std::to_string(s->dim) + ") but the tensor has " +
                     std::to_string(l.shape.size()) + " dims");
      l.dim_axes[s->dim].push_back(static_cast<int>(a));
    }
  }
  if (!o.shard_order.empty()) {
    if (o.shard_order.size() != l.shape.size())
      report_error("dtensor_layout: shard_order has " + std::to_string(o.shard_order.size()) +
                   " entries for a tensor of " + std::to_string(l.shape.size()) + " dims");
    for (std::size_t d = 0; d < l.shape.size(); ++d) {
      auto want = l.dim_axes[d], got = o.shard_order[d];
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      if (want != got)
        report_error("dtensor_layout: shard_order for dim " + std::to_string(d) +
                     " does not list exactly the mesh axes that Shard(" + std::to_string(d) + ")");
      l.dim_axes[d] = o.shard_order[d];
    }
  }
  // Nested uneven splits (several axes on one dim) differ from one flat split: record sizes.
  if (l.mode != split_mode::divisible) {
    for (std::size_t d = 0; d < l.shape.size(); ++d) {
      if (l.dim_axes[d].size() < 2) continue;
      index_list b{0, l.shape[d]};
      for (int a : l.dim_axes[d]) {
        index_list nb{0};
        for (std::size_t k = 0; k + 1 < b.size(); ++k) {
          const index_list s = detail::split_bounds(b[k + 1] - b[k], l.dev_matrix[a], l.mode);
          for (std::size_t j = 1; j < s.size(); ++j) nb.push_back(b[k] + s[j]);
        }
        b = std::move(nb);
      }
      const index_list flat = detail::split_bounds(l.shape[d], static_cast<index_t>(b.size()) - 1,
                                                l.mode);
      if (b != flat) {
        l.split_sizes.resize(l.shape.size());
        for (std::size_t k = 0; k + 1 < b.size(); ++k) l.split_sizes[d].push_back(b[k + 1] - b[k]);
      }
    }
  }
  validate(l, "dtensor_layout");
  return l;
}

/// A named device mesh (JAX `Mesh`): axis names and sizes, axis 0 outermost.
struct named_mesh {
  std::vector<std::string> axis_names;
  index_list axis_sizes;
};
/// A JAX-style partition spec: per tensor dim, the mesh axis names splitting it ({} = None),
/// major axis first. Fewer entries than dims leave the trailing dims unsplit.
using partition_spec = std::vector<std::vector<std::string>>;

constexpr layout jax_layout(const named_mesh& mesh, const partition_spec& spec, index_list shape,
                            split_mode mode = split_mode::divisible, index_t first_rank = 0) {
  if (mesh.axis_names.size() != mesh.axis_sizes.size())
    report_error("jax_layout: mesh has " + std::to_string(mesh.axis_names.size()) + " names but " +
                 std::to_string(mesh.axis_sizes.size()) + " sizes");
  if (spec.size() > shape.size())
    report_error("jax_layout: partition spec has " + std::to_string(spec.size()) +
                 " entries for a tensor of " + std::to_string(shape.size()) + " dims");
  layout l;
  l.dev_matrix = mesh.axis_sizes;
  l.dim_axes.resize(shape.size());
  l.shape = std::move(shape);
  l.mode = mode;
  l.first_rank = first_rank;
  for (std::size_t d = 0; d < spec.size(); ++d) {
    for (const auto& name : spec[d]) {
      std::size_t a = 0;
      while (a < mesh.axis_names.size() && mesh.axis_names[a] != name) ++a;
      if (a == mesh.axis_names.size())
        report_error("jax_layout: partition spec dim " + std::to_string(d) + " names mesh axis '" +
                     name + "', which the mesh does not have");
      l.dim_axes[d].push_back(static_cast<int>(a));
    }
  }
  validate(l, "jax_layout");
  return l;
}

}  // namespace reshard
