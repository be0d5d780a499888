// The routing rule (DepthwiseConvRouting.h) asked about each measured point with its own layer's
// points left out: how the table routes a layer it has not measured (build_scripts/routing_held_out.py).
//
// stdin, enums as numbers:
//   points <count>, then a line a point: <layer> <pass> <dtype> <layout> <kernel_h> <kernel_w>
//     <stride_h> <stride_w> <input_elements> <plane_elements> <route>
//   queries <count>, then a line a query: <layer> <pass> <dtype> <layout> <kernel_h> <kernel_w>
//     <stride_h> <stride_w> <batch> <channels> <height> <width>
// stdout: a line a query, the route measured_route gives it from the points of the other layers.
#include <ATen/native/cuda/DepthwiseConvRouting.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

using namespace at::native::dwconv::routing;

namespace {

template <typename E>
E read_enum(std::istream& in) {
  int v = 0;
  in >> v;
  return static_cast<E>(v);
}

[[noreturn]] void fail(const std::string& what) {
  std::cerr << "routing_held_out: " << what << "\n";
  std::exit(2);
}

std::size_t read_count(std::istream& in, const char* word) {
  std::string seen;
  std::size_t count = 0;
  if (!(in >> seen >> count) || seen != word) fail(std::string("expected '") + word + " <count>'");
  return count;
}

} // namespace

int main() {
  std::size_t count = read_count(std::cin, "points");
  std::vector<int> layers(count);
  std::vector<MeasuredPoint> points(count);
  for (std::size_t i = 0; i < count; ++i) {
    MeasuredPoint& m = points[i];
    std::cin >> layers[i];
    m.pass = read_enum<Pass>(std::cin);
    m.dtype = read_enum<DType>(std::cin);
    m.layout = read_enum<Layout>(std::cin);
    std::cin >> m.kernel_h >> m.kernel_w >> m.stride_h >> m.stride_w >> m.input_elements >> m.plane_elements;
    m.fastest = read_enum<Route>(std::cin);
    if (!std::cin) fail("malformed point line " + std::to_string(i + 1));
  }
  count = read_count(std::cin, "queries");
  std::vector<MeasuredPoint> others;
  for (std::size_t i = 0; i < count; ++i) {
    int layer = 0;
    Problem p{};
    std::cin >> layer;
    const Pass pass = read_enum<Pass>(std::cin);
    p.dtype = read_enum<DType>(std::cin);
    p.layout = read_enum<Layout>(std::cin);
    std::cin >> p.kernel_h >> p.kernel_w >> p.stride_h >> p.stride_w >> p.batch >> p.channels >> p.height >> p.width;
    if (!std::cin) fail("malformed query line " + std::to_string(i + 1));
    others.clear();
    for (std::size_t j = 0; j < points.size(); ++j) {
      if (layers[j] != layer) others.push_back(points[j]);
    }
    std::cout << route_name(measured_route(p, pass, others)) << "\n";
  }
  return 0;
}
