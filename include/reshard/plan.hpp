// reshard/plan.hpp: minimal redistribution plans between two layouts of one tensor.
//
// plan(src, dst) lists transfers (source rank, target rank, box) such that
//   @post every target rank's box is covered exactly once by the boxes it receives;
//   @post a transfer's box lies inside its source rank's box and its target rank's box;
//   @post a target that holds a piece in `src` (same global rank id) copies it locally;
//   @post cross-rank elements == lower bound == sum over targets of the elements they lack;
//   @post each (source, target) pair appears at most once (pieces are coalesced);
//   @post apply(plan(A, B), shards of x under A) == shards of x under B.
// Cost grows with the size of the plan (number of transfers), not with M * N: per dim, one merge
// of the two layouts' slice boundaries gives each target slice's overlapping source slices; the
// pieces of each distinct target region are then an odometer over those lists, found once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/partition.hpp"

namespace reshard {

/// One piece of data moving from a source rank to a target rank (global rank ids).
struct transfer {
  index_t src;
  index_t dst;
  box where;  ///< global tensor coordinates
  friend constexpr bool operator==(const transfer&, const transfer&) = default;
};

/// The cost of a plan in bytes, for a given element size.
struct plan_cost {
  index_t cross_bytes = 0;        ///< bytes that move between different ranks
  index_t local_bytes = 0;        ///< bytes a rank copies from its own source shard
  index_t lower_bound_bytes = 0;  ///< sum over targets of the bytes they do not already hold
  index_t messages = 0;           ///< cross-rank transfers
  index_t max_sent_bytes = 0;     ///< most bytes sent by one source rank
  double mean_sent_bytes = 0;     ///< cross bytes / number of source ranks
  friend constexpr bool operator==(const plan_cost&, const plan_cost&) = default;
};

/// A redistribution plan: the two layouts and the transfers, grouped by target rank.
struct transfer_plan {
  layout src;
  layout dst;
  std::vector<transfer> transfers;

  /// Elements that cross ranks, are copied locally, and the lower bound on crossing elements.
  constexpr plan_cost cost(index_t element_bytes = 1) const;
  friend constexpr bool operator==(const transfer_plan&, const transfer_plan&) = default;
};

namespace detail {

constexpr void expect_same_shape(const layout& src, const layout& dst, const char* op) {
  if (src.shape != dst.shape)
    report_error(std::string(op) + ": the layouts describe different tensors: source " +
                 to_string(src) + " has shape " + to_string(src.shape) + ", target " +
                 to_string(dst) + " has shape " + to_string(dst.shape));
}

// Elements of target rank t's box that t already holds in the source layout.
constexpr index_t already_held(const partition& s, const box& t_box, index_t t) {
  const index_t r = t - s.first_rank;
  if (r < 0 || r >= s.ranks) return 0;
  return volume(intersect(t_box, s.region_box(s.rank_region[r])));
}

}  // namespace detail

namespace detail {

// The overlaps of one dim's target leaves with its source leaves, from one merge of the two
// boundary lists: target leaf k meets the segments [first[k], first[k + 1]), in source order;
// segment j lies in source leaf leaf[j] and covers [lo[j], lo[j] + len[j]).
struct dim_overlaps {
  std::vector<index_t> first, leaf, lo, len;
};

constexpr dim_overlaps overlaps(const index_list& sb, const index_list& tb) {
  dim_overlaps o;
  const std::size_t ns = sb.size() - 1, nt = tb.size() - 1;
  o.first.reserve(nt + 1);
  const std::size_t guess = ns + nt;  // every segment ends at a source or a target boundary
  o.leaf.reserve(guess);
  o.lo.reserve(guess);
  o.len.reserve(guess);
  std::size_t s = 0;  // the source leaf holding the target leaf's start; only moves forward
  for (std::size_t k = 0; k < nt; ++k) {
    o.first.push_back(static_cast<index_t>(o.leaf.size()));
    const index_t a = tb[k], b = tb[k + 1];
    if (b <= a) continue;
    while (s + 1 < ns && sb[s + 1] <= a) ++s;
    for (std::size_t j = s; j < ns && sb[j] < b; ++j) {
      const index_t lo = sb[j] > a ? sb[j] : a;
      const index_t hi = sb[j + 1] < b ? sb[j + 1] : b;
      if (hi <= lo) continue;
      o.leaf.push_back(static_cast<index_t>(j));
      o.lo.push_back(lo);
      o.len.push_back(hi - lo);
    }
  }
  o.first.push_back(static_cast<index_t>(o.leaf.size()));
  return o;
}

// The least-loaded replica of each source region, as one tournament tree per region with
// several owners. Leaves are the region's owners in ascending rank order (padded to a power of
// two with unbeatable loads); each inner node holds the leaf that wins below it, the lighter one,
// the left one on a tie, i.e. the lowest rank. Taking the winner and adding to its load replays
// its path to the root: one load comparison a level.
struct sender_trees {
  std::vector<index_t> base;  // per region: first slot of its tree and loads
  std::vector<index_t> size;  // per region: leaves, a power of two (0: fewer than two owners)
  std::vector<index_t> load;  // per slot: the elements leaf `slot - base` sends so far
  std::vector<index_t> node;  // per slot: the winning leaf under node `slot - base` (1 = root)

  constexpr explicit sender_trees(const partition& g) {
    const auto regions = static_cast<std::size_t>(g.regions);
    base = filled<index_t>(regions, 0);
    size = filled<index_t>(regions, 0);
    index_t slots = 0;
    for (std::size_t k = 0; k < regions; ++k) {
      const index_t owners = g.owner_start[k + 1] - g.owner_start[k];
      if (owners < 2) continue;
      index_t p = 2;
      while (p < owners) p *= 2;
      base[k] = slots;
      size[k] = p;
      slots += 2 * p;
    }
    load = filled<index_t>(static_cast<std::size_t>(slots), 0);
    node = filled<index_t>(static_cast<std::size_t>(slots), 0);
    for (std::size_t k = 0; k < regions; ++k) {
      const index_t p = size[k];
      if (p == 0) continue;
      const index_t owners = g.owner_start[k + 1] - g.owner_start[k];
      index_t* l = load.data() + base[k];
      index_t* w = node.data() + base[k];
      for (index_t i = owners; i < p; ++i) l[i] = std::numeric_limits<index_t>::max();
      for (index_t i = 0; i < p; ++i) w[p + i] = i;
      for (index_t i = p - 1; i >= 1; --i) w[i] = w[2 * i];  // all loads 0: the leftmost wins
    }
  }

  // The position among region k's owners of the least-loaded one, after adding v to its load.
  constexpr index_t take(index_t k, index_t v) {
    const index_t p = size[static_cast<std::size_t>(k)];
    index_t* l = load.data() + base[static_cast<std::size_t>(k)];
    index_t* w = node.data() + base[static_cast<std::size_t>(k)];
    const index_t best = w[1];
    l[best] += v;
    // Up the path with the winner so far in registers: each level reads only the sibling's
    // winner, never a node this walk just wrote, and picks without a branch (which side wins is
    // data: a branch on it mispredicts half the time).
    index_t cur = best, cur_load = l[best];
    for (index_t i = p + best; i > 1; i /= 2) {
      const index_t sib = w[i ^ 1], sib_load = l[sib];
      const bool cur_right = (i & 1) != 0;  // then the sibling is left and wins ties
      const bool sib_wins = sib_load < cur_load || (cur_right && sib_load == cur_load);
      const index_t mask = -static_cast<index_t>(sib_wins);
      cur ^= (cur ^ sib) & mask;
      cur_load ^= (cur_load ^ sib_load) & mask;
      w[i / 2] = cur;
    }
    return best;
  }
};

}  // namespace detail

/// Which replica of a source region sends it to a target that lacks it. All policies give
/// minimal plans: the same pieces, every target covered exactly once, local copies where the
/// target holds a piece, cross-rank bytes at the lower bound. They differ in who sends.
enum class replica_policy : std::uint8_t {
  /// The least-loaded owner so far (fewest elements sent; the lowest rank on a tie), targets in
  /// rank order. Balances senders globally, so one rank's part depends on the whole plan.
  // @post max_sent <= max over regions of ceil(elements sent of the region / its replicas) +
  //       the largest piece (greedy balance)
  least_loaded,
  /// The owners of a region take turns over the targets that need it, in a fixed order (target
  /// regions in row-major order, then their owners ascending, holders skipped). Any rank can
  /// derive its own part alone, without deriving the rest (plan_for_rank, rank_list,
  /// rank_planner).
  // @post the targets served by one owner of a region differ in count by at most one
  round_robin,
  /// Each target reads a region it lacks from the owner of that region nearest to it in rank
  /// (on a tie, the upper if only the next target rank needs the region too, else the lower:
  /// neighbours that split a region read it from one owner), among the owners that are target
  /// ranks when there are any, so that a contiguous run of targets, which read their own ranks' files, reads few other files: a
  /// checkpoint transform split into runs of target ranks opens fewer distinct source files. Where that would have one owner of a region
  /// serve more than twice round robin's most (2 ceil(T / g) of the T targets that need the
  /// region from its g owners), the region is dealt round robin instead. Any rank can derive
  /// its own part alone, as with round_robin (deciding a region costs O(T log g)).
  // @post per region, the targets served by one owner <= 2 ceil(T / g)
  // @post per region, every target reads from an owner at the least rank distance (of two,
  //       the upper if only target rank t + 1 of t - 1 and t + 1 meets the region) among the owners that are target ranks (all owners if none is), or the
  //       region's senders are round_robin's
  // @post per region with the nearest owners, the sender does not decrease as the target rank
  //       grows: a contiguous run of targets reads from a contiguous run of the region's owners
  nearest,
};

/// One layout pair prepared for a per-rank replica policy (round_robin, the default, or
/// nearest): any rank's part of plan(src, dst, policy), each derived without the others.
///
/// Built tabulated (the default), it holds both partitions' tables and, per source region with
/// several owners, its holders and the turns before each overlapping target region: O(ranks +
/// region overlaps) to build, then O(pieces of the rank x log) per rank. Built arithmetic, it
/// holds only slice bounds and counts turns per question: O(slices) to build, O(pieces x
/// replicas) per rank. The answers are the same. With nearest, the tabulated build also decides
/// every region (O(region overlaps x replicas x log)); the arithmetic one decides a region per
/// question.
class rank_planner {
 public:
  /// @pre src and dst are valid layouts of the same shape; policy is not least_loaded (a
  ///      whole-plan policy: one rank's senders depend on all the others).
  constexpr rank_planner(const layout& src, const layout& dst,
                         partition::mode m = partition::mode::tabulated,
                         replica_policy policy = replica_policy::round_robin)
      : src_(src, m), dst_(dst, m), policy_(policy) {
    RESHARD_EXPECTS(policy != replica_policy::least_loaded,
                    "rank_planner: least_loaded is a whole-plan policy, not a per-rank one");
    if (m == partition::mode::tabulated) cache();
  }

  constexpr const partition& source() const { return src_; }
  constexpr const partition& target() const { return dst_; }
  constexpr replica_policy policy() const { return policy_; }

  /// Does region k's every target read it from its nearest owner (policy nearest, within the
  /// bound), rather than in turns?
  constexpr bool nearest_owners(index_t k) const {
    if (policy_ != replica_policy::nearest || src_.replicas < 2) return false;
    if (!near_.empty()) return near_[static_cast<std::size_t>(k)] != 0;
    return nearest_fits(k);
  }

  /// Appends the transfers target rank t receives (local copies included), in source-region
  /// order; nothing when t is not a target rank.
  constexpr void receives(index_t t, std::vector<transfer>& out) const {
    if (!dst_.has_rank(t)) return;
    std::vector<index_t> buf;
    const box mine = dst_.box_of_rank(t);
    const index_t held = src_.has_rank(t) ? src_.region_of(t) : -1;  // t's own source region
    for_each_piece(src_, mine, [&](index_t k, const box& b) {
      out.push_back({k == held ? t : sender(k, t, buf), t, b});
    });
  }

  /// Appends the transfers source rank s sends to other ranks, in the turn order of its region;
  /// nothing when s is not a source rank.
  constexpr void sends(index_t s, std::vector<transfer>& out) const {
    if (!src_.has_rank(s)) return;
    std::vector<index_t> buf;
    std::vector<std::pair<index_t, index_t>> hbuf;
    const index_t k = src_.region_of(s), g = src_.replicas;
    index_t me = 0;  // s's index among the owners of k: it serves turns me, me + g, me + 2g, ...
    {
      const std::span<const index_t> mine = src_.owners_of(k, buf);
      me = std::lower_bound(mine.begin(), mine.end(), s) - mine.begin();
    }
    if (nearest_owners(k)) {  // the targets to which s is the nearest owner of k
      std::vector<index_t> obuf;
      const std::span<const index_t> mine = src_.owners_of(k, obuf);
      for_each_piece(dst_, src_.region_box(k), [&](index_t region, const box& b) {
        for (index_t o : dst_.owners_of(region, buf))
          if (!src_.holds(o, k) && mine[nearest_index(mine, o, k)] == s) out.push_back({s, o, b});
      });
      return;
    }
    const held_list held = holders(k, hbuf);
    const index_t count = dst_.replicas;
    index_t turn = 0;  // turns taken before the current target region
    for_each_piece(dst_, src_.region_box(k), [&](index_t region, const box& b) {
      const index_t h = holder_count(held, region);
      const std::span<const index_t> owners = dst_.owners_of(region, buf);
      if (h == 0) {  // the region's owners take turns turn, turn + 1, ...: jump to s's
        for (index_t j = ((me - turn) % g + g) % g; j < count; j += g)
          out.push_back({s, owners[static_cast<std::size_t>(j)], b});
      } else {
        index_t n = 0;  // turns taken in this region
        for (index_t o : owners) {
          if (src_.holds(o, k)) continue;
          if ((turn + n) % g == me) out.push_back({s, o, b});
          ++n;
        }
      }
      turn += count - h;
    });
  }

  /// The owner of source region k that sends it to target rank t, which does not hold k.
  constexpr index_t sender(index_t k, index_t t) const {
    std::vector<index_t> buf;
    return sender(k, t, buf);
  }

 private:
  using held_list = std::span<const std::pair<index_t, index_t>>;

  partition src_, dst_;
  replica_policy policy_ = replica_policy::round_robin;
  std::vector<index_t> near_;  // tabulated, nearest: per source region, 1 if nearest_fits
  // tabulated: per source region with several owners, CSR lists of
  //   its holders, the target ranks that hold it themselves, as sorted (target region, rank);
  //   the target regions overlapping it, ascending, with the turns taken before each.
  std::vector<index_t> hold_start_, turn_start_;
  std::vector<std::pair<index_t, index_t>> hold_, turn_;

  constexpr void cache() {
    const auto regions = static_cast<std::size_t>(src_.regions);
    if (src_.replicas < 2) return;
    hold_start_ = detail::filled<index_t>(regions + 1, 0);
    for (index_t r = 0; r < src_.ranks; ++r) {
      const index_t o = src_.first_rank + r;
      if (dst_.has_rank(o)) ++hold_start_[static_cast<std::size_t>(src_.rank_region[r]) + 1];
    }
    for (std::size_t k = 0; k < regions; ++k) hold_start_[k + 1] += hold_start_[k];
    hold_.assign(static_cast<std::size_t>(hold_start_[regions]), {0, 0});
    std::vector<index_t> fill(hold_start_.begin(), hold_start_.end() - 1);
    for (index_t r = 0; r < src_.ranks; ++r) {
      const index_t o = src_.first_rank + r;
      if (dst_.has_rank(o))
        hold_[static_cast<std::size_t>(fill[src_.rank_region[r]]++)] = {dst_.region_of(o), o};
    }
    for (std::size_t k = 0; k < regions; ++k)
      std::sort(hold_.begin() + hold_start_[k], hold_.begin() + hold_start_[k + 1]);
    turn_start_ = detail::filled<index_t>(regions + 1, 0);
    for (std::size_t k = 0; k < regions; ++k) {
      const held_list held(hold_.data() + hold_start_[k], hold_.data() + hold_start_[k + 1]);
      index_t turn = 0;
      for_each_piece(dst_, src_.region_box(static_cast<index_t>(k)), [&](index_t region, const box&) {
        turn_.push_back({region, turn});
        turn += dst_.replicas - holder_count(held, region);
      });
      turn_start_[k + 1] = static_cast<index_t>(turn_.size());
    }
    if (policy_ == replica_policy::nearest) {
      near_ = detail::filled<index_t>(regions, 0);
      for (std::size_t k = 0; k < regions; ++k) near_[k] = nearest_fits(static_cast<index_t>(k)) ? 1 : 0;
    }
  }

  // The position in `owners` (ascending: region k's) of the one nearest to rank t; of the owners
  // that are target ranks, if any (their own data is read anyway where each target reads its
  // rank's source: a checkpoint's base files). On a tie, the upper if target rank t + 1 needs
  // region k and t - 1 does not, else the lower: targets that split a region between them (2
  // targets taking 4 and 2 of a source's 6 columns) then read it from the same owner, so that
  // read together (read groups) its rows are read once, without the gaps between their columns.
  constexpr std::size_t nearest_index(std::span<const index_t> owners, index_t t, index_t k) const {
    auto first = std::lower_bound(owners.begin(), owners.end(), dst_.first_rank);
    auto last = std::lower_bound(first, owners.end(), dst_.first_rank + dst_.ranks);
    if (first == last) first = owners.begin(), last = owners.end();
    const auto it = std::lower_bound(first, last, t);
    auto i = static_cast<std::size_t>(it - owners.begin());
    if (it == last) return i - 1;
    if (it == first) return i;
    if (t - owners[i - 1] != owners[i] - t) return t - owners[i - 1] < owners[i] - t ? i - 1 : i;
    const auto needs = [&](index_t r) {
      return dst_.has_rank(r) && volume(intersect(dst_.box_of_rank(r), src_.region_box(k))) > 0;
    };
    return needs(t + 1) && !needs(t - 1) ? i : i - 1;
  }

  // Whether every target that needs source region k can read it from its nearest owner with no
  // owner serving more than 2 ceil(T / g) of the T such targets (g owners).
  constexpr bool nearest_fits(index_t k) const {
    std::vector<index_t> obuf, tbuf;
    const std::span<const index_t> owners = src_.owners_of(k, obuf);
    const auto g = static_cast<index_t>(owners.size());
    std::vector<index_t> load = detail::filled<index_t>(owners.size(), 0);
    index_t needs = 0;
    for_each_piece(dst_, src_.region_box(k), [&](index_t region, const box&) {
      for (index_t o : dst_.owners_of(region, tbuf)) {
        if (src_.holds(o, k)) continue;
        ++needs;
        ++load[nearest_index(owners, o, k)];
      }
    });
    const index_t cap = 2 * ((needs + g - 1) / g);
    for (index_t l : load)
      if (l > cap) return false;
    return true;
  }

  // The holders of source region k: cached, or listed into `buf`.
  constexpr held_list holders(index_t k, std::vector<std::pair<index_t, index_t>>& buf) const {
    if (!hold_start_.empty()) {
      const auto i = static_cast<std::size_t>(k);
      return {hold_.data() + hold_start_[i], hold_.data() + hold_start_[i + 1]};
    }
    std::vector<index_t> owners;
    buf.clear();
    for (index_t o : src_.owners_of(k, owners))
      if (dst_.has_rank(o)) buf.push_back({dst_.region_of(o), o});
    std::sort(buf.begin(), buf.end());
    return buf;
  }

  // Holders in target region `region` with a rank below `below`.
  static constexpr index_t holder_count(held_list held, index_t region, index_t below = detail::max_ranks) {
    const auto lo = std::lower_bound(held.begin(), held.end(), std::pair<index_t, index_t>{region, -1});
    const auto hi = std::lower_bound(lo, held.end(), std::pair<index_t, index_t>{region, below});
    return hi - lo;
  }

  // The owners take turns over the targets that need k, in the order target regions overlapping
  // k (row-major), then each region's owners ascending; counts turns without listing targets.
  constexpr index_t sender(index_t k, index_t t, std::vector<index_t>& buf) const {
    const index_t g = src_.replicas;
    RESHARD_EXPECTS(g > 0, "rank_planner: a source region without owners");
    if (g == 1) return src_.owners_of(k, buf)[0];
    if (nearest_owners(k)) {
      const std::span<const index_t> owners = src_.owners_of(k, buf);
      return owners[nearest_index(owners, t, k)];
    }
    std::vector<std::pair<index_t, index_t>> hbuf;
    const held_list held = holders(k, hbuf);
    const index_t mine = dst_.region_of(t);
    index_t turn = 0;
    bool found = false;
    if (!turn_start_.empty()) {
      const auto first = turn_.begin() + turn_start_[static_cast<std::size_t>(k)];
      const auto last = turn_.begin() + turn_start_[static_cast<std::size_t>(k) + 1];
      const auto it = std::lower_bound(first, last, std::pair<index_t, index_t>{mine, -1});
      found = it != last && it->first == mine;
      if (found) turn = it->second;
    } else {
      for_each_piece(dst_, src_.region_box(k), [&](index_t region, const box&) {
        if (found || region == mine) {
          found = true;
          return;
        }
        turn += dst_.replicas - holder_count(held, region);
      });
    }
    RESHARD_EXPECTS(found, "rank_planner: the target does not overlap the source region");
    // t's position among its region's owners, less the holders of k listed before it
    const std::span<const index_t> owners = dst_.owners_of(mine, buf);
    turn += (std::lower_bound(owners.begin(), owners.end(), t) - owners.begin()) -
            holder_count(held, mine, t);
    return src_.owners_of(k, buf)[static_cast<std::size_t>(turn % g)];
  }
};

/// Derives a minimal plan moving a tensor from layout `src` to layout `dst` (any rank counts),
/// the sending replicas chosen by `policy`.
constexpr transfer_plan plan(const layout& src, const layout& dst,
                             replica_policy policy = replica_policy::least_loaded) {
  validate(src, "plan: source layout");
  validate(dst, "plan: target layout");
  detail::expect_same_shape(src, dst, "plan");
  transfer_plan p{src, dst, {}};
  if (policy != replica_policy::least_loaded) {  // per rank: round_robin, nearest
    const rank_planner rp(src, dst, partition::mode::tabulated, policy);
    for (index_t r = 0; r < rp.target().ranks; ++r) rp.receives(rp.target().first_rank + r, p.transfers);
    return p;
  }
  const partition gs(src), gd(dst);
  const std::size_t n = src.shape.size();
  // Per dim, which source leaves each target leaf meets (one linear merge per dim).
  std::vector<detail::dim_overlaps> ov;
  ov.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ov.push_back(detail::overlaps(gs.bounds[i], gd.bounds[i]));
  // The pieces of every target region that has an owner, found once with an odometer over the
  // target leaves and the segments (no division, no search): piece q of region k is
  // [piece_first[k], piece_first[k + 1]), its source region piece_src[q], its box
  // piece_lo / piece_len[q * n .. q * n + n). The last dim runs fastest, as in for_each_piece.
  const auto nregions = static_cast<std::size_t>(gd.regions);
  // pass 1: piece counts, the product of the segment counts of the region's leaves
  std::vector<index_t> piece_first = detail::filled<index_t>(nregions + 1, 0);
  std::vector<index_t> k = detail::filled<index_t>(n, 0), seg = detail::filled<index_t>(n, 0);
  for (std::size_t rd = 0; rd < nregions; ++rd) {
    index_t count = gd.owner_start[rd] != gd.owner_start[rd + 1] ? 1 : 0;
    for (std::size_t i = 0; i < n; ++i) count *= ov[i].first[k[i] + 1] - ov[i].first[k[i]];
    piece_first[rd + 1] = piece_first[rd] + count;
    for (std::size_t i = n; i-- > 0;) {  // next target region, row-major
      if (++k[i] < gd.leaves[i]) break;
      k[i] = 0;
    }
  }
  // pass 2: the pieces
  const auto pieces = static_cast<std::size_t>(piece_first[nregions]);
  std::vector<index_t> piece_src = detail::filled<index_t>(pieces, 0);
  std::vector<index_t> piece_vol = detail::filled<index_t>(pieces, 0);
  std::vector<index_t> piece_lo = detail::filled<index_t>(pieces * n, 0);
  std::vector<index_t> piece_len = detail::filled<index_t>(pieces * n, 0);
  for (std::size_t i = 0; i < n; ++i) k[i] = 0;
  for (std::size_t rd = 0, q = 0; rd < nregions; ++rd) {
    if (piece_first[rd + 1] > piece_first[rd]) {
      for (std::size_t i = 0; i < n; ++i) seg[i] = ov[i].first[k[i]];
      while (true) {
        index_t id = 0, vol = 1;
        for (std::size_t i = 0; i < n; ++i) {
          const auto j = static_cast<std::size_t>(seg[i]);
          id = id * gs.leaves[i] + ov[i].leaf[j];
          piece_lo[q * n + i] = ov[i].lo[j];
          piece_len[q * n + i] = ov[i].len[j];
          vol *= ov[i].len[j];
        }
        piece_src[q] = id;
        piece_vol[q] = vol;
        ++q;
        bool done = true;
        for (std::size_t i = n; i-- > 0;) {
          if (++seg[i] < ov[i].first[k[i] + 1]) {
            done = false;
            break;
          }
          seg[i] = ov[i].first[k[i]];
        }
        if (done) break;
      }
    }
    for (std::size_t i = n; i-- > 0;) {
      if (++k[i] < gd.leaves[i]) break;
      k[i] = 0;
    }
  }
  std::size_t total = 0;
  for (index_t r = 0; r < gd.ranks; ++r) {
    const index_t rd = gd.rank_region[r];
    total += static_cast<std::size_t>(piece_first[rd + 1] - piece_first[rd]);
  }
  p.transfers.reserve(total);
  // Least-loaded replica: each source rank owns one region, so the candidates for a piece of
  // region k are k's owners, and their loads come from k's pieces alone. One tournament tree of
  // (elements sent, owner) per region: O(log g) a piece, not O(g).
  detail::sender_trees senders(gs);
  // Targets in rank order; a piece the target holds in `src` is a local copy, any other piece
  // comes from the least-loaded replica of its region.
  for (index_t r = 0; r < gd.ranks; ++r) {
    const index_t t = gd.first_rank + r;
    const index_t rd = gd.rank_region[r];
    const index_t mine = t - gs.first_rank >= 0 && t - gs.first_rank < gs.ranks
                             ? gs.rank_region[t - gs.first_rank]
                             : -1;
    for (index_t q = piece_first[rd]; q < piece_first[rd + 1]; ++q) {
      const index_t region = piece_src[q];
      transfer& x = p.transfers.emplace_back();
      x.dst = t;
      const auto at = static_cast<std::size_t>(q) * n;
      x.where.offset.assign_n(piece_lo.data() + at, n);
      x.where.extent.assign_n(piece_len.data() + at, n);
      if (region == mine) {
        x.src = t;
        continue;
      }
      const index_t o_begin = gs.owner_start[region], g = gs.owner_start[region + 1] - o_begin;
      x.src = g == 1 ? gs.owners[o_begin]
                     : gs.owners[o_begin + senders.take(region, piece_vol[q])];
    }
  }
  return p;
}

constexpr plan_cost transfer_plan::cost(index_t element_bytes) const {
  plan_cost c;
  const partition gs(src), gd(dst);
  std::vector<index_t> sent = detail::filled<index_t>(static_cast<std::size_t>(gs.ranks), 0);
  for (const transfer& x : transfers) {
    const index_t v = volume(x.where) * element_bytes;
    if (x.src == x.dst) {
      c.local_bytes += v;
    } else {
      c.cross_bytes += v;
      ++c.messages;
      sent[x.src - gs.first_rank] += v;
    }
  }
  for (index_t r = 0; r < gd.ranks; ++r) {
    const box b = gd.region_box(gd.rank_region[r]);
    c.lower_bound_bytes += (volume(b) - detail::already_held(gs, b, gd.first_rank + r)) *
                           element_bytes;
  }
  for (index_t s : sent) c.max_sent_bytes = std::max(c.max_sent_bytes, s);
  c.mean_sent_bytes = gs.ranks ? static_cast<double>(c.cross_bytes) / static_cast<double>(gs.ranks)
                               : 0.0;
  return c;
}

/// The minimal set of source ranks target rank `target` needs: the senders of its part of
/// plan(src, dst, replica_policy::round_robin), one per distinct source region overlapping its
/// box (itself where it holds that region), ascending. Costs what the rank needs, not O(ranks).
// @post rank_list(src, dst, t) == the sorted sources of the transfers to t in
//       plan(src, dst, replica_policy::round_robin)
// @post the boxes of rank_list(src, dst, t) in src cover box_of(dst, t)
// @post no two ranks of rank_list(src, dst, t) hold the same region of src
constexpr std::vector<index_t> rank_list(const layout& src, const layout& dst, index_t target) {
  validate(src, "rank_list: source layout");
  validate(dst, "rank_list: target layout");
  detail::expect_same_shape(src, dst, "rank_list");
  detail::expect_rank(dst, target, "rank_list");
  const rank_planner rp(src, dst, partition::mode::arithmetic);
  std::vector<transfer> mine;
  rp.receives(target, mine);
  std::vector<index_t> out;
  out.reserve(mine.size());
  for (const transfer& x : mine) out.push_back(x.src);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace reshard
