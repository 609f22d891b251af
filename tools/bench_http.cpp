// run_open_loop_http (tools/bench_driver.hpp): the open-loop load generator
// over the OpenAI-compatible HTTP front, a thread per request in flight.
#include "tools/bench_driver.hpp"
#include "tools/http_client.hpp"

#include <nlohmann/json.hpp>

#include <sys/socket.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

/// What the requests' threads share with the run, alive until the last
/// thread ends.
struct shared_run {
  std::mutex mutex;
  std::condition_variable all_done;
  std::vector<workload::request_record> out;
  /// Each request's socket while it waits for its answer (-1: none).
  std::vector<int> sockets;
  std::size_t done = 0;
};

/// One request: sends it, reads its events as they come, fills `r`.
void run_one(const workload::request& q, std::size_t index, const http_open_loop_options& opt, double scale,
             clock_type::time_point t0, shared_run& run) {
  auto& r = run.out[index];
  auto now = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };
  const double sent = now();
  // The same token ids as run_open_loop's (so both fronts run the same work).
  json prompt = workload::prompt_of(index, q.prompt_tokens, opt.shared_prefix, opt.prefix_groups);
  json body = {{"model", q.adapter == workload::none_adapter ? opt.model
                                                             : opt.adapter_prefix + std::to_string(q.adapter)},
               {"prompt", std::move(prompt)},
               {"max_tokens", q.output_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (opt.ignore_eos)
    body["ignore_eos"] = true;
  if (q.priority != 0)
    body["priority"] = q.priority;
  auto c = http_client::connect(opt.endpoint);
  if (std::holds_alternative<std::string>(c)) {
    r.outcome = "send_failed";
    return;
  }
  auto& client = *std::get<std::unique_ptr<http_client>>(c);
  if (!opt.api_key.empty())
    client.set_api_key(opt.api_key);
  {
    std::lock_guard lock(run.mutex);
    run.sockets[index] = client.native_handle();
  }
  double first = -1, last = -1;
  std::uint32_t events = 0, completion = 0;
  std::vector<double> gaps;
  std::string pending, raw, finish;
  auto on_body = [&](std::string_view data) {
    if (raw.size() < 65536)
      raw.append(data); // an error's body
    pending.append(data);
    for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      const std::string_view ev(pending.data(), end);
      if (!ev.starts_with("data: ") || ev == "data: [DONE]")
        continue;
      const auto j = json::parse(ev.substr(6), nullptr, false);
      if (!j.is_object())
        continue;
      if (auto e = j.find("error"); e != j.end()) {
        finish = e->value("code", "error");
        continue;
      }
      if (auto u = j.find("usage"); u != j.end() && u->is_object())
        completion = u->value("completion_tokens", 0u);
      const auto& choices = j.value("choices", json::array());
      if (choices.empty())
        continue;
      if (const auto& f = choices[0]["finish_reason"]; f.is_string())
        finish = f.get<std::string>();
      if (choices[0].value("text", "").empty())
        continue;
      const double t = now();
      if (first < 0)
        first = t;
      else
        gaps.push_back(t - last);
      last = t;
      ++events;
    }
  };
  const auto status = client.request_streaming("POST", "/v1/completions", body.dump(), on_body);
  const double ended = now();
  {
    std::lock_guard lock(run.mutex);
    run.sockets[index] = -1;
  }
  if (std::holds_alternative<std::string>(status))
    return; // lost: no answer in time
  if (std::get<int>(status) != 200) {
    const auto j = json::parse(raw, nullptr, false);
    r.outcome = j.is_object() && j.contains("error") ? j["error"].value("code", "error") : "http_error";
    r.e2e_s = (ended - sent) / scale;
    return;
  }
  r.outcome = finish.empty() ? "lost" : finish;
  r.completion_tokens = completion;
  r.e2e_s = (ended - sent) / scale;
  if (first >= 0)
    r.ttft_s = (first - sent) / scale;
  if (completion >= 2 && first >= 0)
    r.tbt_mean_s = (last - first) / scale / static_cast<double>(completion - 1);
  if (!gaps.empty())
    r.tbt_p99_s = workload::percentile(std::move(gaps), 99) / scale;
}

} // namespace

std::vector<workload::request_record> run_open_loop_http(const std::vector<workload::request>& requests,
                                                         const http_open_loop_options& opt) {
  const double scale = opt.time_scale > 0 ? opt.time_scale : 1.0;
  auto run = std::make_shared<shared_run>();
  run->out.resize(requests.size());
  run->sockets.assign(requests.size(), -1);
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& q = requests[i];
    auto& r = run->out[i];
    r.id = "h" + std::to_string(i);
    r.arrival_s = q.arrival_s;
    r.prompt_tokens = q.prompt_tokens;
    r.max_tokens = q.output_tokens;
    r.adapter = q.adapter == workload::none_adapter ? -1 : static_cast<std::int64_t>(q.adapter);
    r.priority = q.priority;
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<clock_type::duration>(
                                         std::chrono::duration<double>(q.arrival_s * scale)));
    // The record is written by its thread alone until it counts itself done.
    std::thread([run, &q, i, opt, scale, t0] {
      run_one(q, i, opt, scale, t0, *run);
      std::lock_guard lock(run->mutex);
      ++run->done;
      run->all_done.notify_all();
    }).detach();
    if (opt.progress) {
      std::lock_guard lock(run->mutex);
      std::fprintf(stderr, "\r%zu/%zu sent, %zu done ", i + 1, requests.size(), run->done);
    }
  }
  std::unique_lock lock(run->mutex);
  // After the last send, opt.drain for the answers still out; then their
  // connections are shut down (they end "lost") and their threads end.
  const auto finished = [&] { return run->done == requests.size(); };
  if (!run->all_done.wait_for(lock, opt.drain, finished)) {
    for (const int fd : run->sockets)
      if (fd >= 0)
        ::shutdown(fd, SHUT_RDWR);
    run->all_done.wait(lock, finished);
  }
  if (opt.progress)
    std::fprintf(stderr, "\n");
  return run->out;
}

} // namespace troupe
