#include "runtime/deployment.hpp"
#include "runtime/chat_template_files.hpp"

#include "actors/adapter_cache_actor.hpp"
#include "actors/classifier_actor.hpp"
#include "actors/copy_engine_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/intake_actor.hpp"
#include "actors/memory_pool_actor.hpp"
#include "actors/metrics_actor.hpp"
#include "actors/node_actor.hpp"
#include "actors/router_actor.hpp"
#include "actors/prefetcher_actor.hpp"
#include "actors/queue_tuner_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "policies/disk_fetch.hpp"
#include "policies/output_predictor.hpp"
#include "policies/prefetch_policy.hpp"
#include "policies/registry.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/calibration.hpp"
#include "runtime/config.hpp"
#include "runtime/http_front.hpp"
#include "runtime/zmq_bridge.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <filesystem>
#include <unistd.h>
#include <thread>

namespace troupe {

struct deployment::impl {
  deployment_options opts;
  resolved_backend resolved;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<zmq_bridge> bridge;
  std::unique_ptr<http_front> http;
  std::string endpoint;
  std::string http_endpoint;
  intake_actor intake; ///< null on a node without the router
  std::vector<caf::actor> actors; // every actor, for shutdown
  std::string disk_dir;            // this process's session files, removed at stop
  bool stopped = false;
};

deployment::deployment(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

deployment::~deployment() {
  stop();
}

const std::string& deployment::endpoint() const noexcept {
  return impl_->endpoint;
}

const std::string& deployment::http_endpoint() const noexcept {
  return impl_->http_endpoint;
}

std::string deployment::broken() const {
  const auto& b = impl_->resolved.backend;
  return b ? b->broken() : std::string{};
}

namespace {

/// "host:port" split; the config checked the form.
std::pair<std::string, std::uint16_t> split_address(const std::string& a) {
  const auto colon = a.rfind(':');
  return {a.substr(0, colon), static_cast<std::uint16_t>(std::stoul(a.substr(colon + 1)))};
}

} // namespace

/// Spawns this node's node actor and publishes it at its address; on the
/// router node also connects to every other node (waiting for them up to
/// connect_timeout_s) and spawns the router. An error message, or "".
static std::string join_cluster(deployment::impl& p, caf::actor_system& sys, node_config nc, front_actor& router) {
  const auto& cl = p.opts.cluster;
  const auto node_timeout = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cl.node_timeout_s));
  nc.node_timeout = node_timeout;
  auto node = spawn_node(sys, std::move(nc));
  p.actors.push_back(caf::actor_cast<caf::actor>(node));
  const auto [host, port] = split_address(cl.nodes[cl.node]);
  if (auto published = sys.middleman().publish(node, port, host.c_str(), true); !published)
    return "node " + std::to_string(cl.node) + " cannot listen at " + cl.nodes[cl.node] + ": "
           + sys.render(published.error());
  if (cl.node != cl.router)
    return {};
  router_config rc;
  rc.imbalance = cl.imbalance;
  rc.adapter_affinity = cl.adapter_affinity;
  rc.prefix_affinity_tokens = cl.prefix_affinity_tokens;
  rc.advise_place_lead_s = cl.advise_place_lead_s;
  rc.node_timeout = node_timeout;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cl.connect_timeout_s);
  for (std::uint32_t i = 0; i < cl.nodes.size(); ++i) {
    rc.names.push_back(cl.nodes[i]);
    if (i == cl.node) {
      rc.nodes.push_back(node);
      continue;
    }
    const auto [h, pt] = split_address(cl.nodes[i]);
    for (;;) {
      auto remote = sys.middleman().remote_actor<node_actor>(h, pt);
      if (remote) {
        rc.nodes.push_back(*remote);
        spdlog::info("troupe: node {} at {} joined", i, cl.nodes[i]);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return "node " + std::to_string(i) + " at " + cl.nodes[i] + " did not answer within "
               + fmt::format("{}", cl.connect_timeout_s) + " s: " + sys.render(remote.error());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  router = spawn_router(sys, std::move(rc));
  p.actors.push_back(caf::actor_cast<caf::actor>(router));
  return {};
}

std::variant<std::unique_ptr<deployment>, std::string>
deployment::start(const deployment_options& opts) {
  auto p = std::make_unique<impl>();
  p->opts = opts;
  auto backend = make_backend(opts);
  if (auto* err = std::get_if<std::string>(&backend))
    return opts.source + ": " + *err;
  p->resolved = std::get<resolved_backend>(std::move(backend));
  auto& rb = p->resolved;

  auto sched_policy = policies::make_scheduling_policy(opts.scheduler.policy);
  auto evict_policy = policies::make_eviction_policy(opts.adapter_cache.policy);
  auto class_policy = policies::make_classifier_policy(opts.classifier.policy);
  if (!sched_policy)
    return opts.source + ": scheduler.policy: no policy named \"" + opts.scheduler.policy + "\"";
  if (!evict_policy)
    return opts.source + ": adapter_cache.policy: no policy named \"" + opts.adapter_cache.policy + "\"";
  if (auto err = evict_policy ? evict_policy->configure(opts.adapter_cache.params) : std::string{};
      !err.empty())
    return opts.source + ": adapter_cache.params: " + err;
  auto predict_policy = policies::make_prefetch_policy(opts.adapter_cache.predictor);
  if (!predict_policy)
    return opts.source + ": adapter_cache.predictor: no predictor named \"" + opts.adapter_cache.predictor + "\"";
  if (opts.classifier.enabled && !class_policy)
    return opts.source + ": classifier.policy: no policy named \"" + opts.classifier.policy + "\"";
  if (auto err = sched_policy->configure(opts.scheduler.params); !err.empty())
    return opts.source + ": scheduler.params: " + err;
  auto predictor = policies::make_output_predictor(opts.classifier.predictor);
  if (!predictor)
    return opts.source + ": classifier.predictor: no predictor named \"" + opts.classifier.predictor + "\"";
  if (auto err = predictor->configure(opts.classifier.predictor_params); !err.empty())
    return opts.source + ": classifier.predictor_params: " + err;
  if (class_policy) {
    if (auto err = class_policy->configure(opts.classifier.params); !err.empty())
      return opts.source + ": classifier.params: " + err;
  }

  // Measured once, for a cost-predicting policy and for the disk tier's
  // read-or-recompute choice.
  const bool fetch_by_cost = opts.memory_pool.disk_pages > 0 && opts.memory_pool.disk_fetch == "cost";
  std::optional<policies::cost_calibration> calibration;
  if (sched_policy->wants_calibration() || fetch_by_cost) {
    // Cost-predicting policies get the backend measured before it serves.
    calibration_setup cs;
    cs.pool_pages = rb.pool_pages;
    cs.page_tokens = opts.memory_pool.page_tokens;
    cs.page_bytes = rb.page_bytes;
    cs.host_pages = opts.memory_pool.host_pages;
    if (rb.max_context > 0)
      cs.max_tokens = rb.max_context; // as far as max_prefill_seconds lets it
    cs.hidden_page_tokens = rb.backend->hidden_cache_tokens_per_page(opts.memory_pool.page_tokens);
    const auto cal = calibrate_backend(*rb.backend, cs);
    std::string points;
    for (const auto& [n, t] : cal.prefill_points)
      points += fmt::format(" {}:{:.3g}s", n, t);
    spdlog::info("calibrated {} backend for policy {}: prefill{}; swap out {:.3g} GB/s, in {:.3g} GB/s; "
                 "hidden page {:.3g} s/step",
                 rb.backend->name(), sched_policy->name(), points.empty() ? " -" : points,
                 cal.d2h_bytes_per_s / 1e9, cal.h2d_bytes_per_s / 1e9, cal.hidden_page_seconds);
    if (sched_policy->wants_calibration())
      sched_policy->on_calibration(cal);
    calibration = cal;
  }
  if (opts.memory_pool.host_pages == 0 && sched_policy->name() == "adaptive")
    spdlog::info("memory_pool.host_pages is 0: preempted requests are recomputed, never swapped");

  const auto& cl = opts.cluster;
  // Clients come to the router node (or the only node).
  const bool front = !cl.enabled() || cl.node == cl.router;
  if (front) {
    auto bridge = zmq_bridge::open(opts.server);
    if (auto* err = std::get_if<std::string>(&bridge))
      return opts.source + ": server.endpoint: " + *err;
    p->bridge = std::get<std::unique_ptr<zmq_bridge>>(std::move(bridge));
    if (opts.http.enabled()) {
      http_front_config hc;
      hc.listen = opts.http.listen;
      hc.intake = p->bridge->endpoint();
      hc.model = !opts.http.model.empty()  ? opts.http.model
                 : !opts.model.path.empty() ? std::filesystem::path(opts.model.path).lexically_normal().filename().string()
                                            : rb.shape.name;
      if (hc.model.empty()) // a path ending in '/'
        hc.model = std::filesystem::path(opts.model.path).lexically_normal().parent_path().filename().string();
      hc.max_body_bytes = opts.server.max_frame_bytes;
      hc.max_frame_bytes = opts.server.max_frame_bytes;
      hc.max_connections = opts.http.max_connections;
      hc.api_keys = opts.http.api_keys;
      hc.adapter_updates = opts.http.adapter_updates;
      hc.response_store_bytes = std::size_t{opts.http.response_store_mb} << 20;
      hc.conversation_store_bytes = std::size_t{opts.http.conversation_store_mb} << 20;
      hc.store_dir = opts.http.store_dir;
      hc.store_sync = opts.http.store_sync;
      hc.file_store_bytes = std::size_t{opts.http.file_store_mb} << 20;
      hc.batch_concurrency = opts.http.batch_concurrency;
      hc.batch_priority = opts.http.batch_priority;
      if (opts.http.generation_config == "auto") {
        // The model's sampling defaults, as vLLM takes them by default.
        auto read = read_generation_defaults(opts.model.path);
        if (auto* e = std::get_if<std::string>(&read))
          return opts.source + ": http.generation_config: " + *e;
        hc.sampling = std::get<openai::sampling_defaults>(read);
        const auto shown = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("-"); };
        if (hc.sampling != openai::sampling_defaults{})
          spdlog::warn("troupe: requests that leave them out sample with generation_config.json's temperature {}, "
                       "top_p {}, top_k {}, min_p {}, repetition_penalty {}, and chats max_tokens {} (as vLLM does; "
                       "[http] generation_config = \"\" gives OpenAI's defaults)",
                       shown(hc.sampling.temperature), shown(hc.sampling.top_p), shown(hc.sampling.top_k),
                       shown(hc.sampling.min_p), shown(hc.sampling.repetition_penalty), shown(hc.sampling.max_tokens));
      }
      if (!opts.http.chat_template.empty()) {
        const auto& h = opts.http;
        // "auto": the model directory's template where it has one that
        // serves; otherwise chats are not served, and say why.
        const bool optional = h.chat_template == "auto";
        const auto no_chat = [&](const std::string& why) {
          hc.no_chat = "[http] chat_template = \"auto\" found no template that serves (" + why
                       + "); set chat_template to a built-in one";
          spdlog::warn("troupe: chat completions not served: {}", hc.no_chat);
        };
        // A Hugging Face template is read now, from the model directory or
        // its file; its errors name the file.
        std::optional<openai::jinja_source> jinja;
        std::string from;
        if (h.chat_template == "model" || h.chat_template == "jinja" || optional) {
          auto read = h.chat_template == "jinja" ? read_chat_template_file(h.chat_jinja, opts.model.path)
                                                 : read_model_chat_template(opts.model.path);
          if (auto* e = std::get_if<std::string>(&read)) {
            if (!optional)
              return opts.source + ": http.chat_template: " + *e;
            no_chat(*e);
          } else {
            jinja = std::get<openai::jinja_source>(std::move(read));
            from = h.chat_template == "jinja" ? h.chat_jinja : opts.model.path;
          }
        }
        if (!optional || jinja) {
          auto t = openai::make_chat_template(h.chat_template, chat_formats_of(h), jinja ? &*jinja : nullptr);
          if (auto* e = std::get_if<openai::chat_template_error>(&t)) { // the config check lets only a bad text through
            if (!optional)
              return opts.source + ": http." + e->key + ": " + (from.empty() ? "" : from + ": ") + e->what;
            no_chat(from + ": " + e->what);
          } else {
            hc.chat = std::get<openai::chat_template>(std::move(t));
            hc.chat->reasoning = openai::reasoning_parser(h.reasoning_parser);
            hc.chat->request_templates = h.request_chat_template;
          }
        }
      }
      auto http = http_front::open(hc);
      if (auto* err = std::get_if<std::string>(&http))
        return opts.source + ": http.listen: " + *err;
      p->http = std::get<std::unique_ptr<http_front>>(std::move(http));
      p->http_endpoint = p->http->endpoint();
      spdlog::info("troupe: OpenAI-compatible HTTP at {} (model \"{}\"{})", p->http_endpoint, hc.model,
                   hc.chat ? ", chat template " + hc.chat->name : std::string());
    }
  }

  register_message_types(p->cfg);
  if (cl.enabled())
    p->cfg.load<caf::io::middleman>();
  if (opts.caf.scheduler_threads > 0)
    p->cfg.set("scheduler.max-threads", static_cast<std::size_t>(opts.caf.scheduler_threads));
  p->sys = std::make_unique<caf::actor_system>(p->cfg);
  auto& sys = *p->sys;

  auto catalog = make_adapter_catalog(opts, rb);
  if (auto* err = std::get_if<std::string>(&catalog))
    return opts.source + ": " + *err;
  auto& adapters = std::get<adapter_catalog>(catalog);
  const auto adapters_known = adapters.all().size();

  auto pool = spawn_memory_pool(sys, rb.pool_pages, opts.memory_pool.host_pages);
  auto copy = spawn_copy_engine(sys, {rb.backend, rb.time_scale, rb.computes,
                                      opts.copy_engine.max_inflight});
  adapter_cache_config acc;
  acc.catalog = adapters;
  acc.policy = std::move(evict_policy);
  acc.options = opts.adapter_cache;
  acc.pool_pages = rb.pool_pages;
  acc.needs_files = rb.computes;
  acc.pool = pool;
  acc.copy_engine = copy;
  auto cache = spawn_adapter_cache(sys, std::move(acc));
  prefetcher_actor prefetcher;
  if (opts.adapter_cache.predictor != "none")
    prefetcher = spawn_prefetcher(sys, {std::move(predict_policy), cache,
                                        opts.adapter_cache.predictor_interval_s});
  auto exec = spawn_executor(sys, {rb.backend, rb.time_scale, rb.computes});
  metrics_actor metrics;
  if (opts.metrics.enabled)
    metrics = spawn_metrics(sys, opts.metrics);

  scheduler_config sc;
  sc.limits.max_running = opts.scheduler.max_running;
  sc.limits.token_budget = opts.scheduler.token_budget;
  sc.limits.max_waiting = opts.scheduler.max_waiting;
  sc.limits.total_pages = rb.pool_pages;
  sc.limits.page_tokens = opts.memory_pool.page_tokens;
  sc.limits.hidden_page_tokens = rb.backend->hidden_cache_tokens_per_page(opts.memory_pool.page_tokens);
  sc.limits.rope_long_after = rb.backend->rope_long_after();
  sc.limits.host_pages = opts.memory_pool.host_pages;
  sc.limits.on_demand = opts.scheduler.kv_reservation == "on_demand";
  sc.limits.session_pages = static_cast<std::uint64_t>(
    opts.scheduler.session_fraction * static_cast<double>(rb.pool_pages));
  sc.limits.growth_watermark = static_cast<std::uint64_t>(
    opts.scheduler.growth_watermark * static_cast<double>(rb.pool_pages));
  sc.limits.page_bytes = rb.page_bytes;
  sc.limits.disk_pages = opts.memory_pool.disk_pages;
  sc.limits.disk_write_back = opts.memory_pool.disk_write_back;
  if (fetch_by_cost && calibration) {
    auto m = policies::disk_fetch_model::from(*calibration, opts.memory_pool.disk_bytes_per_s);
    m.max_wait_s = opts.memory_pool.disk_max_wait_s;
    if (!m.fitted)
      spdlog::warn("memory_pool.disk_fetch = \"cost\": too few prefill timings to predict a recompute; "
                   "caches on disk are always read back");
    sc.limits.disk_fetch = m;
  }
  sc.limits.layer_streaming = opts.copy_engine.layer_streaming && rb.backend->streams_layers();
  sc.limits.advise_fetch_lead_s = opts.scheduler.advise_fetch_lead_s;
  sc.limits.prefix_caching = opts.scheduler.prefix_caching;
  sc.limits.prefix_admit_offers = opts.scheduler.prefix_cache_admission == "repeated" ? 2 : 1;
  sc.limits.prefix_idle_pages = static_cast<std::uint64_t>(
    opts.scheduler.prefix_cache_fraction * static_cast<double>(rb.pool_pages));
  sc.limits.session_eviction =
    policies::session_eviction_named(opts.scheduler.session_eviction).value_or(policies::session_eviction::lru);
  if (opts.memory_pool.disk_pages > 0) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path base = opts.memory_pool.disk_dir.empty() ? fs::temp_directory_path(ec)
                                                            : fs::path{opts.memory_pool.disk_dir};
    const auto dir = base / ("troupe-kv-" + std::to_string(::getpid()));
    fs::create_directories(dir, ec);
    if (ec)
      return opts.source + ": memory_pool.disk_dir: cannot create " + dir.string() + ": " + ec.message();
    p->disk_dir = dir.string();
    sc.disk_dir = p->disk_dir;
  }
  sc.policy = std::move(sched_policy);
  sc.backend = rb.backend;
  sc.pool = pool;
  sc.adapter_cache = cache;
  sc.executor = exec;
  sc.copy_engine = copy;
  sc.metrics = metrics;
  auto sched = spawn_scheduler(sys, std::move(sc));

  queue_tuner_actor tuner;
  if (opts.queue_tuner.enabled)
    tuner = spawn_queue_tuner(sys, {opts.queue_tuner, rb.pool_pages * opts.memory_pool.page_tokens, sched});
  classifier_actor classifier;
  if (opts.classifier.enabled) {
    class_policy->set_predictor(std::move(predictor));
    classifier = spawn_classifier(sys, {std::move(class_policy), sched, tuner, opts.memory_pool.page_tokens});
    caf::anon_send(sched, subscribe_atom_v, progress_sink_actor{caf::actor_cast<progress_sink_actor>(classifier)});
    if (tuner)
      caf::anon_send(tuner, subscribe_atom_v, caf::actor_cast<caf::actor>(classifier));
  }

  front_actor router;
  if (cl.enabled()) {
    auto joined = join_cluster(*p, sys, {classifier, sched, pool, cache, copy, tuner, metrics, exec}, router);
    if (!joined.empty())
      return opts.source + ": cluster: " + joined;
  }
  if (!front) {
    for (auto a : {caf::actor_cast<caf::actor>(pool), caf::actor_cast<caf::actor>(copy),
                   caf::actor_cast<caf::actor>(cache), caf::actor_cast<caf::actor>(exec),
                   caf::actor_cast<caf::actor>(metrics), caf::actor_cast<caf::actor>(sched),
                   caf::actor_cast<caf::actor>(classifier), caf::actor_cast<caf::actor>(prefetcher),
                   caf::actor_cast<caf::actor>(tuner)})
      if (a)
        p->actors.push_back(a);
    p->endpoint = "node " + std::to_string(cl.node) + " at " + cl.nodes[cl.node];
    spdlog::info("troupe: node {} of {} serving {} ({} on {}, {} pages) for the router at {}", cl.node,
                 cl.nodes.size(), opts.source, rb.shape.name, rb.gpu.name, rb.pool_pages, cl.nodes[cl.router]);
    return std::unique_ptr<deployment>(new deployment(std::move(p)));
  }

  intake_config ic;
  ic.limits.parse.max_frame_bytes = opts.server.max_frame_bytes;
  ic.limits.max_pending = opts.server.max_pending;
  ic.limits.max_context = rb.max_context;
  ic.limits.base_seed = opts.backend.seed;
  ic.catalog = std::move(adapters);
  ic.backend = rb.backend;
  ic.classifier = classifier;
  ic.scheduler = sched;
  ic.pool = pool;
  ic.adapter_cache = cache;
  ic.copy_engine = copy;
  ic.tuner = tuner;
  ic.prefetcher = prefetcher;
  ic.metrics = metrics;
  ic.executor = exec;
  auto* bridge_ptr = p->bridge.get();
  ic.send = [bridge_ptr](std::vector<outbound_frame> frames) {
    bridge_ptr->send(std::move(frames));
  };
  ic.router = router;
  p->intake = spawn_intake(sys, std::move(ic));
  if (router)
    caf::anon_send(router, subscribe_atom_v, progress_sink_actor{p->intake});
  else
    caf::anon_send(sched, subscribe_atom_v, progress_sink_actor{p->intake});

  for (auto a : {caf::actor_cast<caf::actor>(pool), caf::actor_cast<caf::actor>(copy),
                 caf::actor_cast<caf::actor>(cache), caf::actor_cast<caf::actor>(exec),
                 caf::actor_cast<caf::actor>(metrics), caf::actor_cast<caf::actor>(sched),
                 caf::actor_cast<caf::actor>(classifier), caf::actor_cast<caf::actor>(prefetcher),
                 caf::actor_cast<caf::actor>(tuner),
                 caf::actor_cast<caf::actor>(p->intake)})
    if (a)
      p->actors.push_back(a);

  p->bridge->start(sys, p->intake);
  p->endpoint = p->bridge->endpoint();
  {
    if (const auto per = rb.backend->hidden_cache_tokens_per_page(opts.memory_pool.page_tokens); per > 0)
      spdlog::info("troupe: hidden caches hold {} tokens per page (KV caches {})", per,
                   opts.memory_pool.page_tokens);
    else
      spdlog::info("troupe: hidden caches disabled: with {} KV heads of {} the model's K and V take no more "
                   "memory than its hidden states",
                   rb.shape.num_kv_heads, rb.shape.head_dim);
  }
  spdlog::info("troupe: serving {} ({} on {}, {} pages of {} KiB, {} adapters) at {}",
               opts.source, rb.shape.name, rb.gpu.name, rb.pool_pages, rb.page_bytes >> 10,
               adapters_known, p->bridge->endpoint());
  return std::unique_ptr<deployment>(new deployment(std::move(p)));
}

std::uint64_t deployment::stop() {
  auto& p = *impl_;
  if (p.stopped)
    return 0;
  p.stopped = true;
  std::uint64_t left = 0;
  if (p.http)
    p.http->cancel_background(); // their answers would be lost with the front's memory
  if (p.intake) {
    // Bootstrap code, like main(): blocking here is fine.
    caf::scoped_actor self{*p.sys};
    const auto deadline = std::chrono::steady_clock::now()
                          + std::chrono::duration<double>(p.opts.server.drain_timeout_s);
    for (;;) {
      self->request(p.intake, std::chrono::seconds(5), drain_atom_v)
        .receive([&](std::uint64_t n) { left = n; }, [&](caf::error&) { left = 0; });
      if (left == 0 || std::chrono::steady_clock::now() >= deadline)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (left > 0)
    spdlog::warn("troupe: stopping with {} requests still in flight", left);
  if (p.http)
    p.http->stop();
  if (p.bridge)
    p.bridge->stop();
  for (auto& a : p.actors)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  // Drop every handle before the system goes: its destructor waits for them.
  p.actors.clear();
  p.intake = nullptr;
  p.http.reset();
  p.bridge.reset();
  p.sys.reset();
  if (!p.disk_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(p.disk_dir, ec);
  }
  return left;
}

} // namespace troupe
