#include "tools/bench_driver.hpp"

#include "tools/client_connection.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
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
  std::vector<std::int32_t> output;
  std::vector<double> gaps; ///< between tokens after the first, wall seconds
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
  // Sends due by wall time; a session's later turn becomes due when the
  // turn before it ends.
  std::multimap<double, std::size_t> due;
  std::vector<std::size_t> next_turn(requests.size(), requests.size());
  {
    std::unordered_map<std::uint64_t, std::size_t> last;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const auto s = requests[i].session;
      if (s != 0) {
        if (auto l = last.find(s); l != last.end()) {
          next_turn[l->second] = i;
          l->second = i;
          continue;
        }
        last[s] = i;
      }
      due.emplace(requests[i].arrival_s * scale, i);
    }
  }
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> history;
  std::size_t sent = 0, done = 0;
  double last_progress = -1, last_activity = 0;
  std::uint64_t advisories = 0;
  auto finish = [&](const std::string& id, std::string outcome, std::uint32_t completion) {
    auto i = pending.find(id);
    if (i == pending.end())
      return;
    auto& f = i->second;
    auto& r = out[f.index];
    const double t = now();
    r.outcome = std::move(outcome);
    r.completion_tokens = completion;
    r.e2e_s = (t - f.sent_s) / scale;
    if (f.first_token_s >= 0)
      r.ttft_s = (f.first_token_s - f.sent_s) / scale;
    if (f.tokens >= 2)
      r.tbt_mean_s = (f.last_token_s - f.first_token_s) / scale / static_cast<double>(f.tokens - 1);
    if (!f.gaps.empty())
      r.tbt_p99_s = workload::percentile(std::move(f.gaps), 99) / scale;
    if (!f.output.empty()) {
      std::uint64_t h = 1469598103934665603ull;
      for (auto tok : f.output) {
        h ^= static_cast<std::uint32_t>(tok);
        h *= 1099511628211ull;
      }
      r.tokens_fnv = h;
    }
    const auto& q = requests[f.index];
    if (q.session != 0) {
      auto& hist = history[q.session];
      hist.insert(hist.end(), f.output.begin(), f.output.end());
      if (const auto n = next_turn[f.index]; n < requests.size()) {
        due.emplace(t + requests[n].think_s * scale, n);
        if (opt.advise) {
          wire::advise_request a;
          a.id = opt.id_prefix + "-advise-" + std::to_string(advisories++);
          a.session = "c" + std::to_string(q.session);
          a.in_s = requests[n].think_s;
          c.send(a);
        }
      }
    }
    pending.erase(i);
    ++done;
    last_activity = t;
  };
  while (done < requests.size()) {
    const double t = now();
    // Send everything due.
    while (!due.empty() && due.begin()->first <= t) {
      const auto index = due.begin()->second;
      due.erase(due.begin());
      const auto& q = requests[index];
      auto& r = out[index];
      r.id = opt.id_prefix + std::to_string(index);
      r.arrival_s = q.session != 0 ? t / scale : q.arrival_s;
      r.max_tokens = q.output_tokens;
      r.session = q.session;
      r.adapter = q.adapter == workload::none_adapter ? -1 : static_cast<std::int64_t>(q.adapter);
      r.priority = q.priority;
      wire::generate_request g;
      g.id = r.id;
      g.priority = q.priority;
      std::vector<std::int32_t> prompt;
      if (q.session != 0) {
        prompt = history[q.session];
        g.session = "c" + std::to_string(q.session);
      }
      const auto own = workload::prompt_of(index, q.prompt_tokens, q.session != 0 ? 0 : opt.shared_prefix,
                                           opt.prefix_groups);
      prompt.insert(prompt.end(), own.begin(), own.end());
      if (q.session != 0)
        history[q.session] = prompt;
      r.prompt_tokens = static_cast<std::uint32_t>(prompt.size());
      g.prompt_tokens = std::move(prompt);
      g.max_tokens = q.output_tokens;
      g.ignore_eos = opt.ignore_eos;
      g.stream = true;
      g.sampling.temperature = 0;
      if (q.adapter != workload::none_adapter)
        g.adapter = opt.adapter_prefix + std::to_string(q.adapter);
      auto& fl = pending[r.id];
      fl.index = index;
      fl.sent_s = now();
      ++sent;
      last_activity = now();
      if (!c.send(g))
        finish(r.id, "send_failed", 0);
    }
    if (due.empty() && now() - last_activity > std::chrono::duration<double>(opt.drain).count())
      break; // the rest are lost
    const double wait_s = !due.empty() ? due.begin()->first - now() : 0.05;
    const auto wait = std::chrono::milliseconds(static_cast<long>(std::clamp(wait_s, 0.0, 0.05) * 1000));
    if (auto got = c.receive(wait)) {
      if (auto* rep = std::get_if<wire::reply>(&*got)) {
        if (auto* tk = std::get_if<wire::token_reply>(rep)) {
          if (auto i = pending.find(tk->id); i != pending.end()) {
            auto& f = i->second;
            const double at = now();
            if (f.first_token_s < 0)
              f.first_token_s = at;
            else if (!tk->tokens.empty())
              f.gaps.push_back(at - f.last_token_s);
            // Tokens that come in one reply came together.
            for (std::size_t k = 1; k < tk->tokens.size(); ++k)
              f.gaps.push_back(0.0);
            f.last_token_s = at;
            f.tokens += static_cast<std::uint32_t>(tk->tokens.size());
            f.output.insert(f.output.end(), tk->tokens.begin(), tk->tokens.end());
            last_activity = at;
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
      draw_progress(sent, done, requests.size(), now());
      last_progress = now();
    }
  }
  if (opt.progress) {
    draw_progress(sent, done, requests.size(), now());
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
    for (const auto& [k, v, kind] : st->values) {
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
