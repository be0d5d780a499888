// Test driver: the routing rule of DepthwiseConvRouting.h, compiled with g++ (no ATen, no GPU)
// against whichever DepthwiseConvRoutingTable.h comes first on the include path.
//
// Reads one call per line from stdin: a mode, the GPU's compute capability (90 for sm_90), then the
// ConvCall fields in declaration order (arrays element by element, enums as numbers, bools as 0/1). Prints one line per call, each
// route as route_name gives it (upstream, ours, cudnn; upstream where the call is not eligible):
//   eligible <0|1> forward <route> backward_input <route> backward_weight <route>
//   batch .. dilation_w layout conv1d | <reason>
// With --explain, an eligible call's line is followed by explain_route's words for each pass:
//   explain <pass> <words>
// With --table <file>, the calls are routed by the table that file holds (parse_routing_table), as
// DWCONV_ROUTING_TABLE routes them; a file it refuses prints `table error: <why>` and exits 3.
#include <ATen/native/cuda/DepthwiseConvRoutingTable.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

using namespace at::native::dwconv::routing;

namespace {

template <typename E>
E read_enum(std::istream& in) {
  int v;
  in >> v;
  return static_cast<E>(v);
}

bool read_call(std::istream& in, Mode* mode, int* gpu_arch, ConvCall* c) {
  std::string mode_text;
  if (!(in >> mode_text)) return false;
  if (!parse_mode(mode_text.c_str(), mode)) {
    std::cerr << "bad mode " << mode_text << "\n";
    std::exit(2);
  }
  in >> *gpu_arch >> c->input_dim;
  for (auto& v : c->input_sizes) in >> v;
  in >> c->weight_dim;
  for (auto& v : c->weight_sizes) in >> v;
  in >> c->stride_len >> c->padding_len >> c->dilation_len >> c->output_padding_len;
  for (auto* list : {&c->stride, &c->padding, &c->dilation, &c->output_padding}) {
    for (auto& v : *list) in >> v;
  }
  in >> c->transposed >> c->groups >> c->tensors_on_one_cuda_device >> c->one_dtype;
  c->dtype = read_enum<DType>(in);
  in >> c->has_bias >> c->bias_dim >> c->bias_numel;
  c->input_layout = read_enum<Layout>(in);
  c->weight_layout = read_enum<Layout>(in);
  in >> c->cudnn_enabled;
  if (!in) {
    std::cerr << "malformed call line\n";
    std::exit(2);
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  bool explain = false;
  std::unique_ptr<RoutingTable> loaded;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--explain") {
      explain = true;
    } else if (arg == "--table" && a + 1 < argc) {
      std::ifstream file(argv[++a]);
      const bool opened = file.is_open();
      std::string error = "cannot be opened";
      if (opened) loaded = parse_routing_table(file, argv[a], &error);
      if (!loaded) {
        std::cout << "table error: " << error << "\n";
        return 3;
      }
    } else {
      std::cerr << "usage: route_query [--explain] [--table <file>]\n";
      return 2;
    }
  }
  const std::vector<MeasuredPoint> compiled_in(kMeasuredPoints.begin(), kMeasuredPoints.end());
  const std::vector<MeasuredPoint>& points = loaded ? loaded->points : compiled_in;
  const int measured_arch = loaded ? loaded->measured_arch : kMeasuredArch;
  Mode mode;
  int gpu_arch;
  ConvCall call;
  while (read_call(std::cin, &mode, &gpu_arch, &call)) {
    const Mode routed = mode_on_gpu(mode, gpu_arch, measured_arch);
    const Eligibility e = depthwise_problem(call);
    const Problem& p = e.problem;
    std::cout << "eligible " << e.eligible;
    for (const Pass pass : kPasses) {
      std::cout << " " << pass_name(pass) << " " << route_name(e.eligible ? route_of(p, pass, routed, points) : Route::Upstream);
    }
    if (!e.eligible) {
      std::cout << " | " << e.reason << "\n";
      continue;
    }
    std::cout << " " << p.batch << " " << p.channels << " " << p.multiplier << " " << p.height << " " << p.width << " "
              << p.out_height << " " << p.out_width << " " << p.kernel_h << " " << p.kernel_w << " " << p.stride_h << " "
              << p.stride_w << " " << p.pad_h << " " << p.pad_w << " " << p.dilation_h << " " << p.dilation_w << " "
              << static_cast<int>(p.layout) << " " << p.conv1d << "\n";
    for (const Pass pass : kPasses) {
      if (explain) std::cout << "explain " << pass_name(pass) << " " << explain_route(p, pass, mode, gpu_arch, measured_arch, points) << "\n";
    }
  }
  return 0;
}
