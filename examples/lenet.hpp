// examples/lenet.hpp: the LeNet-5 graph of MindSpore's distributed graph partition tutorial,
// with its operators placed on workers. Used by examples/lenet_placement.cpp (the transfers) and
// verify/mpi/lenet.cpp (the same transfers executed over MPI by 5 processes).
//
// The tutorial's network (lenet.py) on MNIST resized to 32x32, batch 32, NCHW:
//   x [32,1,32,32] -> conv1 Conv2d(1,6,5,valid) -> relu -> max_pool2d(2,2)
//                  -> conv2 Conv2d(6,16,5,valid) -> relu -> max_pool2d(2,2) -> flatten
//                  -> fc1 Dense(400,120) -> relu -> fc2 Dense(120,84) -> relu
//                  -> fc3 Dense(84,10) -> SoftmaxCrossEntropyWithLogits
// and its placement: fc1 -> worker 0, fc2 -> 1, fc3 -> 2, conv1 -> 3, conv2 -> 4.
//
// The operators the tutorial does not place (the shared self.relu and self.max_pool2d cells,
// flatten, the loss) get MindSpore's default label, worker 0 (GraphSplitter's default_label_ is
// rank 0 of MS_WORKER). Each call of a shared cell is its own node of the graph, so relu1..relu4
// and pool1, pool2 are separate operators, all on worker 0. The input x and the labels are graph
// inputs that every worker reads from its own dataset pipeline: they cross no edge.
#pragma once

#include <string>
#include <vector>

#include "reshard/placement.hpp"

namespace lenet {

using reshard::index_list;
using reshard::index_t;

inline constexpr index_t batch = 32;

/// Activation shapes, derived layer by layer: valid 5x5 convolutions shrink a side by 4, the 2x2
/// pools of stride 2 halve it.
inline const index_list conv1_out{batch, 6, 28, 28};   // 32 - 5 + 1 = 28
inline const index_list pool1_out{batch, 6, 14, 14};   // 28 / 2
inline const index_list conv2_out{batch, 16, 10, 10};  // 14 - 5 + 1 = 10
inline const index_list pool2_out{batch, 16, 5, 5};    // 10 / 2
inline const index_list flat{batch, 400};              // 16 * 5 * 5
inline const index_list fc1_out{batch, 120};
inline const index_list fc2_out{batch, 84};
inline const index_list fc3_out{batch, 10};  // logits

/// The tutorial's placement, unplaced operators on worker 0 (MindSpore's default label).
inline reshard::op_graph tutorial_graph() {
  using reshard::on_worker;
  reshard::op_graph g;
  g.ops = {{"conv1", on_worker(3)}, {"relu1", on_worker(0)},   {"pool1", on_worker(0)},
           {"conv2", on_worker(4)}, {"relu2", on_worker(0)},   {"pool2", on_worker(0)},
           {"flatten", on_worker(0)}, {"fc1", on_worker(0)},   {"relu3", on_worker(0)},
           {"fc2", on_worker(1)},   {"relu4", on_worker(0)},   {"fc3", on_worker(2)},
           {"loss", on_worker(0)}};
  g.edges = {{"conv1", "relu1", "conv1.out", conv1_out, 4},
             {"relu1", "pool1", "relu1.out", conv1_out, 4},
             {"pool1", "conv2", "pool1.out", pool1_out, 4},
             {"conv2", "relu2", "conv2.out", conv2_out, 4},
             {"relu2", "pool2", "relu2.out", conv2_out, 4},
             {"pool2", "flatten", "pool2.out", pool2_out, 4},
             {"flatten", "fc1", "flatten.out", flat, 4},
             {"fc1", "relu3", "fc1.out", fc1_out, 4},
             {"relu3", "fc2", "relu3.out", fc1_out, 4},
             {"fc2", "relu4", "fc2.out", fc2_out, 4},
             {"relu4", "fc3", "relu4.out", fc2_out, 4},
             {"fc3", "loss", "logits", fc3_out, 4}};
  return g;
}

/// The same network with one ReLU/pool/flatten per use, each placed with the layer before it
/// (separate cells: placing the shared self.relu would put every use on one worker).
inline reshard::op_graph colocated_graph() {
  reshard::op_graph g = tutorial_graph();
  const auto place = [&](const std::string& name, index_t worker) {
    for (auto& o : g.ops)
      if (o.name == name) o.where = reshard::on_worker(worker);
  };
  place("relu1", 3), place("pool1", 3);
  place("relu2", 4), place("pool2", 4), place("flatten", 4);
  place("relu3", 0);
  place("relu4", 1);
  return g;
}

}  // namespace lenet
