// verify/laws/plan.hpp: laws of redistribution plans, rank lists and plan costs, checked
// through the public API only (box_of, regions, replica_group), never through plan internals.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "layout.hpp"
#include "reshard.hpp"

namespace reshard::laws {

inline std::string in(const layout& src, const layout& dst) {
  return " in plan " + to_string(src) + " -> " + to_string(dst);
}
inline std::string in(const transfer_plan& p) { return in(p.src, p.dst); }

inline std::string show(const transfer& x) {
  return std::to_string(x.src) + "->" + std::to_string(x.dst) + " " + to_string(x.where);
}

inline bool has_rank(const layout& l, index_t r) {
  return r >= l.first_rank && r < l.first_rank + num_ranks(l);
}

/// @post every target rank's box is covered exactly once by the transfers it receives (pieces
///       inside it, pairwise disjoint, volumes summing to its volume);
/// @post every transfer is non-empty and lies inside its source rank's and target rank's box;
/// @post each (source, target) pair appears at most once;
/// @post transfers are grouped by target rank, ascending.
inline std::string exact_cover(const transfer_plan& p) {
  const std::vector<box> sb = boxes(p.src), db = boxes(p.dst);
  std::vector<std::vector<const transfer*>> to(db.size());
  std::set<std::pair<index_t, index_t>> pairs;
  for (std::size_t i = 0; i < p.transfers.size(); ++i) {
    const transfer& x = p.transfers[i];
    if (!has_rank(p.src, x.src) || !has_rank(p.dst, x.dst))
      return "transfer " + show(x) + " names a rank outside the layouts" + in(p);
    if (volume(x.where) == 0) return "transfer " + show(x) + " is empty" + in(p);
    const box& s = sb[static_cast<std::size_t>(x.src - p.src.first_rank)];
    const box& d = db[static_cast<std::size_t>(x.dst - p.dst.first_rank)];
    if (!inside(x.where, s))
      return "transfer " + show(x) + " is not inside source rank's box " + to_string(s) + in(p);
    if (!inside(x.where, d))
      return "transfer " + show(x) + " is not inside target rank's box " + to_string(d) + in(p);
    if (!pairs.insert({x.src, x.dst}).second)
      return "pair " + std::to_string(x.src) + "->" + std::to_string(x.dst) + " appears twice" +
             in(p);
    if (i > 0 && p.transfers[i - 1].dst > x.dst)
      return "transfers are not grouped by ascending target (" + show(p.transfers[i - 1]) +
             " before " + show(x) + ")" + in(p);
    to[static_cast<std::size_t>(x.dst - p.dst.first_rank)].push_back(&x);
  }
  for (std::size_t t = 0; t < db.size(); ++t) {
    index_t got = 0;
    for (std::size_t i = 0; i < to[t].size(); ++i) {
      got += volume(to[t][i]->where);
      for (std::size_t j = 0; j < i; ++j)
        if (volume(intersect(to[t][i]->where, to[t][j]->where)) != 0)
          return "transfers " + show(*to[t][j]) + " and " + show(*to[t][i]) + " overlap" + in(p);
    }
    if (got != volume(db[t]))
      return "target rank " + std::to_string(p.dst.first_rank + static_cast<index_t>(t)) +
             " receives " + std::to_string(got) + " elements of its " +
             std::to_string(volume(db[t])) + " (box " + to_string(db[t]) + ")" + in(p);
  }
  return {};
}

/// @post a transfer with src == dst copies data that rank holds in the source layout;
/// @post a target rank that holds part of its box in the source copies exactly that part
///       locally, and receives none of it from another rank.
inline std::string local_where_held(const transfer_plan& p) {
  for (const transfer& x : p.transfers) {
    if (x.src == x.dst) {
      if (!has_rank(p.src, x.src) || !inside(x.where, box_of(p.src, x.src)))
        return "local transfer " + show(x) + " copies data its rank does not hold" + in(p);
    } else if (has_rank(p.src, x.dst) && volume(intersect(x.where, box_of(p.src, x.dst))) != 0) {
      return "transfer " + show(x) + " sends data the target already holds" + in(p);
    }
  }
  for (index_t t = p.dst.first_rank; t < p.dst.first_rank + num_ranks(p.dst); ++t) {
    if (!has_rank(p.src, t)) continue;
    const box held = intersect(box_of(p.src, t), box_of(p.dst, t));
    if (volume(held) == 0) continue;
    const bool found = std::any_of(p.transfers.begin(), p.transfers.end(), [&](const transfer& x) {
      return x.src == t && x.dst == t && x.where == held;
    });
    if (!found)
      return "rank " + std::to_string(t) + " holds " + to_string(held) +
             " in both layouts but does not copy it locally" + in(p);
  }
  return {};
}

/// The fewest elements any plan must move between ranks: each target lacks its box minus what
/// the same global rank holds in the source. Computed from box_of alone.
inline index_t lower_bound_elements(const layout& src, const layout& dst) {
  index_t lb = 0;
  for (index_t t = dst.first_rank; t < dst.first_rank + num_ranks(dst); ++t) {
    const box b = box_of(dst, t);
    lb += volume(b);
    if (has_rank(src, t)) lb -= volume(intersect(b, box_of(src, t)));
  }
  return lb;
}

/// @post cost(e): cross == lower bound (recomputed here) == lower_bound_bytes; local bytes,
///       messages, max and mean bytes sent agree with the transfers.
inline std::string cost_is_consistent(const transfer_plan& p, index_t elem) {
  const plan_cost c = p.cost(elem);
  const index_t lb = lower_bound_elements(p.src, p.dst) * elem;
  index_t cross = 0, local = 0, messages = 0, max_sent = 0;
  std::vector<index_t> sent(static_cast<std::size_t>(num_ranks(p.src)), 0);
  for (const transfer& x : p.transfers) {
    const index_t v = volume(x.where) * elem;
    if (x.src == x.dst) {
      local += v;
    } else {
      cross += v;
      ++messages;
      max_sent = std::max(max_sent, sent[static_cast<std::size_t>(x.src - p.src.first_rank)] += v);
    }
  }
  const auto num = [](index_t v) { return std::to_string(v); };
  if (c.cross_bytes != lb)
    return "cross bytes " + num(c.cross_bytes) + " != lower bound " + num(lb) + in(p);
  if (c.lower_bound_bytes != lb)
    return "cost().lower_bound_bytes " + num(c.lower_bound_bytes) + " != " + num(lb) + in(p);
  if (c.cross_bytes != cross) return "cost().cross_bytes disagrees with the transfers" + in(p);
  if (c.local_bytes != local)
    return "cost().local_bytes " + num(c.local_bytes) + " != " + num(local) + in(p);
  if (c.messages != messages)
    return "cost().messages " + num(c.messages) + " != " + num(messages) + in(p);
  if (c.max_sent_bytes != max_sent)
    return "cost().max_sent_bytes " + num(c.max_sent_bytes) + " != " + num(max_sent) + in(p);
  if (c.mean_sent_bytes != static_cast<double>(cross) / static_cast<double>(num_ranks(p.src)))
    return "cost().mean_sent_bytes is not cross bytes / source ranks" + in(p);
  index_t held = 0;
  for (const box& b : boxes(p.dst)) held += volume(b) * elem;
  if (local + cross != held) return "local + cross bytes != bytes the targets hold" + in(p);
  return {};
}

/// Load balance. Each source rank owns one region, so the senders of a region's pieces are its
/// replicas alone, and the planner gives each piece to the least-loaded replica: Graham's list
/// scheduling bound applies per region. For a region with g replicas sending S elements in
/// pieces of at most P: max load <= S/g + (1 - 1/g) P, i.e. g * max <= S + (g - 1) * P.
/// With pieces of equal size P this is max <= ceil(S / (g P)) * P, the optimum.
inline std::string load_within_graham_bound(const transfer_plan& p) {
  std::vector<index_t> load(static_cast<std::size_t>(num_ranks(p.src)), 0);
  std::vector<index_t> biggest(load.size(), 0);
  for (const transfer& x : p.transfers) {
    if (x.src == x.dst) continue;
    const auto s = static_cast<std::size_t>(x.src - p.src.first_rank);
    load[s] += volume(x.where);
    biggest[s] = std::max(biggest[s], volume(x.where));
  }
  for (const region& g : regions(p.src)) {
    const auto n = static_cast<index_t>(g.owners.size());
    index_t sum = 0, piece = 0, mx = 0;
    bool equal = true;
    index_t first_piece = -1;
    for (index_t r : g.owners) {
      const auto s = static_cast<std::size_t>(r - p.src.first_rank);
      sum += load[s];
      piece = std::max(piece, biggest[s]);
      mx = std::max(mx, load[s]);
    }
    for (const transfer& x : p.transfers) {
      if (x.src == x.dst || !std::binary_search(g.owners.begin(), g.owners.end(), x.src)) continue;
      if (first_piece < 0) first_piece = volume(x.where);
      equal = equal && volume(x.where) == first_piece;
    }
    if (n * mx > sum + (n - 1) * piece)
      return "replicas of region " + to_string(g.where) + " send up to " + std::to_string(mx) +
             " elements, above Graham's bound (" + std::to_string(n) + " replicas, " +
             std::to_string(sum) + " elements, pieces <= " + std::to_string(piece) + ")" + in(p);
    if (equal && piece > 0 && mx > (sum / piece + n - 1) / n * piece)
      return "replicas of region " + to_string(g.where) + " send up to " + std::to_string(mx) +
             " elements in equal pieces of " + std::to_string(piece) + ", above the optimum " +
             std::to_string((sum / piece + n - 1) / n * piece) + in(p);
  }
  return {};
}

/// @post rank_list(src, dst, t) is ascending, sufficient (its ranks' boxes in src cover t's box
///       in dst), minimal (every listed rank contributes, no two listed ranks hold the same
///       region) and has one rank per source region overlapping t's box; t lists itself when it
///       holds part of its box in src.
inline std::string rank_list_law(const layout& src, const layout& dst, index_t t,
                                 const std::vector<index_t>& list) {
  const std::string where = " for target rank " + std::to_string(t) + in(src, dst);
  const box tb = box_of(dst, t);
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!has_rank(src, list[i]))
      return "rank_list names " + std::to_string(list[i]) + ", not a source rank" + where;
    if (i > 0 && list[i - 1] >= list[i]) return "rank_list is not strictly ascending" + where;
    if (volume(intersect(box_of(src, list[i]), tb)) == 0)
      return "rank_list names " + std::to_string(list[i]) + ", which holds none of " +
             to_string(tb) + where;
    const std::vector<index_t> group = replica_group(src, list[i]);
    for (std::size_t j = 0; j < i; ++j)
      if (std::binary_search(group.begin(), group.end(), list[j]))
        return "rank_list names " + std::to_string(list[j]) + " and " + std::to_string(list[i]) +
               ", which hold the same data" + where;
  }
  // sufficient: mark every element of t's box that a listed rank holds
  std::vector<char> mark(static_cast<std::size_t>(volume(tb)), 0);
  for (index_t s : list) {
    const box piece = intersect(box_of(src, s), tb);
    const std::size_t n = piece.offset.size();
    index_list k(n, 0);
    for (index_t e = 0; e < volume(piece); ++e) {
      index_t flat = 0;
      for (std::size_t i = 0; i < n; ++i)
        flat = flat * tb.extent[i] + (piece.offset[i] - tb.offset[i] + k[i]);
      mark[static_cast<std::size_t>(flat)] = 1;
      for (std::size_t i = n; i-- > 0;) {
        if (++k[i] < piece.extent[i]) break;
        k[i] = 0;
      }
    }
  }
  if (std::count(mark.begin(), mark.end(), 1) != volume(tb))
    return "the boxes of rank_list do not cover " + to_string(tb) + where;
  std::size_t overlapping = 0;
  for (const region& g : regions(src)) overlapping += volume(intersect(g.where, tb)) != 0 ? 1 : 0;
  if (list.size() != overlapping)
    return "rank_list has " + std::to_string(list.size()) + " ranks but " +
           std::to_string(overlapping) + " source regions overlap " + to_string(tb) + where;
  if (has_rank(src, t) && volume(intersect(box_of(src, t), tb)) != 0 &&
      !std::binary_search(list.begin(), list.end(), t))
    return "rank_list does not name the target itself, which holds part of its box" + where;
  return {};
}

}  // namespace reshard::laws
