// reshard/rank_plan.hpp: the part of a redistribution plan that involves one rank, derived
// without deriving the rest.
//
// plan(src, dst) (replica_policy::least_loaded) picks among the replicas of a source piece
// greedily, so one rank's transfers depend on all the others. plan_for_rank(src, dst, r) is r's
// part of plan(src, dst, replica_policy::round_robin), whose rule every rank evaluates alone
// (rank_planner, plan.hpp): target rank t computes its own senders; source rank s finds the
// targets whose turn falls on it. Both sides agree without communicating.
//
//   @post plan_for_rank(A, B, r).transfers == the transfers of plan(A, B, round_robin) whose
//         source or target is r (receives first, in plan order; then sends)
//   @post plan_by_ranks(A, B) == plan(A, B, replica_policy::round_robin)
//
// Cost for one rank: no per-rank tables (an arithmetic partition, partition.hpp). The slice
// boundaries of both layouts (O(slices per dim)), then O(pieces of its box) to receive and
// O(targets it serves) to send, with O(replicas) per region. It does not grow with the number of
// ranks. To derive the parts of many ranks of one layout pair, build one tabulated rank_planner.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

/// The transfers of plan_by_ranks(src, dst) that involve global rank `rank`: first what it
/// receives (including local copies, src == dst == rank), then what it sends to other ranks.
/// A rank of neither layout gets no transfers. Every rank can derive its own part alone; the parts
/// agree (a transfer s -> t appears in both s's and t's part).
// @post the transfers of plan_for_rank(A, B, r) are those of plan_by_ranks(A, B) that involve r
constexpr transfer_plan plan_for_rank(const layout& src, const layout& dst, index_t rank) {
  validate(src, "plan_for_rank: source layout");
  validate(dst, "plan_for_rank: target layout");
  detail::expect_same_shape(src, dst, "plan_for_rank");
  transfer_plan p{src, dst, {}};
  const rank_planner rp(src, dst, partition::mode::arithmetic);
  rp.receives(rank, p.transfers);
  rp.sends(rank, p.transfers);
  return p;
}

/// The whole plan whose per-rank parts plan_for_rank derives: plan(src, dst,
/// replica_policy::round_robin), grouped by target rank.
// @post plan_by_ranks(A, B) == plan(A, B, replica_policy::round_robin)
constexpr transfer_plan plan_by_ranks(const layout& src, const layout& dst) {
  validate(src, "plan_by_ranks: source layout");
  validate(dst, "plan_by_ranks: target layout");
  detail::expect_same_shape(src, dst, "plan_by_ranks");
  return plan(src, dst, replica_policy::round_robin);
}

}  // namespace reshard
