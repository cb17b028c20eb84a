// examples/lenet_placement.cpp: MindSpore's distributed graph partition tutorial in reshard's
// algebra. LeNet-5's layers are placed on 5 workers (conv1 -> 3, conv2 -> 4, fc1 -> 0, fc2 -> 1,
// fc3 -> 2); every edge between operators on different workers is a plan from
// full_layout(shape, producer's worker) to full_layout(shape, consumer's worker). We list the
// forward (activation) and backward (gradient) transfers with their shapes and bytes:
//   1. as the tutorial places them (unplaced relu/pool/flatten/loss on worker 0, MindSpore's
//      default label);
//   2. with each relu/pool/flatten placed with the layer before it;
//   3. generalized: fc1 split by batch over workers 0 and 1 (a sharded placement).
// The same forward and backward transfers run over MPI in verify/mpi/lenet.cpp (mpi.lenet).
#include <cstdio>
#include <string>
#include <vector>

#include "lenet.hpp"
#include "reshard/placement.hpp"

namespace {

using reshard::edge_plan;
using reshard::index_t;

std::string where(const reshard::op_graph& g, const std::string& name) {
  for (const auto& o : g.ops) {
    if (o.name != name) continue;
    if (reshard::is_single_worker(o.where)) return "worker " + std::to_string(o.where.first_rank);
    index_t n = 1;
    for (index_t d : o.where.mesh) n *= d;
    return "workers " + std::to_string(o.where.first_rank) + ".." +
           std::to_string(o.where.first_rank + n - 1);
  }
  return "?";
}

void list(const reshard::op_graph& g, const std::vector<edge_plan>& plans, const char* title,
          bool boxes) {
  std::printf("   %s\n", title);
  for (const edge_plan& e : plans) {
    const std::string from = e.from + " (" + where(g, e.from) + ")";
    const std::string to = e.to + " (" + where(g, e.to) + ")";
    std::printf("     %-12s %-14s %-18s -> %-18s %7lld bytes\n", e.tensor.c_str(),
                reshard::to_string(e.plan.src.shape).c_str(), from.c_str(), to.c_str(),
                static_cast<long long>(e.bytes));
    if (!boxes) continue;
    for (const auto& x : e.plan.transfers)
      std::printf("         %lld -> %lld  %-22s %7lld bytes%s\n", static_cast<long long>(x.src),
                  static_cast<long long>(x.dst), reshard::to_string(x.where).c_str(),
                  static_cast<long long>(reshard::volume(x.where) * e.element_bytes),
                  x.src == x.dst ? "  (local copy)" : "");
  }
  std::printf("     %zu cross-worker transfers, %lld bytes\n", plans.size(),
              static_cast<long long>(reshard::total_bytes(plans)));
}

}  // namespace

int main() {
  int bad = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) std::printf("MISMATCH: %s\n", what), ++bad;
  };
  std::printf("LeNet-5 of MindSpore's distributed graph partition tutorial: batch %lld, float32\n",
              static_cast<long long>(lenet::batch));
  std::printf("activations: conv1 %s, pool %s, conv2 %s, pool %s, flatten %s,\n"
              "             fc1 %s, fc2 %s, fc3 %s\n\n",
              reshard::to_string(lenet::conv1_out).c_str(), reshard::to_string(lenet::pool1_out).c_str(),
              reshard::to_string(lenet::conv2_out).c_str(), reshard::to_string(lenet::pool2_out).c_str(),
              reshard::to_string(lenet::flat).c_str(), reshard::to_string(lenet::fc1_out).c_str(),
              reshard::to_string(lenet::fc2_out).c_str(), reshard::to_string(lenet::fc3_out).c_str());

  const reshard::op_graph tutorial = lenet::tutorial_graph();
  const auto fwd = reshard::forward_plans(tutorial), bwd = reshard::backward_plans(tutorial);
  std::printf("1. The tutorial's placement: conv1 -> worker 3, conv2 -> 4, fc1 -> 0, fc2 -> 1,\n"
              "   fc3 -> 2. relu, max_pool2d, flatten and the loss are not placed: MindSpore puts\n"
              "   them on worker 0, so activations bounce between worker 0 and the others.\n");
  list(tutorial, fwd, "forward (activations, producer -> consumer)", false);
  list(tutorial, bwd, "backward (gradients, consumer -> producer)", false);
  expect(fwd.size() == 7 && reshard::total_bytes(fwd) == 995584, "tutorial forward: 7, 995584 B");
  expect(bwd.size() == 7 && reshard::total_bytes(bwd) == 995584, "tutorial backward: 7, 995584 B");

  const reshard::op_graph colocated = lenet::colocated_graph();
  const auto fwd2 = reshard::forward_plans(colocated), bwd2 = reshard::backward_plans(colocated);
  std::printf("\n2. One relu/pool/flatten per use, each on the worker of the layer before it:\n");
  list(colocated, fwd2, "forward", false);
  list(colocated, bwd2, "backward", false);
  expect(fwd2.size() == 5 && reshard::total_bytes(fwd2) == 229120, "colocated forward: 5, 229120 B");
  std::printf("   %.1fx fewer bytes than the tutorial's placement\n",
              static_cast<double>(reshard::total_bytes(fwd)) /
                  static_cast<double>(reshard::total_bytes(fwd2)));

  // 3. A sharded placement: fc1 data-parallel over workers 0 and 1 (batch split in two).
  reshard::op_graph sharded = colocated;
  for (auto& o : sharded.ops)
    if (o.name == "fc1" || o.name == "relu3")
      o.where = reshard::on_mesh({2}, {reshard::shard{0}}, 0);
  const auto fwd3 = reshard::forward_plans(sharded), bwd3 = reshard::backward_plans(sharded);
  std::printf("\n3. Generalized: fc1 and its relu split by batch over workers 0 and 1\n"
              "   (on_mesh({2}, {Shard(0)}, 0)); boxes are [batch, features] ranges:\n");
  list(sharded, fwd3, "forward", true);
  list(sharded, bwd3, "backward", true);
  // flatten (worker 4) sends each half of the batch to its fc1 shard; relu3's halves both go to
  // fc2 on worker 1, which already holds rows 16:32: only rows 0:16 cross.
  expect(fwd3.size() == 5, "sharded forward: 5 cross-worker edges");
  expect(reshard::total_bytes(fwd3) == 229120 - 15360 / 2, "sharded forward bytes");

  if (bad) return 1;
  std::printf("\nall transfer counts and byte totals: verified\n");
  return 0;
}
