#include "actors/scheduler_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/transfer_queue.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

namespace troupe {

namespace {

constexpr auto request_owner = static_cast<std::uint8_t>(page_owner_kind::request);
constexpr auto device_tier = static_cast<std::uint8_t>(pool_tier::device);
constexpr auto host_tier = static_cast<std::uint8_t>(pool_tier::host);

struct scheduler_state {
  static inline const char* name = "scheduler";
  std::unique_ptr<scheduler_core> core;
  std::shared_ptr<const gpu::executor_backend> backend;
  memory_pool_actor pool;
  adapter_cache_actor adapter_cache;
  executor_actor executor;
  copy_engine_actor copy_engine;
  metrics_actor metrics;
  std::vector<progress_sink_actor> sinks;
  std::uint64_t page_bytes = 0;
  std::string disk_dir;
  std::vector<std::pair<std::uint64_t, caf::typed_response_promise<session_kv>>> exports_waiting;
  std::uint64_t steps = 0;
  std::uint64_t trims = 0;
  bool trim_pending = false;
};

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void pump(self_ptr self);
void apply(self_ptr self, scheduler_effects fx);

/// A swap through the copy engine; `done` gets whether it succeeded.
template <class Done>
void copy_kv(self_ptr self, transfer_class cls, const scheduler_effects::swap& s,
             std::vector<std::uint32_t> host_pages, Done done, kv_op op = kv_op::swap) {
  transfer_order o;
  o.kind = static_cast<std::uint8_t>(cls);
  o.kv_op = static_cast<std::uint8_t>(op);
  o.request_id = s.request_id;
  o.bytes = s.bytes;
  o.device_pages = s.device_pages;
  o.host_pages = std::move(host_pages);
  self->request(self->state.copy_engine, caf::infinite, load_atom_v, std::move(o))
    .then([done](const transfer_report& r) mutable { done(r.error.empty()); },
          [done](const caf::error&) mutable { done(false); });
}

/// Pages in `tier` for `s.request_id` (as many as the other side holds),
/// then the copy between them; `answer(ok, pages reserved)`: ok false when
/// the pool refused or the copy failed.
template <class Answer>
void reserve_and_copy(self_ptr self, const scheduler_effects::swap& s, std::uint8_t tier, Answer answer) {
  const bool out = tier == host_tier;
  const auto n = out ? s.device_pages.size() : s.host_pages.size();
  self->request(self->state.pool, caf::infinite, reserve_atom_v, tier, request_owner, s.request_id,
                static_cast<std::uint64_t>(n), std::uint64_t{0})
    .then(
      [self, s, out, n, answer](std::vector<std::uint32_t>& pages) {
        if (pages.size() != n) {
          answer(false, std::move(pages));
          return;
        }
        auto copy = s;
        (out ? copy.host_pages : copy.device_pages) = pages;
        copy_kv(self, out ? transfer_class::swap_out : transfer_class::swap_in, copy, copy.host_pages,
                [answer, pages](bool ok) mutable { answer(ok, std::move(pages)); });
      },
      [answer](const caf::error&) { answer(false, {}); });
}

/// Swap-out (of a preempted request, or of a session's cache): host pages
/// first, then the copy; a refusal or a failed copy leaves the request to be
/// recomputed (the cache dropped).
void start_swap_out(self_ptr self, const scheduler_effects::swap& s, bool session_cache) {
  const auto id = s.request_id;
  reserve_and_copy(self, s, host_tier, [self, id, session_cache](bool ok, std::vector<std::uint32_t> host) {
    if (!ok && !host.empty())
      self->send(self->state.pool, release_atom_v, host_tier, request_owner, id);
    auto& core = *self->state.core;
    auto pages = ok ? std::move(host) : std::vector<std::uint32_t>{};
    apply(self, session_cache ? core.on_session_out(id, ok, monotonic_seconds(), std::move(pages))
                              : core.on_swapped_out(id, ok, monotonic_seconds(), std::move(pages)));
    pump(self);
  });
}

/// The file of a disk-tier session cache (by its owner).
std::string disk_file(const scheduler_state& st, std::uint64_t owner) {
  return (std::filesystem::path{st.disk_dir} / ("session-" + std::to_string(owner) + ".kv")).string();
}

/// A session cache between its host pages and its file, on the copy engine.
template <class Done>
void file_copy(self_ptr self, kv_op op, std::uint64_t owner, std::vector<std::uint32_t> host_pages,
               std::uint64_t bytes, Done done) {
  transfer_order o;
  o.kind = static_cast<std::uint8_t>(op == kv_op::host_to_file ? transfer_class::swap_out : transfer_class::swap_in);
  o.kv_op = static_cast<std::uint8_t>(op);
  o.request_id = owner;
  o.bytes = bytes;
  o.host_pages = std::move(host_pages);
  o.path = disk_file(self->state, owner);
  self->request(self->state.copy_engine, caf::infinite, load_atom_v, std::move(o))
    .then([done](const transfer_report& r) mutable { done(r.error.empty()); },
          [done](const caf::error&) mutable { done(false); });
}

void apply_disk(self_ptr self, const scheduler_effects& fx) {
  auto& st = self->state;
  for (auto owner : fx.disk_deletes) {
    std::error_code ec;
    std::filesystem::remove(disk_file(st, owner), ec);
  }
  for (const auto& s : fx.disk_outs) {
    const auto owner = s.request_id;
    file_copy(self, kv_op::host_to_file, owner, s.host_pages, s.bytes, [self, owner](bool ok) {
      if (!ok) {
        std::error_code ec;
        std::filesystem::remove(disk_file(self->state, owner), ec);
      }
      apply(self, self->state.core->on_disk_out(owner, ok, monotonic_seconds()));
      pump(self);
    });
  }
  for (const auto& s : fx.disk_ins) {
    // Host pages for the cache, then the read; the file goes either way.
    const auto owner = s.request_id;
    const auto n = st.page_bytes > 0 ? s.bytes / st.page_bytes : 0;
    auto done = [self, owner](bool ok, std::vector<std::uint32_t> pages) {
      std::error_code ec;
      std::filesystem::remove(disk_file(self->state, owner), ec);
      apply(self, self->state.core->on_disk_in(owner, ok, monotonic_seconds(), std::move(pages)));
      pump(self);
    };
    self->request(st.pool, caf::infinite, reserve_atom_v, host_tier, request_owner, owner, n, std::uint64_t{0})
      .then(
        [self, owner, n, bytes = s.bytes, done](std::vector<std::uint32_t>& pages) mutable {
          if (pages.size() != n) {
            if (!pages.empty())
              self->send(self->state.pool, release_atom_v, host_tier, request_owner, owner);
            done(false, {});
            return;
          }
          file_copy(self, kv_op::file_to_host, owner, pages, bytes,
                    [done, pages](bool ok) mutable { done(ok, pages); });
        },
        [done](const caf::error&) mutable { done(false, {}); });
  }
}

/// Reads a session's cache out for another node, then frees its pages.
void start_export(self_ptr self, std::uint64_t session, caf::typed_response_promise<session_kv> rp);

caf::typed_response_promise<session_kv> export_session(self_ptr self, std::uint64_t session) {
  auto rp = self->make_response_promise<session_kv>();
  start_export(self, session, rp);
  return rp;
}

/// Exports waiting for their cache to finish a move between tiers: tried
/// again after every answer that may have ended one.
void retry_exports(self_ptr self) {
  auto& waiting = self->state.exports_waiting;
  if (waiting.empty())
    return;
  auto again = std::move(waiting);
  waiting.clear();
  for (auto& [session, rp] : again)
    start_export(self, session, rp);
}

void start_export(self_ptr self, std::uint64_t session, caf::typed_response_promise<session_kv> rp) {
  auto& core = *self->state.core;
  auto plan = core.begin_export(session);
  if (!plan) {
    if (core.session_moving(session))
      self->state.exports_waiting.emplace_back(session, rp); // on its way between tiers
    else
      rp.deliver(session_kv{session, {}, 0, 0, {}, {}});
    return;
  }
  transfer_order o;
  o.kind = static_cast<std::uint8_t>(transfer_class::swap_out);
  o.kv_op = static_cast<std::uint8_t>(plan->host ? kv_op::export_host : kv_op::export_device);
  o.request_id = plan->owner;
  o.bytes = plan->bytes;
  (plan->host ? o.host_pages : o.device_pages) = plan->pages;
  auto kv = std::make_shared<session_kv>();
  kv->session = session;
  kv->tokens = std::move(plan->tokens);
  kv->adapter_id = plan->adapter_id;
  kv->pages = plan->pages.size();
  auto finish = [self, rp, kv, session](std::string error, std::string data) mutable {
    apply(self, self->state.core->on_exported(session));
    pump(self);
    kv->error = std::move(error);
    kv->data = std::move(data);
    if (!kv->error.empty())
      kv->pages = 0;
    rp.deliver(std::move(*kv));
  };
  self->request(self->state.copy_engine, caf::infinite, load_atom_v, std::move(o))
    .then([finish](transfer_report& r) mutable { finish(std::move(r.error), std::move(r.data)); },
          [self, finish](const caf::error& e) mutable { finish(self->system().render(e), {}); });
}

/// Takes a session's cache from another node into host pages.
caf::typed_response_promise<bool> import_session(self_ptr self, session_kv kv) {
  auto rp = self->make_response_promise<bool>();
  scheduler_effects fx;
  const auto session = kv.session;
  const auto n = kv.pages;
  const auto owner = kv.error.empty() ? self->state.core->begin_import(session, n, kv.tokens, kv.adapter_id, fx) : 0;
  apply(self, std::move(fx));
  if (owner == 0) {
    rp.deliver(false);
    return rp;
  }
  auto done = [self, rp, session](bool ok, std::vector<std::uint32_t> pages) mutable {
    apply(self, self->state.core->on_imported(session, ok, monotonic_seconds(), std::move(pages)));
    pump(self);
    rp.deliver(ok);
  };
  auto data = std::make_shared<std::string>(std::move(kv.data));
  const auto bytes = n * self->state.page_bytes;
  self->request(self->state.pool, caf::infinite, reserve_atom_v, host_tier, request_owner, owner, n,
                std::uint64_t{0})
    .then(
      [self, done, data, owner, n, bytes](std::vector<std::uint32_t>& pages) mutable {
        if (pages.size() != n) {
          if (!pages.empty())
            self->send(self->state.pool, release_atom_v, host_tier, request_owner, owner);
          done(false, {});
          return;
        }
        transfer_order o;
        o.kind = static_cast<std::uint8_t>(transfer_class::swap_in);
        o.kv_op = static_cast<std::uint8_t>(kv_op::import_host);
        o.request_id = owner;
        o.bytes = bytes;
        o.host_pages = pages;
        o.data = std::move(*data);
        self->request(self->state.copy_engine, caf::infinite, load_atom_v, std::move(o))
          .then([done, pages](const transfer_report& r) mutable { done(r.error.empty(), pages); },
                [done, pages](const caf::error&) mutable { done(false, pages); });
      },
      [done](const caf::error&) mutable { done(false, {}); });
  return rp;
}

finish_event to_event(const scheduler_effects::finish& f) {
  auto ms = [](double a, double b) { return b >= 0 && a >= 0 ? (b - a) * 1e3 : 0.0; };
  const auto& t = f.times;
  finish_event e;
  e.request_id = f.request_id;
  e.reason = static_cast<std::uint8_t>(f.reason);
  e.prompt_tokens = f.prompt_tokens;
  e.completion_tokens = f.completion_tokens;
  e.cached_tokens = f.cached_tokens;
  e.queue_ms = ms(t.arrival_s, t.first_scheduled_s >= 0 ? t.first_scheduled_s : t.finished_s);
  e.ttft_ms = ms(t.arrival_s, t.first_token_s);
  e.e2e_ms = ms(t.arrival_s, t.finished_s);
  return e;
}

void retry_exports(self_ptr self);

/// Carries out what the core asked for.
void apply(self_ptr self, scheduler_effects fx) {
  auto& st = self->state;
  retry_exports(self);
  // The pool takes this actor's messages in order: adoptions and releases
  // (evicted session caches) before the reservations that count on them.
  for (auto& s : fx.shares)
    self->send(st.pool, adopt_atom_v, device_tier, request_owner, s.request_id, prefix_cache_owner,
               std::move(s.pages));
  for (const auto& a : fx.adopts)
    self->send(st.pool, adopt_atom_v, device_tier, request_owner, a.from, a.to);
  if (!fx.release_cached.empty())
    self->send(st.pool, release_atom_v, device_tier, request_owner, prefix_cache_owner,
               std::move(fx.release_cached));
  for (auto id : fx.release_pages)
    self->send(st.pool, release_atom_v, device_tier, request_owner, id);
  for (const auto& r : fx.reserves) {
    const auto id = r.request_id;
    self->request(st.pool, caf::infinite, reserve_atom_v, device_tier, request_owner, id, r.pages,
                  std::uint64_t{0})
      .then(
        [self, id, n = r.pages](std::vector<std::uint32_t>& pages) {
          const bool granted = n == 0 || !pages.empty();
          apply(self, self->state.core->on_pages(id, granted, monotonic_seconds(),
                                                 std::move(pages)));
          pump(self);
        },
        [self, id](const caf::error&) {
          apply(self, self->state.core->on_pages(id, false, monotonic_seconds()));
        });
  }
  for (const auto& g : fx.grows) {
    const auto id = g.request_id;
    const auto ticket = g.ticket;
    self->request(st.pool, caf::infinite, reserve_atom_v, device_tier, request_owner, id, g.pages,
                  std::uint64_t{0})
      .then(
        [self, id, ticket](std::vector<std::uint32_t>& pages) {
          const bool granted = !pages.empty();
          apply(self, self->state.core->on_grown(id, ticket, granted, std::move(pages)));
          pump(self);
        },
        [self, id, ticket](const caf::error&) {
          apply(self, self->state.core->on_grown(id, ticket, false));
          pump(self);
        });
  }
  for (const auto& a : fx.acquires) {
    const auto id = a.request_id;
    const auto adapter = a.adapter_id;
    // A request that runs out of retries ends with an error its client is
    // told to look up in the log: say why there.
    auto log_if_ended = [id, adapter](const scheduler_effects& out, const char* why) {
      for (const auto& f : out.finished)
        if (f.request_id == id && f.reason == finish_reason::error)
          spdlog::warn("scheduler: request {} ends: adapter {} {}", id, adapter, why);
    };
    self->request(st.adapter_cache, caf::infinite, acquire_atom_v, adapter)
      .then(
        [self, id, log_if_ended](std::uint8_t grant) {
          auto out = self->state.core->on_adapter(id, static_cast<scheduler_core::adapter_grant>(grant),
                                                  monotonic_seconds());
          log_if_ended(out, "found no room in the device pool after repeated tries");
          apply(self, std::move(out));
          pump(self);
        },
        [self, id, log_if_ended](const caf::error& e) {
          auto out = self->state.core->on_adapter(id, false, monotonic_seconds());
          log_if_ended(out, ("could not be acquired: " + self->system().render(e)).c_str());
          apply(self, std::move(out));
        });
  }
  for (auto id : fx.release_host_pages)
    self->send(st.pool, release_atom_v, host_tier, request_owner, id);
  apply_disk(self, fx);
  for (const auto& s : fx.swap_outs)
    start_swap_out(self, s, false);
  for (const auto& s : fx.session_outs)
    start_swap_out(self, s, true);
  for (const auto& s : fx.session_ins) {
    // Device pages for the cache first, then the copy from the host pool.
    const auto owner = s.request_id;
    reserve_and_copy(self, s, device_tier, [self, owner](bool ok, std::vector<std::uint32_t> pages) {
      apply(self, self->state.core->on_session_in(owner, ok, monotonic_seconds(), std::move(pages)));
      pump(self);
    });
  }
  for (const auto& s : fx.swap_ins) {
    const auto id = s.request_id;
    copy_kv(self, transfer_class::swap_in, s, s.host_pages, [self, id](bool ok) {
      apply(self, self->state.core->on_swapped_in(id, ok, monotonic_seconds()));
      pump(self);
    });
  }
  for (const auto& s : fx.stream_ins) {
    // Layer by layer, while the request's first step may already run.
    const auto id = s.request_id;
    copy_kv(self, transfer_class::swap_in, s, s.host_pages, [self, id](bool ok) {
      apply(self, self->state.core->on_swapped_in(id, ok, monotonic_seconds()));
      pump(self);
    }, kv_op::stream_in);
  }
  for (auto id : fx.end_streams)
    st.backend->end_stream(id);
  if (!fx.queued.empty()) {
    adapter_demand d;
    for (const auto& [adapter, waiting] : fx.queued) {
      d.adapter_ids.push_back(adapter);
      d.waiting.push_back(waiting);
    }
    self->send(st.adapter_cache, std::move(d));
  }
  for (const auto& a : fx.release_adapters)
    self->send(st.adapter_cache, release_atom_v, a.adapter_id);
  if (fx.trim_pages > 0 && !st.trim_pending) {
    st.trim_pending = true;
    ++st.trims;
    self->request(st.adapter_cache, caf::infinite, trim_atom_v, fx.trim_pages)
      .then(
        [self](std::uint64_t freed) {
          auto& st = self->state;
          st.trim_pending = false;
          // Retry admission if pages came free, or if nothing else will free
          // any (no request holds or awaits pages).
          if (freed > 0 || (st.core->running() == 0 && st.core->admitting() == 0))
            st.core->on_memory_changed();
          pump(self);
        },
        [self](const caf::error&) { self->state.trim_pending = false; });
  }
  if (fx.tokens.empty() && fx.finished.empty())
    return;
  progress_batch batch;
  batch.tokens.reserve(fx.tokens.size());
  for (const auto& t : fx.tokens)
    batch.tokens.push_back({t.request_id, t.index, t.token});
  for (auto& [k, lp] : fx.logprobs)
    batch.logprobs.push_back({fx.tokens[k].request_id, fx.tokens[k].index, std::move(lp)});
  for (auto& [k, lp] : fx.prompt_logprobs)
    batch.prompt_logprobs.push_back({fx.tokens[k].request_id, std::move(lp)});
  for (const auto& f : fx.finished)
    batch.finished.push_back(to_event(f));
  if (st.metrics)
    self->send(st.metrics, batch);
  for (const auto& s : st.sinks)
    self->send(s, batch);
}

/// Names in the log each request a step could not run and why: the reply
/// its client gets points here. A -1 with no reason breaks the backend's
/// contract and is logged as such.
void log_failures(const std::vector<gpu::step_entry>& batch, const gpu::step_result& r) {
  const bool all_ran = r.tokens.size() >= batch.size() &&
                       std::none_of(r.tokens.begin(), r.tokens.end(), [](auto t) { return t < 0; });
  if (all_ran && r.failures.empty())
    return; // the usual step: nothing to copy or say
  auto failures = r.failures;
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const bool missing = k >= r.tokens.size() || r.tokens[k] < 0;
    const auto id = batch[k].request_id;
    if (missing && std::none_of(failures.begin(), failures.end(), [id](const auto& f) { return f.request_id == id; }))
      failures.push_back({id, "the backend returned no token and no reason"});
  }
  if (!failures.empty())
    spdlog::warn("scheduler: a step of {} requests could not run {}: {}", batch.size(),
                 failures.size() == 1 ? "one of them" : std::to_string(failures.size()) + " of them",
                 gpu::describe(failures));
}

void run_step(self_ptr self, std::vector<gpu::step_entry> batch) {
  auto& st = self->state;
  const auto started = monotonic_seconds();
  self->request(st.executor, caf::infinite, run_step_atom_v, batch)
    .then(
      [self, batch, started](const gpu::step_result& r) {
        auto& st = self->state;
        ++st.steps;
        const auto now = monotonic_seconds();
        if (st.metrics) {
          step_metrics m;
          m.batch_size = static_cast<std::uint32_t>(batch.size());
          for (const auto& e : batch)
            m.new_tokens += e.new_tokens;
          m.device_seconds = r.device_seconds;
          m.wall_seconds = now - started;
          self->send(st.metrics, m);
        }
        log_failures(batch, r);
        apply(self, st.core->on_step_done(batch, r.tokens, now, r.logprobs, r.prompt_logprobs));
        pump(self);
      },
      [self, batch](const caf::error& e) {
        std::vector<gpu::step_failure> lost;
        for (const auto& entry : batch)
          lost.push_back({entry.request_id, "the executor did not answer the step: " + self->system().render(e)});
        spdlog::error("scheduler: a step of {} requests failed: {}", batch.size(), gpu::describe(lost));
        apply(self, self->state.core->on_step_failed(batch, monotonic_seconds()));
        pump(self);
      });
}

/// Admits what the policy allows and starts a step if none is in flight.
/// An admission round that only preempted (pages freed, nothing admitted,
/// no step to run) is followed by another at once: no answer is coming that
/// would call back here.
void pump(self_ptr self) {
  auto& core = *self->state.core;
  for (int round = 0; round < 4; ++round) {
    const auto now = monotonic_seconds();
    auto fx = core.admit(now);
    const bool freed = !fx.release_pages.empty();
    apply(self, std::move(fx));
    if (core.step_in_flight())
      return;
    auto batch = core.next_step(now);
    if (!batch.empty()) {
      run_step(self, std::move(batch));
      return;
    }
    if (!freed)
      return;
  }
}

scheduler_actor::behavior_type scheduler_impl(self_ptr self, scheduler_config cfg) {
  auto& st = self->state;
  st.backend = cfg.backend;
  st.page_bytes = cfg.limits.page_bytes;
  st.disk_dir = cfg.disk_dir;
  st.core = std::make_unique<scheduler_core>(cfg.limits, std::move(cfg.policy),
                                             st.backend ? &st.backend->vocab() : nullptr);
  st.pool = cfg.pool;
  st.adapter_cache = cfg.adapter_cache;
  st.executor = cfg.executor;
  st.copy_engine = cfg.copy_engine;
  st.metrics = cfg.metrics;
  return {
    [self](submit_atom, request_spec& spec) {
      const auto r = self->state.core->submit(std::move(spec));
      if (r == scheduler_core::submit_result::accepted)
        pump(self);
      return static_cast<std::uint8_t>(r);
    },
    [self](cancel_atom, std::uint64_t id) {
      auto [found, fx] = self->state.core->cancel(id, monotonic_seconds());
      apply(self, std::move(fx));
      pump(self);
      return found;
    },
    [self](advise_atom, std::uint64_t session, double in_s) {
      auto& core = *self->state.core;
      scheduler_effects fx;
      const auto a = core.advise(session, monotonic_seconds(), fx, in_s);
      apply(self, std::move(fx));
      // Put off: asked again shortly before the turn, wherever the cache is then.
      if (a != scheduler_core::advice::none && core.advise_fetch_delay(in_s) > 0)
        self->delayed_send(self, seconds_span(core.advise_fetch_delay(in_s)), tick_atom_v, advise_atom_v, session);
      return static_cast<std::uint8_t>(a);
    },
    [self](tick_atom, advise_atom, std::uint64_t session) {
      scheduler_effects fx;
      self->state.core->advise(session, monotonic_seconds(), fx);
      apply(self, std::move(fx));
      pump(self);
    },
    [self](export_atom, std::uint64_t session) { return export_session(self, session); },
    [self](import_atom, session_kv& kv) { return import_session(self, std::move(kv)); },
    [self](subscribe_atom, progress_sink_actor sink) {
      self->state.sinks.push_back(std::move(sink));
    },
    [self](const policies::queue_tuning& t) {
      self->state.core->on_tuning(t);
      pump(self);
    },
    [self](stats_atom) {
      const auto& st = self->state;
      const auto& c = *st.core;
      stat_values out{
        stat_gauge("requests_waiting", static_cast<double>(c.waiting())),
        stat_gauge("requests_admitting", static_cast<double>(c.admitting())),
        stat_gauge("requests_running", static_cast<double>(c.running())),
        stat_gauge("kv_pages_reserved", static_cast<double>(c.reserved_pages())),
        stat_counter("scheduler_steps", static_cast<double>(st.steps)),
        stat_counter("adapter_trims", static_cast<double>(st.trims)),
        stat_counter("requests_squashed", static_cast<double>(c.squashed())),
        stat_counter("requests_rope_recomputed", static_cast<double>(c.rope_recomputed())),
        stat_counter("requests_aborted", static_cast<double>(c.aborted())),
        stat_counter("requests_swapped_out", static_cast<double>(c.swapped_out())),
        stat_counter("requests_swapped_in", static_cast<double>(c.swapped_in())),
        stat_gauge("host_pages_swapped", static_cast<double>(c.host_pages_held())),
        stat_counter("kv_growths_denied", static_cast<double>(c.growths_denied())),
        stat_gauge("sessions_cached", static_cast<double>(c.sessions_cached())),
        stat_counter("session_hits", static_cast<double>(c.session_hits())),
        stat_counter("session_partial_hits", static_cast<double>(c.session_partial_hits())),
        stat_gauge("session_pages", static_cast<double>(c.session_pages_held())),
        stat_counter("session_evictions", static_cast<double>(c.session_evictions())),
        stat_counter("session_offloads", static_cast<double>(c.session_offloads())),
        stat_gauge("session_pages_moving_out", static_cast<double>(c.session_pages_moving_out())),
        stat_counter("session_host_hits", static_cast<double>(c.session_host_hits())),
        stat_counter("advisories", static_cast<double>(c.advisories())),
        stat_counter("session_prefetches", static_cast<double>(c.session_prefetches())),
        stat_counter("sessions_exported", static_cast<double>(c.sessions_exported())),
        stat_counter("session_disk_writes", static_cast<double>(c.session_disk_writes())),
        stat_counter("session_disk_reads", static_cast<double>(c.session_disk_reads())),
        stat_counter("session_streamed_ins", static_cast<double>(c.streamed_ins())),
        stat_gauge("session_disk_pages", static_cast<double>(c.session_disk_pages())),
        stat_gauge("session_clean_pages", static_cast<double>(c.session_clean_pages())),
        stat_counter("session_disk_skips", static_cast<double>(c.session_disk_skips())),
        stat_counter("session_turns_held", static_cast<double>(c.turns_held_for_cache())),
        stat_counter("sessions_imported", static_cast<double>(c.sessions_imported())),
        stat_counter("prefix_cache_hits", static_cast<double>(c.prefix_hits())),
        stat_counter("prefix_cache_holds", static_cast<double>(c.prefix_holds())),
        stat_gauge("prefix_cache_pages", static_cast<double>(c.prefix_cached_pages())),
        stat_gauge("prefix_cache_idle_pages", static_cast<double>(c.prefix_idle_pages())),
        stat_counter("prefix_cache_evictions", static_cast<double>(c.prefix_evictions())),
        stat_counter("prompt_tokens_reused", static_cast<double>(c.reused_tokens())),
        stat_counter("prompt_tokens_prefilled", static_cast<double>(c.prefilled_tokens())),
        stat_gauge("kv_pages_short", static_cast<double>(c.pages_short())),
        stat_gauge("admission_memory_blocked", c.memory_blocked() ? 1.0 : 0.0),
        stat_gauge("adapter_trim_pending", st.trim_pending ? 1.0 : 0.0),
      };
      append_stats(out, c.policy_counters(), stat_kind::counter);
      append_stats(out, c.policy_gauges(), stat_kind::gauge);
      return out;
    },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_config cfg) {
  return sys.spawn(scheduler_impl, std::move(cfg));
}

} // namespace troupe
