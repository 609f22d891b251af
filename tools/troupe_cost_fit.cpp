// troupe-cost-fit: fits the sim cost model to a GPU's measurements. Reads
// troupe-gpu-bench's JSON (its timed steps on the cuda backend and the
// pinned host-to-device rate), fits the fixed step cost and the HBM and
// tensor-core efficiencies (gpu::fit_cost_constants), and prints the fit
// beside the measurements, then the same constants as a config line for
// `[backend]` and as troupe-sim's --cost.
//
//   troupe-cost-fit --bench results/bench.json [--gpu H100-80GB] [--model llama-2-7b]
#include "gpu/cost_fit.hpp"
#include "gpu/model_shape.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace troupe;

constexpr const char* usage =
  "usage: troupe-cost-fit --bench FILE [--gpu NAME] [--model NAME]\n"
  "  --bench FILE   troupe-gpu-bench's JSON (tools/gpu-check.sh writes bench.json)\n"
  "  --gpu NAME     the GPU preset the efficiencies are relative to (default H100-80GB)\n"
  "  --model NAME   the model preset the benchmark ran (default llama-2-7b; its layer\n"
  "                 count comes from the benchmark)\n";

int run(const std::string& bench, const std::string& gpu_name, const std::string& model_name) {
  std::ifstream in(bench);
  if (!in) {
    std::cerr << "troupe-cost-fit: cannot read " << bench << "\n";
    return 2;
  }
  const auto j = nlohmann::json::parse(in);
  if (j.value("smoke", false)) {
    std::cerr << "troupe-cost-fit: " << bench << " is from troupe-gpu-bench --smoke (a tiny model; "
              << "its times mean nothing): run the benchmark without --smoke\n";
    return 2;
  }
  auto shape = gpu::find_model_preset(model_name);
  auto spec = gpu::find_gpu_spec(gpu_name);
  if (!shape || !spec) {
    std::cerr << "troupe-cost-fit: unknown " << (!shape ? "model " + model_name : "GPU " + gpu_name) << "\n";
    return 2;
  }
  shape->num_layers = j.at("layers").get<std::uint32_t>();
  std::map<std::string, double> rates;
  if (j.contains("h2d_pinned_bytes_per_s"))
    rates["pcie_bytes_per_s"] = j.at("h2d_pinned_bytes_per_s").get<double>();
  gpu::cost_constants start; // the rates only; the constants are fitted below
  if (auto error = gpu::apply_cost_overrides(rates, start, *spec)) {
    std::cerr << "troupe-cost-fit: " << *error << "\n";
    return 2;
  }
  std::vector<gpu::measured_step> steps;
  for (const auto& s : j.at("steps")) {
    gpu::measured_step m;
    const auto n = s.at("sequences").get<std::uint32_t>();
    const auto rank = s.at("adapter_rank").get<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) {
      gpu::step_entry e;
      e.context_tokens = s.at("context_tokens").get<std::uint32_t>();
      e.new_tokens = s.at("new_tokens").get<std::uint32_t>();
      if (rank > 0) { // each sequence its own adapter, as the benchmark runs them
        e.adapter_id = i + 1;
        e.adapter_rank = rank;
      }
      m.batch.push_back(e);
    }
    m.seconds = s.at("ms").get<double>() * 1e-3;
    steps.push_back(std::move(m));
  }
  const auto fit = gpu::fit_cost_constants(*shape, *spec, steps, start);
  std::printf("troupe-cost-fit: %zu steps measured on %s, priced as %s (%u layers) on %s\n",
              steps.size(), j.value("gpu", std::string("?")).c_str(), shape->name.c_str(),
              shape->num_layers, spec->name.c_str());
  std::printf("%-34s %12s %12s %8s  %s\n", "step", "measured ms", "fitted ms", "error", "bound");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& e = steps[i].batch.front();
    char what[64];
    std::snprintf(what, sizeof what, "%zu x (%u + %u tokens)%s", steps[i].batch.size(), e.context_tokens,
                  e.new_tokens, e.adapter_rank ? (", rank " + std::to_string(e.adapter_rank)).c_str() : "");
    std::printf("%-34s %12.3f %12.3f %+7.1f%%  %s\n", what, steps[i].seconds * 1e3, fit.predicted[i] * 1e3,
                100.0 * (fit.predicted[i] / steps[i].seconds - 1.0), fit.compute_bound[i] ? "compute" : "memory");
  }
  const auto& c = fit.constants;
  char line[512];
  std::snprintf(line, sizeof line,
                "flops_efficiency = %.4f, hbm_efficiency = %.4f, step_overhead_seconds = %.6g, "
                "pcie_bytes_per_s = %.4g",
                c.flops_efficiency, c.hbm_efficiency, c.step_overhead_seconds, spec->pcie_bytes_per_s);
  std::printf("\n[backend] (kind = \"sim\", gpu = \"%s\"):\ncost = { %s }\n", spec->name.c_str(), line);
  std::printf("\ntroupe-sim --gpu %s --cost flops_efficiency=%.4f,hbm_efficiency=%.4f,"
              "step_overhead_seconds=%.6g,pcie_bytes_per_s=%.4g\n",
              spec->name.c_str(), c.flops_efficiency, c.hbm_efficiency, c.step_overhead_seconds,
              spec->pcie_bytes_per_s);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string bench, gpu_name = "H100-80GB", model = "llama-2-7b";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--bench" || a == "--gpu" || a == "--model") && i + 1 < argc) {
      (a == "--bench" ? bench : a == "--gpu" ? gpu_name : model) = argv[++i];
    } else {
      std::cerr << usage << (a == "--help" || a == "-h" ? "" : "troupe-cost-fit: unknown argument " + a + "\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (bench.empty()) {
    std::cerr << usage;
    return 2;
  }
  try {
    return run(bench, gpu_name, model);
  } catch (const std::exception& e) { // JSON missing a field, a fit that cannot be made
    std::cerr << "troupe-cost-fit: " << e.what() << "\n";
    return 1;
  }
}
