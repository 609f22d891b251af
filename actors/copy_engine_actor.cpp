#include "actors/copy_engine_actor.hpp"

#include "runtime/clock.hpp"
#include "runtime/detached_task.hpp"
#include "runtime/transfer_queue.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <coroutine>
#include <unordered_map>
#include <vector>

namespace troupe {

namespace {

struct pending_transfer {
  transfer_order order;
  std::vector<caf::typed_response_promise<transfer_report>> promises;
};

struct copy_engine_state {
  static inline const char* name = "copy_engine";
  copy_engine_config cfg;
  std::unique_ptr<transfer_queue> queue;
  /// The disk tier's file copies: a lane of their own, one at a time (the
  /// disk's bandwidth is one), so they never hold up PCIe copies. Their ids
  /// carry file_lane_bit.
  std::unique_ptr<transfer_queue> file_queue;
  std::unordered_map<std::uint64_t, pending_transfer> transfers;
  /// Transfer coroutines waiting for their copy, by transfer id, with the
  /// report the tick handler hands them when it resumes them.
  std::unordered_map<std::uint64_t, std::coroutine_handle<>> suspended;
  std::unordered_map<std::uint64_t, transfer_report> reports;
  std::uint64_t host_hits = 0;
  std::uint64_t disk_reads = 0;
  double disk_seconds = 0;
  std::uint64_t failures = 0;

  copy_engine_state() = default;
  copy_engine_state(const copy_engine_state&) = delete;
  copy_engine_state& operator=(const copy_engine_state&) = delete;
  ~copy_engine_state() {
    // Frames of transfers still in flight when the actor goes.
    for (auto& [id, h] : suspended)
      h.destroy();
  }
};

using self_ptr = copy_engine_actor::stateful_pointer<copy_engine_state>;

constexpr std::uint64_t file_lane_bit = std::uint64_t{1} << 63;

/// A session cache to or from its file (the disk tier).
bool is_file_op(const transfer_order& o) {
  const auto op = static_cast<kv_op>(o.kv_op);
  return op == kv_op::host_to_file || op == kv_op::file_to_host;
}

bool is_swap(const transfer_order& o) {
  const auto c = static_cast<transfer_class>(o.kind);
  return c == transfer_class::swap_in || c == transfer_class::swap_out;
}

/// The transfer in words, for the log.
std::string describe(const transfer_order& o) {
  const auto request = "request " + std::to_string(o.request_id);
  const auto pages = std::to_string(std::max(o.device_pages.size(), o.host_pages.size())) + " pages";
  switch (static_cast<kv_op>(o.kv_op)) {
    case kv_op::swap:
      break;
    case kv_op::export_device:
    case kv_op::export_host:
      return "reading out the cache of " + request + " (" + pages + ")";
    case kv_op::import_host:
      return "writing in the cache of " + request + " (" + pages + ")";
    case kv_op::stream_in:
      return "streaming in the cache of " + request + " (" + pages + ")";
    case kv_op::host_to_file:
      return "saving the cache of " + request + " to " + o.path;
    case kv_op::file_to_host:
      return "restoring the cache of " + request + " from " + o.path;
    default:
      return "cache operation " + std::to_string(o.kv_op);
  }
  if (is_swap(o))
    return std::string{static_cast<transfer_class>(o.kind) == transfer_class::swap_out ? "swapping out"
                                                                                       : "swapping in"}
           + " the cache of " + request + " (" + pages + ")";
  return "loading adapter " + std::to_string(o.adapter_id) + (o.path.empty() ? "" : " from " + o.path);
}

/// Runs one transfer on the backend: an adapter load, or a KV swap.
transfer_report perform(gpu::executor_backend& backend, const transfer_order& o) {
  switch (static_cast<kv_op>(o.kv_op)) {
    case kv_op::swap:
      break;
    case kv_op::export_device:
    case kv_op::export_host: {
      const bool host = static_cast<kv_op>(o.kv_op) == kv_op::export_host;
      auto r = backend.read_pages(host, host ? o.host_pages : o.device_pages, o.bytes);
      transfer_report out{r.error, false, 0, r.seconds, {}};
      out.data = std::move(r.data);
      return out;
    }
    case kv_op::import_host: {
      const auto r = backend.write_host_pages(o.host_pages, o.data, o.bytes);
      return {r.error, false, 0, r.seconds, {}};
    }
    case kv_op::stream_in: {
      const auto r = backend.stream_in(o.request_id, o.device_pages, o.host_pages, o.bytes);
      return {r.error, false, 0, r.seconds, {}};
    }
    case kv_op::host_to_file: {
      auto r = backend.read_pages(true, o.host_pages, o.bytes);
      if (!r.error.empty())
        return {r.error, false, 0, r.seconds, {}};
      const auto started = std::chrono::steady_clock::now();
      std::ofstream out{o.path, std::ios::binary | std::ios::trunc};
      out.write(r.data.data(), static_cast<std::streamsize>(r.data.size()));
      out.close();
      if (!out)
        return {"cannot write " + o.path, false, 0, r.seconds, {}};
      return {{}, false, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              r.seconds, {}};
    }
    case kv_op::file_to_host: {
      const auto started = std::chrono::steady_clock::now();
      std::ifstream in{o.path, std::ios::binary};
      std::string data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (!in && !in.eof())
        return {"cannot read " + o.path, false, 0, 0, {}};
      if (!std::filesystem::exists(o.path))
        return {o.path + " is gone", false, 0, 0, {}};
      const double disk = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const auto r = backend.write_host_pages(o.host_pages, data, o.bytes);
      return {r.error, false, disk, r.seconds, {}};
    }
    default:
      return {"unknown cache operation " + std::to_string(o.kv_op), false, 0, 0, {}};
  }
  if (is_swap(o)) {
    const auto dir = static_cast<transfer_class>(o.kind) == transfer_class::swap_out
                       ? gpu::swap_direction::out
                       : gpu::swap_direction::in;
    const auto r = backend.swap_pages(dir, o.device_pages, o.host_pages, o.bytes);
    return {r.error, false, 0, r.seconds, {}};
  }
  const auto r = backend.load_adapter(o.adapter_id, o.path, o.bytes, o.device_pages);
  return {r.error, r.host_hit, r.disk_seconds, r.copy_seconds, {}};
}

/// co_await copy{self, id, order}: runs the transfer on the backend (on a worker
/// thread when it really moves data, else modelled by a timer) and resumes
/// the awaiting coroutine, on the actor's thread, with the report.
struct copy {
  self_ptr self;
  std::uint64_t id;
  transfer_order order;

  bool await_ready() const noexcept { return false; }

  void await_suspend(std::coroutine_handle<> h) {
    auto& st = self->state;
    st.suspended.emplace(id, h);
    auto backend = st.cfg.backend;
    if (st.cfg.real) {
      // Reading and parsing files blocks: a worker thread of its own, which
      // reports back and ends.
      copy_engine_actor engine = self;
      self->system().spawn<caf::detached>([backend, order = order, id = id, engine] {
        caf::anon_send(engine, tick_atom_v, id, perform(*backend, order));
      });
      return;
    }
    // Modelled: the backend does the accounting; the time passes by timer.
    auto report = perform(*backend, order);
    const double delay = (report.disk_seconds + report.copy_seconds) * st.cfg.time_scale;
    if (delay <= 0)
      self->send(self, tick_atom_v, id, std::move(report));
    else
      self->delayed_send(self, seconds_span(delay), tick_atom_v, id, std::move(report));
  }

  transfer_report await_resume() {
    auto& reports = self->state.reports;
    auto report = std::move(reports.at(id));
    reports.erase(id);
    return report;
  }
};

void start_ready(self_ptr self);

/// One transfer, start to finish.
detached_task run_transfer(self_ptr self, std::uint64_t id, transfer_order order) {
  // A named awaiter: GCC 12 destroys temporaries in a co_await expression
  // twice when they own memory (the order's path).
  copy transfer{self, id, std::move(order)};
  const auto report = co_await transfer;
  auto& st = self->state;
  const bool ok = report.error.empty();
  if (id & file_lane_bit)
    st.file_queue->finished(id & ~file_lane_bit, monotonic_seconds(), ok);
  else
    st.queue->finished(id, monotonic_seconds(), ok);
  if (!ok) {
    ++st.failures;
    spdlog::warn("copy engine: {} failed: {}", describe(transfer.order), report.error);
  }
  else if (report.host_hit)
    ++st.host_hits;
  else if (!is_swap(transfer.order))
    ++st.disk_reads;
  st.disk_seconds += report.disk_seconds;
  if (auto i = st.transfers.find(id); i != st.transfers.end()) {
    for (auto& rp : i->second.promises)
      rp.deliver(report);
    st.transfers.erase(i);
  }
  start_ready(self);
}

/// Starts what the queue lets run now.
void start_ready(self_ptr self) {
  auto& st = self->state;
  for (const auto& started : st.queue->start_ready(monotonic_seconds()))
    if (auto i = st.transfers.find(started.id); i != st.transfers.end())
      run_transfer(self, started.id, i->second.order);
  for (const auto& started : st.file_queue->start_ready(monotonic_seconds())) {
    const auto id = started.id | file_lane_bit;
    if (auto i = st.transfers.find(id); i != st.transfers.end())
      run_transfer(self, id, i->second.order);
  }
}

copy_engine_actor::behavior_type copy_engine_impl(self_ptr self, copy_engine_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.queue = std::make_unique<transfer_queue>(std::max<std::uint32_t>(st.cfg.max_inflight, 1));
  st.file_queue = std::make_unique<transfer_queue>(1);
  return {
    [self](load_atom, transfer_order& order) {
      auto& st = self->state;
      auto rp = self->make_response_promise<transfer_report>();
      // Adapters are keyed by adapter id, swaps by request id.
      const std::uint64_t key = is_swap(order) ? order.request_id : order.adapter_id;
      const bool file = is_file_op(order);
      const auto id = (file ? st.file_queue : st.queue)->enqueue(static_cast<transfer_class>(order.kind), key,
                                                                 order.bytes, monotonic_seconds())
                      | (file ? file_lane_bit : 0);
      auto& t = st.transfers[id];
      if (t.promises.empty())
        t.order = std::move(order);
      t.promises.push_back(rp);
      start_ready(self);
      return rp;
    },
    [self](tick_atom, std::uint64_t id, transfer_report& report) {
      auto& st = self->state;
      auto i = st.suspended.find(id);
      if (i == st.suspended.end())
        return;
      const auto h = i->second;
      st.suspended.erase(i);
      st.reports[id] = std::move(report);
      h.resume();
    },
    [self](evict_atom, std::uint32_t adapter_id) {
      self->state.cfg.backend->drop_adapter(adapter_id);
    },
    [self](forget_atom, std::uint32_t adapter_id) {
      self->state.cfg.backend->forget_adapter(adapter_id);
    },
    [self](stats_atom) {
      const auto& st = self->state;
      stat_values out;
      for (auto c : {transfer_class::demand_load, transfer_class::swap_in, transfer_class::prefetch,
                     transfer_class::swap_out}) {
        const auto& a = st.queue->stats(c);
        const std::string prefix = "copy_" + std::string{to_string(c)};
        out.push_back(stat_counter(prefix + "_transfers", static_cast<double>(a.transfers)));
        out.push_back(stat_counter(prefix + "_bytes", static_cast<double>(a.bytes)));
        out.push_back(stat_counter(prefix + "_busy_s", a.busy_seconds));
        out.push_back(stat_counter(prefix + "_queued_s", a.queue_seconds));
      }
      // The disk tier's lane: writes to files (swap_out) and reads back.
      for (auto [c, name] : {std::pair{transfer_class::swap_out, "copy_file_writes"},
                             std::pair{transfer_class::swap_in, "copy_file_reads"}}) {
        const auto& a = st.file_queue->stats(c);
        out.push_back(stat_counter(name, static_cast<double>(a.transfers)));
        out.push_back(stat_counter(std::string{name} + "_busy_s", a.busy_seconds));
        out.push_back(stat_counter(std::string{name} + "_queued_s", a.queue_seconds));
      }
      out.push_back(stat_counter("copy_host_hits", static_cast<double>(st.host_hits)));
      out.push_back(stat_counter("copy_disk_reads", static_cast<double>(st.disk_reads)));
      out.push_back(stat_counter("copy_disk_s", st.disk_seconds));
      out.push_back(stat_counter("copy_failures", static_cast<double>(st.failures)));
      return out;
    },
  };
}

} // namespace

copy_engine_actor spawn_copy_engine(caf::actor_system& sys, copy_engine_config cfg) {
  return sys.spawn(copy_engine_impl, std::move(cfg));
}

} // namespace troupe
