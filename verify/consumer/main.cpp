// The program every consumer project builds: plan the seed scenario 8 ranks -> 4 ranks.
#include <reshard.hpp>

int main() {
  auto p = reshard::plan(reshard::mindspore_layout({2, 4}, {1, -1}, {8, 4}),
                         reshard::mindspore_layout({4}, {0, -1}, {8, 4}));
  return p.transfers.empty() ? 1 : 0;
}
