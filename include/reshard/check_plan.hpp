// reshard/check_plan.hpp: the verdict on a redistribution plan that any system made (a list of
// transfers: source rank, target rank, box), against the two layouts it claims to move between.
//
//   auto r = check_plan(src, dst, transfers);
//   r.complete   every element of every target rank's box is received exactly once
//   r.sound      every transfer's sender holds its box in `src`, and its receiver in `dst`
//   r.problems   the first problems (options.max_problems), each with its box and target rank
//   r.cost       the plan's bytes, messages and largest sends and receives of one rank, beside
//   r.minimal    the same figures for plan(src, dst), whose cross bytes are the lower bound
//
// It works on boxes, never on elements. A sound plan is complete exactly when, for every target,
// its boxes are pairwise disjoint and their volumes add up to the target's box: the disjointness
// is a sweep along one dim (O(T log T) for T transfers when the boxes are spread along it, the
// dim with the most distinct starts is chosen), and the volumes are sums. Only a target found
// wrong is cut into its uncovered boxes (box subtraction), to report them.
//
// check_plan(shape, src, dst, transfers) is the same checker on explicit boxes (rank_box): a
// transfer's src and dst index lists of boxes, each held by a rank (one rank may hold several).
// It checks plans whose ends are no layouts, such as PyTorch DCP's read items between saved and
// requested chunks (io/dcp_read_items.hpp). The layout form is this with one box per rank.
//
//   @post check_plan(A, B, plan(A, B).transfers).ok()
//   @post r.ok() == (the element-by-element check: each element of box_of(B, t) is received once
//         by t, and each transfer's elements are held by its sender in A and its receiver in B)
//
// Errors: layouts that are invalid or of different shapes throw reshard::error (tier 2, as plan()
// does); a transfer naming a rank outside a layout or a box outside the tensor is a problem of
// the plan (kind bad_transfer), not an error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/partition.hpp"
#include "reshard/plan.hpp"

namespace reshard {

/// What is wrong with one part of a plan.
enum class plan_problem_kind : std::uint8_t {
  uncovered,       ///< a box of target rank `dst` that no transfer brings
  covered_twice,   ///< a box of target rank `dst` that two transfers (`transfer`, `other`) both bring
  sender_lacks,    ///< transfer `transfer`'s box is not (wholly) held by its sender `src` in the source layout
  receiver_lacks,  ///< transfer `transfer`'s box is not (wholly) inside its receiver `dst`'s box
  bad_transfer,    ///< transfer `transfer` names a rank outside its layout, or a box outside the tensor
};

constexpr const char* to_string(plan_problem_kind k) noexcept {
  switch (k) {
    case plan_problem_kind::uncovered: return "uncovered";
    case plan_problem_kind::covered_twice: return "covered twice";
    case plan_problem_kind::sender_lacks: return "sender does not hold it";
    case plan_problem_kind::receiver_lacks: return "outside the receiver's box";
    case plan_problem_kind::bad_transfer: return "bad transfer";
  }
  return "?";
}

inline constexpr std::size_t no_transfer = std::numeric_limits<std::size_t>::max();

struct plan_problem {
  plan_problem_kind kind = plan_problem_kind::uncovered;
  index_t src = -1;                   ///< the sender (-1: none)
  index_t dst = -1;                   ///< the target rank
  box where;                          ///< the box concerned (the overlap, the hole, the transfer's box)
  std::size_t transfer = no_transfer; ///< the transfer's index in the list checked
  std::size_t other = no_transfer;    ///< covered_twice: the other transfer
  std::string what;                   ///< the problem in words, for messages
};

/// The figures of a plan, for comparing one with the minimal one.
struct plan_figures {
  index_t cross_bytes = 0;         ///< bytes moving between different ranks
  index_t local_bytes = 0;         ///< bytes a rank copies from itself
  index_t messages = 0;            ///< cross-rank transfers
  index_t max_sent_bytes = 0;      ///< most cross bytes one rank sends
  index_t max_received_bytes = 0;  ///< most cross bytes one rank receives
  friend constexpr bool operator==(const plan_figures&, const plan_figures&) = default;
};

struct plan_check {
  bool complete = true;  ///< every target element received exactly once
  bool sound = true;     ///< every transfer held by its sender and inside its receiver's box
  std::vector<plan_problem> problems;  ///< the first ones found, by target rank
  std::size_t problem_count = 0;       ///< all that were found (problems may list fewer)
  plan_figures cost;                   ///< of the plan checked (its well-formed transfers)
  plan_figures minimal;                ///< of plan(src, dst)
  index_t lower_bound_bytes = 0;       ///< the bytes the targets do not already hold
  bool ok() const noexcept { return complete && sound; }
};

/// A box held by a rank: explicit holders for check_plan on boxes (saved chunks, requested chunks).
struct rank_box {
  index_t rank = 0;  ///< who holds it, for the figures (local or cross-rank)
  box where;
};

struct check_options {
  std::size_t max_problems = 100;  ///< problems listed at most (all are counted)
  index_t element_bytes = 1;       ///< bytes of one element, for the figures
};

namespace detail {

inline bool box_inside(const box& inner, const box& outer) {
  for (std::size_t i = 0; i < inner.offset.size(); ++i)
    if (inner.offset[i] < outer.offset[i] || inner.offset[i] + inner.extent[i] > outer.offset[i] + outer.extent[i])
      return false;
  return true;
}

// `a` minus `b`: at most 2 * dims disjoint boxes.
inline void subtract_box(const box& a, const box& b, std::vector<box>& out) {
  const box common = intersect(a, b);
  if (volume(common) == 0) {
    out.push_back(a);
    return;
  }
  box rest = a;
  for (std::size_t i = 0; i < a.offset.size(); ++i) {
    const index_t lo = common.offset[i], hi = common.offset[i] + common.extent[i];
    const index_t rlo = rest.offset[i], rhi = rest.offset[i] + rest.extent[i];
    if (rlo < lo) {
      box below = rest;
      below.extent[i] = lo - rlo;
      out.push_back(below);
    }
    if (hi < rhi) {
      box above = rest;
      above.offset[i] = hi;
      above.extent[i] = rhi - hi;
      out.push_back(above);
    }
    rest.offset[i] = lo;
    rest.extent[i] = hi - lo;
  }
}

// `target` and `source` name what the ids are ("rank", or "box" for explicit holders).
inline std::string describe(const plan_problem& p, const char* target = "rank", const char* source = "rank") {
  std::string s = std::string(to_string(p.kind)) + ": target " + target + " " + std::to_string(p.dst) + ", box " + to_string(p.where);
  if (p.transfer != no_transfer)
    s += ", transfer " + std::to_string(p.transfer) + " (from " + source + " " + std::to_string(p.src) + ")";
  if (p.other != no_transfer) s += " and transfer " + std::to_string(p.other);
  return s;
}

// The holders of a plan from one layout to another: ids are the layout's ranks, each holding its
// region's box.
class layout_holders {
 public:
  layout_holders(const layout& l, const char* side) : p_(l), side_(side) {}
  std::size_t count() const { return static_cast<std::size_t>(p_.ranks); }
  bool has(index_t id) const { return p_.has_rank(id); }
  std::size_t index_of(index_t id) const { return static_cast<std::size_t>(id - p_.first_rank); }
  index_t id_at(std::size_t k) const { return p_.first_rank + static_cast<index_t>(k); }
  box box_of(index_t id) const { return p_.region_box(p_.region_of(id)); }
  // the rank behind an id, as a dense slot for the per-rank figures, and the number of slots
  std::size_t slot(index_t id) const { return index_of(id); }
  std::size_t slots() const { return count(); }
  index_t rank_of(index_t id) const { return id; }
  std::string not_member(const char* role, index_t id) const {
    return std::string(role) + " " + std::to_string(id) + " is not a rank of the " + side_ + " layout (" +
           std::to_string(p_.first_rank) + ".." + std::to_string(p_.first_rank + p_.ranks - 1) + ")";
  }
  static constexpr const char* noun = "rank";

 private:
  partition p_;
  const char* side_;
};

// Explicit holders: id i holds boxes[i].where, on rank boxes[i].rank.
class box_holders {
 public:
  box_holders(std::span<const rank_box> hs, const char* side) : hs_(hs), side_(side) {
    std::vector<index_t> ranks;
    for (const rank_box& h : hs) ranks.push_back(h.rank);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    for (const rank_box& h : hs)
      slot_.push_back(static_cast<std::size_t>(std::lower_bound(ranks.begin(), ranks.end(), h.rank) - ranks.begin()));
    slots_ = ranks.size();
  }
  std::size_t count() const { return hs_.size(); }
  bool has(index_t id) const { return id >= 0 && static_cast<std::size_t>(id) < hs_.size(); }
  std::size_t index_of(index_t id) const { return static_cast<std::size_t>(id); }
  index_t id_at(std::size_t k) const { return static_cast<index_t>(k); }
  const box& box_of(index_t id) const { return hs_[index_of(id)].where; }
  index_t rank_of(index_t id) const { return hs_[index_of(id)].rank; }
  std::size_t slot(index_t id) const { return slot_[index_of(id)]; }
  std::size_t slots() const { return slots_; }
  std::string not_member(const char* role, index_t id) const {
    return std::string(role) + " " + std::to_string(id) + " is not a box of the " + side_ + " (0.." +
           std::to_string(static_cast<index_t>(hs_.size()) - 1) + ")";
  }
  static constexpr const char* noun = "box";

 private:
  std::span<const rank_box> hs_;
  const char* side_;
  std::vector<std::size_t> slot_;
  std::size_t slots_ = 0;
};

// The one checker: `xs` between the holders `gs` (senders) and `gd` (receivers) of a tensor of
// shape `shape`. Each receiver's box must be tiled by the transfers it receives.
template <class S, class D>
class plan_checker {
 public:
  plan_checker(const index_list& shape, const S& gs, const D& gd, std::span<const transfer> xs, check_options o)
      : shape_(shape), gs_(gs), gd_(gd), xs_(xs), o_(o) {}

  plan_check run() {
    std::vector<std::vector<std::size_t>> to(gd_.count());
    std::vector<index_t> sent(gs_.slots(), 0), received(gd_.slots(), 0);
    for (std::size_t i = 0; i < xs_.size(); ++i) {
      const transfer& x = xs_[i];
      if (std::string why = malformed(x); !why.empty()) {
        add({plan_problem_kind::bad_transfer, x.src, x.dst, x.where, i, no_transfer, std::move(why)}, false);
        continue;
      }
      const index_t v = volume(x.where) * o_.element_bytes;
      if (gs_.rank_of(x.src) == gd_.rank_of(x.dst)) {
        r_.cost.local_bytes += v;
      } else if (v > 0) {
        r_.cost.cross_bytes += v;
        ++r_.cost.messages;
        sent[gs_.slot(x.src)] += v;
        received[gd_.slot(x.dst)] += v;
      }
      if (volume(x.where) == 0) continue;  // moves nothing: neither covers nor lacks anything
      if (!box_inside(x.where, gs_.box_of(x.src)))
        add({plan_problem_kind::sender_lacks, x.src, x.dst, x.where, i, no_transfer, {}}, false);
      if (!box_inside(x.where, gd_.box_of(x.dst))) {
        add({plan_problem_kind::receiver_lacks, x.src, x.dst, x.where, i, no_transfer, {}}, false);
        continue;  // not part of the target's cover
      }
      to[gd_.index_of(x.dst)].push_back(i);
    }
    for (index_t s : sent) r_.cost.max_sent_bytes = std::max(r_.cost.max_sent_bytes, s);
    for (index_t s : received) r_.cost.max_received_bytes = std::max(r_.cost.max_received_bytes, s);
    for (std::size_t k = 0; k < gd_.count(); ++k) check_target(gd_.id_at(k), to[k]);
    return std::move(r_);
  }

 private:
  // Why `x` is not a transfer between these holders (empty: it is one).
  std::string malformed(const transfer& x) const {
    if (!gs_.has(x.src)) return gs_.not_member("sender", x.src);
    if (!gd_.has(x.dst)) return gd_.not_member("receiver", x.dst);
    if (x.where.offset.size() != shape_.size() || x.where.extent.size() != shape_.size())
      return "the box has " + std::to_string(x.where.offset.size()) + " dims, the tensor " + std::to_string(shape_.size());
    for (std::size_t i = 0; i < shape_.size(); ++i) {
      const index_t o = x.where.offset[i], e = x.where.extent[i];
      if (o < 0 || e < 0 || o > shape_[i] || e > shape_[i] - o)
        return "the box leaves the tensor " + to_string(shape_) + " in dim " + std::to_string(i);
    }
    return {};
  }

  // `p.what` holds the reason, if any, on entry; it becomes the whole description.
  void add(plan_problem p, bool cover) {
    (cover ? r_.complete : r_.sound) = false;
    ++r_.problem_count;
    if (r_.problems.size() >= o_.max_problems) return;
    p.what = describe(p, D::noun, S::noun) + (p.what.empty() ? "" : ": " + p.what);
    r_.problems.push_back(std::move(p));
  }

  // The boxes of target t: pairwise disjoint, and their volumes add up to t's box.
  void check_target(index_t t, const std::vector<std::size_t>& mine) {
    const box whole = gd_.box_of(t);
    const std::size_t nd = whole.offset.size();
    index_t sum = 0;
    for (std::size_t i : mine) sum += volume(xs_[i].where);
    bool overlaps = false;
    if (nd == 0) {  // a 0-d tensor: every (non-empty) box is its one element
      for (std::size_t k = 1; k < mine.size(); ++k)
        overlaps = true, add({plan_problem_kind::covered_twice, xs_[mine[k]].src, t, whole, mine[k], mine[0], {}}, true);
    } else {
      // sweep along the dim where the boxes start at the most distinct offsets
      std::size_t d = 0, best = 0;
      for (std::size_t k = 0; k < nd; ++k) {
        std::vector<index_t> starts;
        for (std::size_t i : mine) starts.push_back(xs_[i].where.offset[k]);
        std::sort(starts.begin(), starts.end());
        const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
        if (distinct > best) best = distinct, d = k;
      }
      std::vector<std::size_t> order(mine);
      std::sort(order.begin(), order.end(),
                [&](std::size_t a, std::size_t b) { return xs_[a].where.offset[d] < xs_[b].where.offset[d]; });
      using active_t = std::pair<index_t, std::size_t>;  // (end along d, transfer)
      std::priority_queue<active_t, std::vector<active_t>, std::greater<>> ends;
      std::vector<std::size_t> active;
      for (std::size_t i : order) {
        const box& b = xs_[i].where;
        while (!ends.empty() && ends.top().first <= b.offset[d]) {
          const std::size_t gone = ends.top().second;
          ends.pop();
          active.erase(std::find(active.begin(), active.end(), gone));
        }
        for (std::size_t j : active) {
          const box common = intersect(xs_[j].where, b);
          if (volume(common) > 0)
            overlaps = true, add({plan_problem_kind::covered_twice, xs_[i].src, t, common, i, j, {}}, true);
        }
        active.push_back(i);
        ends.emplace(b.offset[d] + b.extent[d], i);
      }
    }
    if (!overlaps && sum == volume(whole)) return;
    // some of t's box is not received: cut it into the uncovered boxes
    std::vector<box> holes{whole}, next;
    for (std::size_t i : mine) {
      next.clear();
      for (const box& h : holes) subtract_box(h, xs_[i].where, next);
      holes.swap(next);
      if (holes.empty()) break;
    }
    for (const box& h : holes)
      if (volume(h) > 0) add({plan_problem_kind::uncovered, -1, t, h, no_transfer, no_transfer, {}}, true);
  }

  const index_list& shape_;
  const S& gs_;
  const D& gd_;
  std::span<const transfer> xs_;
  check_options o_;
  plan_check r_;
};

// The figures of plan(src, dst), and its lower bound, into r.
inline void figures_of_minimal_plan(const layout& src, const layout& dst, index_t element_bytes, plan_check& r) {
  const transfer_plan p = plan(src, dst);
  const plan_cost c = p.cost(element_bytes);
  r.lower_bound_bytes = c.lower_bound_bytes;
  r.minimal.cross_bytes = c.cross_bytes;
  r.minimal.local_bytes = c.local_bytes;
  r.minimal.messages = c.messages;
  r.minimal.max_sent_bytes = c.max_sent_bytes;
  const partition gd(dst);
  std::vector<index_t> received(static_cast<std::size_t>(gd.ranks), 0);
  for (const transfer& x : p.transfers)
    if (x.src != x.dst) received[static_cast<std::size_t>(x.dst - gd.first_rank)] += volume(x.where) * element_bytes;
  for (index_t v : received) r.minimal.max_received_bytes = std::max(r.minimal.max_received_bytes, v);
}

}  // namespace detail

/// The verdict on `transfers` as a plan from `src` to `dst` (see the top of this header).
/// @throws reshard::error when a layout is invalid or the two have different shapes
inline plan_check check_plan(const layout& src, const layout& dst, std::span<const transfer> transfers,
                             check_options o = {}) {
  validate(src, "check_plan: source layout");
  validate(dst, "check_plan: target layout");
  detail::expect_same_shape(src, dst, "check_plan");
  const detail::layout_holders gs(src, "source"), gd(dst, "target");
  plan_check r = detail::plan_checker(src.shape, gs, gd, transfers, o).run();
  detail::figures_of_minimal_plan(src, dst, o.element_bytes, r);
  return r;
}

/// The verdict on `transfers` between explicit boxes of a tensor of shape `shape`: a transfer's
/// `src` is an index into `src` (the box its sender holds), its `dst` an index into `dst` (the box
/// it fills). Complete: every box of `dst` is received exactly once (the boxes of `dst` need not
/// be distinct ranks': one rank may hold several). Sound: each transfer inside its sender's box
/// and its receiver's. The figures count a transfer as local when the two boxes' ranks are equal;
/// `minimal` and `lower_bound_bytes` stay zero (there is no plan() of arbitrary boxes). The same
/// checker as the layout form, which is this with one box per rank.
/// @throws reshard::error when a box of `src` or `dst` does not lie in the tensor
inline plan_check check_plan(const index_list& shape, std::span<const rank_box> src, std::span<const rank_box> dst,
                             std::span<const transfer> transfers, check_options o = {}) {
  const auto inside = [&](std::span<const rank_box> hs, const char* side) {
    const box all{index_list(shape.size(), 0), shape};
    for (std::size_t i = 0; i < hs.size(); ++i)
      if (hs[i].where.offset.size() != shape.size() || hs[i].where.extent.size() != shape.size() ||
          !detail::box_inside(hs[i].where, all) ||
          std::find_if(hs[i].where.extent.begin(), hs[i].where.extent.end(), [](index_t e) { return e < 0; }) !=
              hs[i].where.extent.end())
        report_error(std::string("check_plan: ") + side + " box " + std::to_string(i) + " " + to_string(hs[i].where) +
                     " does not lie in the tensor " + to_string(shape));
  };
  inside(src, "source");
  inside(dst, "target");
  const detail::box_holders gs(src, "source"), gd(dst, "target");
  return detail::plan_checker(shape, gs, gd, transfers, o).run();
}


/// The verdict on a rank list: the source ranks whose data target rank `target` will read
/// (MindSpore's rank list for one tensor), against the two layouts.
struct rank_list_check {
  bool sufficient = true;            ///< the listed ranks' boxes in src cover box_of(dst, target)
  std::vector<box> uncovered;        ///< the parts of the target box no listed rank holds, one per source region
  std::vector<index_t> superfluous;  ///< listed ranks that can all be dropped together, ascending
  std::vector<index_t> kept;         ///< the listed ranks that are not superfluous, ascending
  std::vector<index_t> minimal;      ///< the senders of `target`'s part of plan(src, dst, policy):
                                     ///< rank_list(src, dst, target) for round_robin
  bool is_minimal() const noexcept { return sufficient && superfluous.empty(); }
};

/// Checks `ranks` (in any order, repeats ignored) as the source ranks target rank `target` reads.
/// The regions of src that meet box_of(dst, target) must each have an owner in the list
/// (sufficient; else `uncovered` holds each such region's part of the target box). A listed rank
/// is superfluous when its region does not meet the target box, or when another listed rank is
/// kept for its region: per region one owner is kept, the one `policy` picks (a per-rank policy:
/// round_robin, rank_list's, or nearest) if listed, else the first listed in `prefer`, else the
/// lowest. So dropping every superfluous rank at once
/// leaves a list just as sufficient, with one rank per region it covers.
//   @post r.sufficient == (every element of box_of(dst, target) lies in box_of(src, s) for some
//         listed s)
//   @post r.sufficient == a plan whose transfers to `target` come only from listed ranks exists
//   @post check_rank_list(src, dst, t, rank_list(src, dst, t)).is_minimal()
// @throws reshard::error for invalid layouts of different shapes, a target that is not a rank of
//         dst, or a listed rank that is not a rank of src
inline rank_list_check check_rank_list(const layout& src, const layout& dst, index_t target,
                                       std::span<const index_t> ranks, std::span<const index_t> prefer = {},
                                       replica_policy policy = replica_policy::round_robin) {
  validate(src, "check_rank_list: source layout");
  validate(dst, "check_rank_list: target layout");
  detail::expect_same_shape(src, dst, "check_rank_list");
  detail::expect_rank(dst, target, "check_rank_list");
  const rank_planner rp(src, dst, partition::mode::arithmetic, policy);
  const partition& gs = rp.source();
  std::vector<index_t> listed(ranks.begin(), ranks.end());
  std::sort(listed.begin(), listed.end());
  listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
  for (index_t r : listed)
    if (!gs.has_rank(r))
      report_error("check_rank_list: rank " + std::to_string(r) + " is not a rank of the source layout (" +
                   std::to_string(gs.first_rank) + ".." + std::to_string(gs.first_rank + gs.ranks - 1) + ")");
  const auto is_listed = [&](index_t r) { return std::binary_search(listed.begin(), listed.end(), r); };
  rank_list_check out;
  std::vector<transfer> xs;
  rp.receives(target, xs);  // per source region meeting the target box: its piece and the policy's pick
  std::vector<index_t> buf;
  for (const transfer& x : xs) {
    out.minimal.push_back(x.src);
    index_t keep = is_listed(x.src) ? x.src : -1;
    const std::span<const index_t> owners = gs.owners_of(gs.region_of(x.src), buf);
    for (std::size_t i = 0; keep < 0 && i < prefer.size(); ++i)
      if (is_listed(prefer[i]) && std::find(owners.begin(), owners.end(), prefer[i]) != owners.end()) keep = prefer[i];
    for (std::size_t i = 0; keep < 0 && i < owners.size(); ++i)
      if (is_listed(owners[i])) keep = owners[i];
    if (keep < 0) {
      out.sufficient = false;
      out.uncovered.push_back(x.where);
    } else {
      out.kept.push_back(keep);
    }
  }
  std::sort(out.minimal.begin(), out.minimal.end());
  std::sort(out.kept.begin(), out.kept.end());
  std::set_difference(listed.begin(), listed.end(), out.kept.begin(), out.kept.end(),
                      std::back_inserter(out.superfluous));
  return out;
}

}  // namespace reshard
