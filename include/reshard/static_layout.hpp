// reshard/static_layout.hpp: layouts known at compile time, carried by Boost.Hana.
//
// One integer vocabulary: an entry of the device matrix or of the shape is either a static
// integer (`reshard::c<4>`, a hana::integral_constant) or a dynamic `index_t`. The tensor map is
// always static. Results of static-only arithmetic stay static:
//
//   constexpr auto a = reshard::make_static_layout(reshard::list<2, 4>, reshard::list<1, -1>,
//                                                  reshard::list<8, 4>);
//   static_assert(reshard::static_slice_shape(a) == reshard::list<4, 4>);   // a type-level fact
//   constexpr auto cost = reshard::static_plan_cost(a, b, reshard::c<4>);  // planned by the compiler
//
// Violations decidable at compile time are static_asserts whose message starts with the
// operation's name; the rest is checked by reshard::validate when converting with to_layout().
#pragma once

#include <boost/hana.hpp>

#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

namespace hana = boost::hana;

/// A static integer of reshard's vocabulary.
template <index_t N>
inline constexpr hana::integral_constant<index_t, N> c{};

/// A static list (device matrix, tensor map or shape).
template <index_t... N>
inline constexpr hana::tuple<hana::integral_constant<index_t, N>...> list{};

/// A static tuple entry of a tensor map: several device axes on one dim, leftmost outermost.
template <index_t... Axes>
inline constexpr hana::tuple<hana::integral_constant<index_t, Axes>...> axes{};

/// A layout whose tensor map is static; device matrix and shape entries static or dynamic.
template <class Dev, class Map, class Shape>
struct static_layout {
  Dev dev;
  Map map;
  Shape shape;
};

namespace detail {

template <class T>
inline constexpr bool is_static_int = hana::IntegralConstant<T>::value;

template <class T>
constexpr index_t value_of(const T& v) {
  if constexpr (is_static_int<T>)
    return T::value;
  else
    return static_cast<index_t>(v);
}

// Axes (right-counted) of one map entry as a hana tuple; -1 alone means none.
template <class E>
constexpr auto entry_axes(E e) {
  if constexpr (hana::Sequence<E>::value)
    return e;
  else if constexpr (E::value == -1)
    return hana::make_tuple();
  else
    return hana::make_tuple(e);
}

// Number of slices of a dim split by entry `e` of a map over `dev` (static when dev is).
template <class Dev, class E>
constexpr auto slices_of(const Dev& dev, E e) {
  constexpr auto n = decltype(hana::length(dev))::value;
  return hana::fold_left(entry_axes(e), c<1>, [&](auto acc, auto axis) {
    constexpr index_t a = decltype(axis)::value;
    static_assert(a >= 0 && a < static_cast<index_t>(n),
                  "static_layout: a tensor map axis is out of range for the device matrix");
    return acc * hana::at_c<static_cast<std::size_t>(static_cast<index_t>(n) - 1 - a)>(dev);
  });
}

template <class Map>
constexpr bool axes_distinct() {
  constexpr auto flat = hana::flatten(hana::transform(Map{}, [](auto e) { return entry_axes(e); }));
  bool ok = true;
  hana::for_each(flat, [&](auto x) {
    int count = 0;
    hana::for_each(flat, [&](auto y) { count += (decltype(x)::value == decltype(y)::value); });
    ok = ok && count == 1;
  });
  return ok;
}

}  // namespace detail

/// Builds a static layout, checking at compile time what is static.
template <class Dev, class Map, class Shape>
constexpr auto make_static_layout(Dev dev, Map map, Shape shape) {
  static_assert(decltype(hana::length(map) == hana::length(shape))::value,
                "make_static_layout: the tensor map and the shape have different lengths");
  static_assert(detail::axes_distinct<Map>(),
                "make_static_layout: a device axis splits more than one dim");
  hana::for_each(hana::zip(map, shape), [&](auto ms) {
    const auto slices = detail::slices_of(dev, hana::at_c<0>(ms));
    using S = decltype(slices);
    using N = std::remove_cvref_t<decltype(hana::at_c<1>(ms))>;
    if constexpr (detail::is_static_int<S> && detail::is_static_int<N>)
      static_assert(N::value % S::value == 0,
                    "make_static_layout: a dim does not divide into equal slices");
  });
  return static_layout<Dev, Map, Shape>{dev, map, shape};
}

/// The shape of every rank's slice (static where the inputs are).
template <class D, class M, class S>
constexpr auto static_slice_shape(const static_layout<D, M, S>& l) {
  return hana::transform(hana::zip(l.map, l.shape), [&](auto ms) {
    return hana::at_c<1>(ms) / detail::slices_of(l.dev, hana::at_c<0>(ms));
  });
}

/// Number of ranks (static where the device matrix is).
template <class D, class M, class S>
constexpr auto static_num_ranks(const static_layout<D, M, S>& l) {
  return hana::fold_left(l.dev, c<1>, [](auto a, auto b) { return a * b; });
}

/// The equivalent dynamic layout (validated).
template <class D, class M, class S>
constexpr layout to_layout(const static_layout<D, M, S>& l) {
  index_list dev, shape;
  hana::for_each(l.dev, [&](auto v) { dev.push_back(detail::value_of(v)); });
  hana::for_each(l.shape, [&](auto v) { shape.push_back(detail::value_of(v)); });
  tensor_map map;
  hana::for_each(l.map, [&](auto e) {
    if constexpr (hana::Sequence<decltype(e)>::value) {
      std::vector<index_t> t;
      hana::for_each(e, [&](auto a) { t.push_back(decltype(a)::value); });
      map.emplace_back(std::move(t));
    } else {
      map.emplace_back(index_t{decltype(e)::value});
    }
  });
  return mindspore_layout(std::move(dev), map, std::move(shape));
}

/// The cost of redistributing between two static layouts, computed by the compiler when used
/// in a constant expression (the plan itself is transient).
template <class A, class B, class E>
constexpr plan_cost static_plan_cost(const A& src, const B& dst, E element_bytes) {
  return plan(to_layout(src), to_layout(dst)).cost(detail::value_of(element_bytes));
}

}  // namespace reshard
