// The backend factory's choices and refusals that need no model: which
// backends this binary has, what a backend that reads files demands of its
// adapters, the pages an adapter takes where the backend lays adapters out
// its own way, and the cuda backend's answer on a machine without a GPU.
#include "runtime/backend_factory.hpp"

#if TROUPE_HAVE_CUDA_BACKEND
#include <cuda_runtime_api.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace troupe {
namespace {

std::string error_of(const std::variant<resolved_backend, std::string>& r) {
  const auto* err = std::get_if<std::string>(&r);
  return err ? *err : std::string{};
}

TEST(backend_factory, knows_the_backends_this_binary_has) {
  const auto backends = default_catalog().backends;
  EXPECT_NE(std::find(backends.begin(), backends.end(), "cpu"), backends.end());
  EXPECT_NE(std::find(backends.begin(), backends.end(), "sim"), backends.end());
  const bool cuda = std::find(backends.begin(), backends.end(), "cuda") != backends.end();
  EXPECT_EQ(cuda, TROUPE_HAVE_CUDA_BACKEND + 0 == 1);
  deployment_options o;
  o.backend.kind = "tpu";
  const auto err = error_of(make_backend(o));
  EXPECT_NE(err.find("\"tpu\" is not built into this binary"), std::string::npos) << err;
  EXPECT_NE(err.find(cuda ? "cpu, sim, cuda" : "cpu, sim"), std::string::npos) << err;
}

TEST(backend_factory, backends_that_compute_need_a_model_path) {
  for (const auto& kind : default_catalog().backends) {
    if (kind == "sim")
      continue;
    deployment_options o;
    o.backend.kind = kind;
    EXPECT_EQ(error_of(make_backend(o)), "model.path: required when backend.kind is \"" + kind + "\"");
  }
}

#if TROUPE_HAVE_CUDA_BACKEND
TEST(backend_factory, cuda_says_first_that_no_device_is_visible_then_what_is_wrong_with_the_model) {
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  deployment_options o;
  o.backend.kind = "cuda";
  o.model.path = "/nowhere";
  const auto err = error_of(make_backend(o));
  // Without a GPU nothing is read; with one, the missing model is the fault.
  const std::string want = gpu ? "model.path: " : "backend.kind \"cuda\": no CUDA device is visible";
  EXPECT_EQ(err.rfind(want, 0), 0u) << err;
}
#endif

TEST(backend_factory, adapters_of_a_backend_reading_files_need_a_path) {
  for (const std::string kind : {"cpu", "cuda"}) {
    deployment_options o;
    o.backend.kind = kind;
    o.adapters.push_back({"sql", 8, ""});
    resolved_backend rb;
    rb.page_bytes = 4096;
    const auto c = make_adapter_catalog(o, rb);
    ASSERT_TRUE(std::holds_alternative<std::string>(c)) << kind;
    EXPECT_EQ(std::get<std::string>(c),
              "adapters[0]: the " + kind + " backend loads PEFT files, but adapter \"sql\" has no path");
  }
}

TEST(backend_factory, an_adapters_pages_come_from_the_backends_own_size_when_it_has_one) {
  deployment_options o; // sim: adapters need no files
  o.adapters.push_back({"small", 8, ""});
  o.adapters.push_back({"big", 64, ""});
  resolved_backend rb;
  rb.shape = *gpu::find_model_preset("llama-2-7b");
  rb.page_bytes = 1 << 20;
  auto by_shape = make_adapter_catalog(o, rb);
  ASSERT_TRUE(std::holds_alternative<adapter_catalog>(by_shape)) << std::get<std::string>(by_shape);
  const auto* small = std::get<adapter_catalog>(by_shape).find("small");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->bytes, rb.shape.lora_adapter_bytes(8));
  EXPECT_EQ(small->pages, (small->bytes + rb.page_bytes - 1) / rb.page_bytes);

  // Whole rows in whole pages: 3 pages per rank-8 step of rows, say.
  rb.adapter_bytes = [&](std::uint32_t rank) { return std::uint64_t{rank / 8 * 3} * rb.page_bytes; };
  auto own = make_adapter_catalog(o, rb);
  ASSERT_TRUE(std::holds_alternative<adapter_catalog>(own)) << std::get<std::string>(own);
  EXPECT_EQ(std::get<adapter_catalog>(own).find("small")->pages, 3u);
  EXPECT_EQ(std::get<adapter_catalog>(own).find("big")->pages, 24u);
}

// A model whose rope scaling stretches its pretrained context admits the
// stretched length (Qwen2.5's YaRN setting), unless model.max_context lowers it.
TEST(backend_factory, a_yarn_models_requests_may_fill_the_stretched_context) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_factory_yarn_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 32768,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})";
  deployment_options o;
  o.backend.kind = "cpu";
  o.model.path = dir.string();
  const auto stretched = describe_hf_model(o, 4);
  ASSERT_TRUE(std::holds_alternative<hf_model>(stretched)) << std::get<std::string>(stretched);
  EXPECT_EQ(std::get<hf_model>(stretched).resolved.max_context, 131072u);
  EXPECT_EQ(std::get<hf_model>(stretched).resolved.shape.max_context, 131072u);
  o.model.max_context = 40000;
  const auto lowered = describe_hf_model(o, 4);
  ASSERT_TRUE(std::holds_alternative<hf_model>(lowered)) << std::get<std::string>(lowered);
  EXPECT_EQ(std::get<hf_model>(lowered).resolved.max_context, 40000u);
  std::filesystem::remove_all(dir);
}

TEST(backend_factory, the_sim_prices_steps_with_the_configured_cost_table) {
  deployment_options o;
  o.backend.kind = "sim";
  auto plain = make_backend(o);
  ASSERT_TRUE(std::holds_alternative<resolved_backend>(plain)) << error_of(plain);
  o.backend.cost = {{"pcie_bytes_per_s", 1e9}, {"transfer_latency_seconds", 0}};
  auto costed = make_backend(o);
  ASSERT_TRUE(std::holds_alternative<resolved_backend>(costed)) << error_of(costed);
  const auto& rb = std::get<resolved_backend>(costed);
  EXPECT_DOUBLE_EQ(rb.backend->transfer_seconds(1'000'000'000), 1.0);
  EXPECT_NE(std::get<resolved_backend>(plain).backend->transfer_seconds(1'000'000'000), 1.0);
  EXPECT_EQ(rb.gpu.pcie_bytes_per_s, 1e9); // the deployment's GPU is the one priced
  o.backend.cost = {{"pcie_eficiency", 1}};
  EXPECT_NE(error_of(make_backend(o)).find("backend.cost: unknown cost constant \"pcie_eficiency\""),
            std::string::npos);
}

} // namespace
} // namespace troupe
