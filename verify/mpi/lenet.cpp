// verify/mpi/lenet.cpp (mpi.lenet, 5 processes): the LeNet-5 placement of MindSpore's
// distributed graph partition tutorial (examples/lenet.hpp), executed over MPI. Process k is
// worker k. For every cross-worker edge of the forward pass the producer's worker fills the
// activation with values that identify the tensor and the element, all processes call
// reshard::mpi::redistribute with the edge's plan, and the consumer's worker checks every value it
// received; then the same for the gradients of the backward pass (consumer -> producer). Both the
// tutorial's placement (unplaced ops on worker 0) and the colocated one, and a sharded variant
// (fc1 and its relu split by batch over workers 0 and 1).
#include "reshard/mpi/redistribute.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"
#include "lenet.hpp"
#include "reshard/placement.hpp"
#include "reshard.hpp"

namespace {

using namespace reshard;

// The value of element i (row-major, global coordinates) of edge `e`'s tensor: exact in float.
float value(std::size_t edge, index_t i, direction d) {
  const auto v = static_cast<std::uint32_t>((static_cast<std::uint64_t>(i) * 7 + edge * 131 +
                                             (d == direction::backward ? 1000 : 0)) %
                                            (1u << 23));
  return static_cast<float>(v);
}

// Rank r's shard of the tensor of edge `k` under layout `l`, filled with value() (empty if none).
std::vector<float> fill(const layout& l, index_t r, std::size_t k, direction d) {
  if (r < l.first_rank || r >= l.first_rank + num_ranks(l)) return {};
  const box b = box_of(l, r);
  std::vector<float> out(static_cast<std::size_t>(volume(b)));
  const std::size_t n = b.offset.size();
  index_list idx(n, 0);
  for (std::size_t e = 0; e < out.size(); ++e) {
    index_t flat = 0;
    for (std::size_t i = 0; i < n; ++i) flat = flat * l.shape[i] + b.offset[i] + idx[i];
    out[e] = value(k, flat, d);
    for (std::size_t i = n; i-- > 0;) {
      if (++idx[i] < b.extent[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// Runs every edge plan over MPI and checks what the receiving workers got.
void execute(reshard_mpi_test::harness& h, const char* graph_name, const std::vector<edge_plan>& plans) {
  const index_t me = h.rank();
  index_t moved = 0;
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const edge_plan& e = plans[k];
    const std::string what = std::string(graph_name) + " " + to_string(e.dir) + " " + e.tensor +
                             " (" + e.from + " -> " + e.to + ")";
    h.run(what, [&] {
      const std::vector<float> mine = fill(e.plan.src, me, k, e.dir);
      const std::vector<float> got = mpi::redistribute<float>(MPI_COMM_WORLD, e.plan, mine);
      const std::vector<float> want = fill(e.plan.dst, me, k, e.dir);
      h.check(got == want, what + ": worker " + std::to_string(me) + " received wrong values");
      if (!want.empty()) moved += static_cast<index_t>(want.size() * sizeof(float));
    });
  }
  long long local = moved, all = 0;
  MPI_Reduce(&local, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (h.rank() == 0)
    std::printf("%-44s %zu edges, %lld bytes received (cross-worker %lld)\n", graph_name,
                plans.size(), all, static_cast<long long>(total_bytes(plans)));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    reshard_mpi_test::harness h(MPI_COMM_WORLD, "mpi.lenet");
    if (h.size() < 5) {
      if (h.rank() == 0) std::fprintf(stderr, "mpi.lenet needs 5 processes (one per worker)\n");
      h.check(false, "needs 5 processes");
    } else {
      const op_graph tutorial = lenet::tutorial_graph(), colocated = lenet::colocated_graph();
      op_graph sharded = colocated;
      for (auto& o : sharded.ops)
        if (o.name == "fc1" || o.name == "relu3") o.where = on_mesh({2}, {shard{0}}, 0);
      execute(h, "tutorial placement, forward", forward_plans(tutorial));
      execute(h, "tutorial placement, backward", backward_plans(tutorial));
      execute(h, "colocated relu/pool, forward", forward_plans(colocated));
      execute(h, "colocated relu/pool, backward", backward_plans(colocated));
      execute(h, "fc1 split over workers 0-1, forward", forward_plans(sharded));
      execute(h, "fc1 split over workers 0-1, backward", backward_plans(sharded));
    }
    code = h.finish();
  }
  MPI_Finalize();
  return code;
}
