// reshard/placement.hpp: operators placed on workers, and the tensors that move between them.
//
// MindSpore's distributed graph partition (Cell.place("MS_WORKER", k)) runs each operator on one
// worker process and inserts a Send/Recv pair on every edge whose endpoints are on different
// workers. In reshard's algebra a tensor held whole by worker k is the layout
// full_layout(shape, k): a one-device mesh at global rank k. An edge is then a plan between the
// producer's layout and the consumer's: a single transfer of the whole tensor when the workers
// differ, a local copy when they are the same. Nothing here is specific to one worker per
// operator: an operator may be placed on a mesh of workers with DTensor-style placements (each
// mesh axis shards a tensor dim or replicates), and the edge's plan moves exactly the pieces each
// consumer lacks.
//
// Forward, an edge carries the activation from producer to consumer; backward, its gradient (same
// shape) from consumer to producer. Gradients are moved as the consumer holds them: when the
// consumer is replicated, every replica holds the whole gradient; partial sums (a consumer that
// shards a contracted dim) need a reduction, which is not a redistribution and not modelled here.
//   @post for every edge e in forward_plans(g): e.plan == plan(layout_for(producer, shape),
//         layout_for(consumer, shape)), and e.plan moves bytes across ranks
//   @post backward_plans(g) has the same edges reversed (consumer's layout -> producer's), in
//         reverse order
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

/// Where an operator runs: a mesh of workers starting at global rank `first_rank`, and per mesh
/// axis how the operator's tensors are split (Shard(dim)) or replicated. A whole worker is a
/// one-device mesh (on_worker).
struct op_placement {
  index_list mesh{1};                                  ///< sizes of the mesh axes, axis 0 outermost
  std::vector<placement> placements{replicate{}};  ///< one per mesh axis
  index_t first_rank = 0;                           ///< global rank of the mesh's first device
  split_mode mode = split_mode::chunk;              ///< how uneven dims are split
  friend constexpr bool operator==(const op_placement&, const op_placement&) = default;
};

/// The whole operator on worker `worker` (MindSpore: place("MS_WORKER", worker)).
constexpr op_placement on_worker(index_t worker) {
  return {index_list{1}, {replicate{}}, worker, split_mode::divisible};
}

/// The operator sharded over a mesh of workers, ranks first_rank .. first_rank + size - 1.
constexpr op_placement on_mesh(index_list mesh, std::vector<placement> placements,
                               index_t first_rank = 0, split_mode mode = split_mode::chunk) {
  return {std::move(mesh), std::move(placements), first_rank, mode};
}

/// True when the placement is a single device (a whole worker).
constexpr bool is_single_worker(const op_placement& p) {
  index_t n = 1;
  for (index_t d : p.mesh) n *= d;
  return n == 1;
}

/// The layout of a tensor of shape `shape` that an operator placed at `p` holds.
// @post layout_for(on_worker(k), s) == full_layout(s, k)
constexpr layout layout_for(const op_placement& p, const index_list& shape) {
  if (is_single_worker(p)) return full_layout(shape, p.first_rank);
  return dtensor_layout(p.mesh, p.placements, shape, {.mode = p.mode, .first_rank = p.first_rank});
}

/// An operator of the graph and where it runs.
struct op {
  std::string name;
  op_placement where;
  friend constexpr bool operator==(const op&, const op&) = default;
};

/// A tensor flowing from one operator's output into another's input.
struct tensor_edge {
  std::string producer;
  std::string consumer;
  std::string tensor;  ///< a name for messages and listings
  index_list shape;
  index_t element_bytes = 4;
  friend constexpr bool operator==(const tensor_edge&, const tensor_edge&) = default;
};

/// A computation graph with placed operators.
struct op_graph {
  std::vector<op> ops;
  std::vector<tensor_edge> edges;
  friend constexpr bool operator==(const op_graph&, const op_graph&) = default;
};

enum class direction : std::uint8_t {
  forward,   ///< activations, producer -> consumer
  backward,  ///< gradients, consumer -> producer
};

constexpr const char* to_string(direction d) {
  return d == direction::forward ? "forward" : "backward";
}

/// One edge that crosses workers: who sends what to whom, as a plan between the sender's and the
/// receiver's layouts of the tensor.
struct edge_plan {
  std::string tensor;
  std::string from;  ///< the sending operator (producer forward, consumer backward)
  std::string to;    ///< the receiving operator
  direction dir = direction::forward;
  index_t element_bytes = 4;
  transfer_plan plan;   ///< transfers in global ranks (worker ids)
  index_t bytes = 0;    ///< bytes that cross ranks (plan.cost(element_bytes).cross_bytes)
  friend constexpr bool operator==(const edge_plan&, const edge_plan&) = default;
};

namespace detail {

constexpr const op& find_op(const op_graph& g, const std::string& name, const tensor_edge& e,
                            const char* role) {
  const op* found = nullptr;
  for (const op& o : g.ops)
    if (o.name == name) found = &o;
  if (!found)
    report_error("placement: edge '" + e.tensor + "' names " + role + " '" + name +
                 "', which the graph does not have");
  return *found;
}

constexpr void check_graph(const op_graph& g) {
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (g.ops[i].name == g.ops[j].name)
        report_error("placement: two operators are named '" + g.ops[i].name + "'");
    const op_placement& w = g.ops[i].where;
    if (w.placements.size() != w.mesh.size())
      report_error("placement: operator '" + g.ops[i].name + "' has " +
                   std::to_string(w.placements.size()) + " placements for a mesh of " +
                   std::to_string(w.mesh.size()) + " axes " + to_string(w.mesh));
  }
  for (const tensor_edge& e : g.edges)
    if (e.element_bytes <= 0)
      report_error("placement: edge '" + e.tensor + "' has element size " +
                   std::to_string(e.element_bytes));
}

// The layout the operator holds the edge's tensor in; errors name the operator and the edge.
constexpr layout edge_layout(const op& o, const tensor_edge& e) {
  if (!is_single_worker(o.where))
    for (const placement& p : o.where.placements)
      if (const auto* s = std::get_if<shard>(&p); s && s->dim >= static_cast<index_t>(e.shape.size()))
        report_error("placement: operator '" + o.name + "' shards dim " + std::to_string(s->dim) +
                     " but its tensor '" + e.tensor + "' has shape " + to_string(e.shape));
  return layout_for(o.where, e.shape);
}

constexpr std::vector<edge_plan> edge_plans(const op_graph& g, direction d) {
  check_graph(g);
  std::vector<edge_plan> out;
  for (const tensor_edge& e : g.edges) {
    const op& prod = find_op(g, e.producer, e, "producer");
    const op& cons = find_op(g, e.consumer, e, "consumer");
    const layout a = edge_layout(prod, e), b = edge_layout(cons, e);
    const bool fwd = d == direction::forward;
    transfer_plan p = plan(fwd ? a : b, fwd ? b : a);
    const plan_cost c = p.cost(e.element_bytes);
    if (c.messages == 0) continue;  // both ends hold what they need: same worker(s)
    out.push_back({e.tensor, fwd ? prod.name : cons.name, fwd ? cons.name : prod.name, d,
                   e.element_bytes, std::move(p), c.cross_bytes});
  }
  if (d == direction::backward) std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace detail

/// The cross-worker edges of the forward pass: each activation from its producer's layout to its
/// consumer's, in edge order. Edges whose ends hold the same data (same worker) are skipped.
constexpr std::vector<edge_plan> forward_plans(const op_graph& g) {
  return detail::edge_plans(g, direction::forward);
}

/// The cross-worker edges of the backward pass: each gradient from the consumer's layout back to
/// the producer's, in reverse edge order.
constexpr std::vector<edge_plan> backward_plans(const op_graph& g) {
  return detail::edge_plans(g, direction::backward);
}

/// Bytes that cross workers over a list of edge plans.
constexpr index_t total_bytes(const std::vector<edge_plan>& plans) {
  index_t n = 0;
  for (const edge_plan& e : plans) n += e.bytes;
  return n;
}

/// Prints an edge plan and its cross-rank transfers (boxes shown when not the whole tensor):
/// `forward h: embed -> mlp [8,6], 48 bytes: 1->0 [0:4,0:6]`.
constexpr std::string to_string(const edge_plan& e) {
  std::string s = to_string(e.dir);
  s += ' ';
  s += e.tensor;
  s += ": ";
  s += e.from;
  s += " -> ";
  s += e.to;
  s += ' ';
  s += to_string(e.plan.src.shape);
  s += ", ";
  detail::append_int(s, e.bytes);
  s += " bytes:";
  for (const transfer& x : e.plan.transfers) {
    if (x.src == x.dst) continue;
    s += ' ';
    detail::append_int(s, x.src);
    s += "->";
    detail::append_int(s, x.dst);
    if (x.where.extent != e.plan.src.shape) s += ' ' + to_string(x.where);
  }
  return s;
}

}  // namespace reshard
