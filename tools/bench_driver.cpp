#include "tools/bench_driver.hpp"

#include "tools/client_connection.hpp"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

struct in_flight {
  std::size_t index = 0;
  double sent_s = 0;
  double first_token_s = -1;
  double last_token_s = -1;
  std::uint32_t tokens = 0;
};

void draw_progress(std::size_t sent, std::size_t done, std::size_t total, double elapsed) {
  constexpr int width = 30;
  const int filled = total == 0 ? width : static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu done, %zu sent, %.0f s ", filled, "==============================",
               width - filled, "", done, total, sent, elapsed);
  std::fflush(stderr);
}

} // namespace

std::vector<workload::request_record> run_open_loop(const std::vector<workload::request>& requests,
                                                    const open_loop_options& opt) {
  std::vector<workload::request_record> out(requests.size());
  const double scale = opt.time_scale > 0 ? opt.time_scale : 1.0;
  client_connection c{opt.endpoint};
  std::unordered_map<std::string, in_flight> pending;
  const auto t0 = clock_type::now();
  auto now = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };
  std::size_t next = 0, done = 0;
  double last_progress = -1, last_send = 0;
  auto finish = [&](const std::string& id, std::string outcome, std::uint32_t completion) {
    auto i = pending.find(id);
    if (i == pending.end())
      return;
    const auto& f = i->second;
    auto& r = out[f.index];
    const double t = now();
    r.outcome = std::move(outcome);
    r.completion_tokens = completion;
    r.e2e_s = (t - f.sent_s) / scale;
    if (f.first_token_s >= 0)
      r.ttft_s = (f.first_token_s - f.sent_s) / scale;
    if (f.tokens >= 2)
      r.tbt_mean_s = (f.last_token_s - f.first_token_s) / scale / static_cast<double>(f.tokens - 1);
    pending.erase(i);
    ++done;
  };
  while (done < requests.size()) {
    const double t = now();
    // Send everything due.
    while (next < requests.size() && requests[next].arrival_s * scale <= t) {
      const auto& q = requests[next];
      auto& r = out[next];
      r.id = opt.id_prefix + std::to_string(next);
      r.arrival_s = q.arrival_s;
      r.prompt_tokens = q.prompt_tokens;
      r.max_tokens = q.output_tokens;
      r.adapter = q.adapter == workload::none_adapter ? -1 : static_cast<std::int64_t>(q.adapter);
      wire::generate_request g;
      g.id = r.id;
      g.prompt_tokens = std::vector<std::int32_t>(q.prompt_tokens);
      for (std::uint32_t j = 0; j < q.prompt_tokens; ++j)
        (*g.prompt_tokens)[j] = static_cast<std::int32_t>(10 + (next * 31 + j * 7) % 400);
      g.max_tokens = q.output_tokens;
      g.stream = true;
      g.sampling.temperature = 0;
      if (q.adapter != workload::none_adapter)
        g.adapter = opt.adapter_prefix + std::to_string(q.adapter);
      pending[r.id] = {next, now()};
      if (!c.send(g)) {
        r.outcome = "send_failed";
        pending.erase(r.id);
        ++done;
      }
      last_send = now();
      ++next;
    }
    if (next == requests.size() && now() - last_send > std::chrono::duration<double>(opt.drain).count())
      break; // the rest are lost
    const double wait_s = next < requests.size() ? requests[next].arrival_s * scale - now() : 0.05;
    const auto wait = std::chrono::milliseconds(static_cast<long>(std::clamp(wait_s, 0.0, 0.05) * 1000));
    if (auto got = c.receive(wait)) {
      if (auto* rep = std::get_if<wire::reply>(&*got)) {
        if (auto* tk = std::get_if<wire::token_reply>(rep)) {
          if (auto i = pending.find(tk->id); i != pending.end()) {
            auto& f = i->second;
            const double at = now();
            if (f.first_token_s < 0)
              f.first_token_s = at;
            f.last_token_s = at;
            f.tokens += static_cast<std::uint32_t>(tk->tokens.size());
          }
        } else if (auto* d = std::get_if<wire::done_reply>(rep)) {
          if (auto i = pending.find(d->id); i != pending.end())
            out[i->second.index].queue_s = d->time.queue_ms / 1e3 / scale;
          finish(d->id, d->finish_reason, d->completion_tokens);
        } else if (auto* e = std::get_if<wire::error_reply>(rep)) {
          finish(e->id, std::string{wire::to_string(e->code)}, 0);
        }
      }
    }
    if (opt.progress && now() - last_progress > 0.2) {
      draw_progress(next, done, requests.size(), now());
      last_progress = now();
    }
  }
  if (opt.progress) {
    draw_progress(next, done, requests.size(), now());
    std::fprintf(stderr, "\n");
  }
  return out;
}

std::pair<double, double> pull_server_figures(const std::string& endpoint) {
  client_connection c{endpoint};
  wire::stats_request s;
  s.id = "bench-stats";
  if (!c.send(s))
    return {-1, -1};
  for (int i = 0; i < 50; ++i) {
    auto got = c.receive(std::chrono::milliseconds(200));
    if (!got)
      continue;
    auto* rep = std::get_if<wire::reply>(&*got);
    auto* st = rep ? std::get_if<wire::stats_reply>(rep) : nullptr;
    if (st == nullptr)
      continue;
    double pcie = 0, hit = -1;
    bool any = false;
    for (const auto& [k, v] : st->values) {
      if (k.rfind("copy_", 0) == 0 && k.size() > 6 && k.ends_with("_bytes")) {
        pcie += v;
        any = true;
      }
      if (k == "adapter_cache_hit_rate")
        hit = v;
    }
    return {any ? pcie : -1, hit};
  }
  return {-1, -1};
}

} // namespace troupe
