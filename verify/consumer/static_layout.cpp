// Linked to reshard::static (component static): the compile-time layer, Boost.Hana included,
// from the imported targets alone. main.cpp exercises the core without it.
#include <reshard/static_layout.hpp>

int main() {
  constexpr auto a = reshard::make_static_layout(reshard::list<2, 4>, reshard::list<1, -1>,
                                                 reshard::list<8, 4>);
  static_assert(reshard::static_slice_shape(a) == reshard::list<4, 4>);
  return reshard::to_layout(a).shape.size() == 2 ? 0 : 1;
}
