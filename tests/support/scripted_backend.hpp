// An executor backend whose answers a test sets, for tests of the shells
// around a backend (the executor, copy engine and scheduler actors): every call is
// written to `calls` in order ("step 2" for a step of two entries, "load 5",
// "swap out 9" and "swap in 9" (naming the first device page), "drop 5",
// "forget 5").
#pragma once

#include "gpu/backend.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace troupe::testing {

class scripted_backend final : public gpu::executor_backend {
public:
  /// Device time of every step; token 7 for each entry.
  double step_seconds = 0;
  /// Modelled time of every adapter load and swap.
  double copy_seconds = 0;
  /// Adapters whose load fails.
  std::set<std::uint32_t> failing;
  /// Requests whose entries the backend cannot run (token -1, a failure).
  std::set<std::uint64_t> failing_requests;
  std::vector<std::string> calls;

  gpu::step_result run_step(std::span<const gpu::step_entry> batch) override {
    calls.push_back("step " + std::to_string(batch.size()));
    gpu::step_result r{std::vector<std::int32_t>(batch.size(), 7), {}, {}, step_seconds, {}};
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (failing_requests.contains(batch[i].request_id)) {
        r.tokens[i] = -1;
        r.failures.push_back({batch[i].request_id, "scripted to fail"});
      }
    return r;
  }
  double transfer_seconds(std::uint64_t) const override { return copy_seconds; }
  gpu::adapter_load load_adapter(std::uint32_t id, const std::string&, std::uint64_t,
                                 std::span<const std::uint32_t>) override {
    calls.push_back("load " + std::to_string(id));
    if (failing.contains(id))
      return {"adapter " + std::to_string(id) + " is scripted to fail", false, 0, 0};
    return {{}, false, 0, copy_seconds};
  }
  void drop_adapter(std::uint32_t id) override { calls.push_back("drop " + std::to_string(id)); }
  void forget_adapter(std::uint32_t id) override { calls.push_back("forget " + std::to_string(id)); }
  gpu::swap_result swap_pages(gpu::swap_direction dir, std::span<const std::uint32_t> device_pages,
                              std::span<const std::uint32_t>, std::uint64_t) override {
    calls.push_back(std::string{dir == gpu::swap_direction::out ? "swap out " : "swap in "}
                    + std::to_string(device_pages.empty() ? 0 : device_pages.front()));
    return {{}, copy_seconds};
  }
  /// Host pages read out (the disk tier's writes): `bytes` of zeros.
  gpu::page_blob read_pages(bool host_pool, std::span<const std::uint32_t> pages, std::uint64_t bytes) override {
    calls.push_back(std::string{host_pool ? "read host " : "read device "}
                    + std::to_string(pages.empty() ? 0 : pages.front()));
    return {{}, std::string(bytes, '\0'), copy_seconds};
  }
  gpu::swap_result write_host_pages(std::span<const std::uint32_t> host_pages, const std::string&,
                                    std::uint64_t) override {
    calls.push_back("write host " + std::to_string(host_pages.empty() ? 0 : host_pages.front()));
    return {{}, copy_seconds};
  }
  std::vector<std::pair<std::string, double>> counters() const override {
    return {{"scripted_calls", static_cast<double>(calls.size())}};
  }
  const gpu::tokenizer& vocab() const override { return bytes_; }
  std::string name() const override { return "scripted"; }

private:
  struct byte_tokenizer final : gpu::tokenizer {
    std::vector<std::int32_t> encode(const std::string& text) const override {
      return {text.begin(), text.end()};
    }
    std::string decode(std::int32_t token) const override { return std::string(1, static_cast<char>(token)); }
    std::int32_t vocab_size() const override { return 256; }
    std::int32_t eos_token() const override { return -1; }
  } bytes_;
};

} // namespace troupe::testing
