// The typed actor interface of every role (CAF 0.17 syntax). Each actor in
// actors/ implements exactly one of these; handles are passed by these types.
// Payloads: messages/payloads.hpp; atoms and type IDs: messages/type_ids.hpp.
#pragma once

#include "messages/type_ids.hpp"

#include <caf/replies_to.hpp>
#include <caf/actor.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

/// Anyone that takes a scheduler's progress (tokens, finished requests).
using progress_sink_actor = caf::typed_actor<caf::reacts_to<progress_batch>>;

/// intake: client frames in (from the ZeroMQ bridge), replies out.
using intake_actor = caf::typed_actor<
  caf::reacts_to<progress_batch>,
  /// A frame from peer (routing id bytes), payload.
  caf::reacts_to<frame_atom, std::string, std::string>,
  /// The peer is gone (a send to it failed): cancel its requests.
  caf::reacts_to<gone_atom, std::string>,
  /// Stop taking new work; replies with the number of requests in flight.
  caf::replies_to<drain_atom>::with<std::uint64_t>>;

/// classifier: assigns a queue and a predicted length, then submits to the
/// scheduler on the caller's behalf (the caller gets the scheduler's answer).
using classifier_actor = caf::typed_actor<
  caf::replies_to<classify_atom, request_spec>::with<std::uint8_t>,
  /// New cut-offs from the queue tuner.
  caf::reacts_to<policies::queue_tuning>,
  /// Finished requests: the output-length predictor learns from them.
  caf::reacts_to<progress_batch>>;

/// scheduler: continuous batching. submit replies a
/// scheduler_core::submit_result; cancel replies whether the id was known.
using scheduler_actor = caf::typed_actor<
  caf::replies_to<submit_atom, request_spec>::with<std::uint8_t>,
  /// New queue quotas from the queue tuner.
  caf::reacts_to<policies::queue_tuning>,
  caf::replies_to<cancel_atom, std::uint64_t>::with<bool>,
  caf::reacts_to<subscribe_atom, progress_sink_actor>,
  /// An advisory for a session (internal id), its turn expected in the
  /// given seconds: where its cache is now (a scheduler_core::advice).
  caf::replies_to<advise_atom, std::uint64_t, double>::with<std::uint8_t>,
  /// To itself: the fetch an advisory put off is due.
  caf::reacts_to<tick_atom, advise_atom, std::uint64_t>,
  /// The session's cache (read out of its pages, which are then freed),
  /// for another node; pages 0 when there is none to give.
  caf::replies_to<export_atom, std::uint64_t>::with<session_kv>,
  /// A session's cache from another node, kept in the host pool; replies
  /// whether it was taken.
  caf::replies_to<import_atom, session_kv>::with<bool>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// node: one node of a multi-node deployment as the router sees it,
/// published over CAF's middleman. submit, cancel and advise go to the
/// node's scheduler (through its classifier when it has one).
using node_actor = caf::typed_actor<
  caf::replies_to<submit_atom, request_spec>::with<std::uint8_t>,
  caf::replies_to<cancel_atom, std::uint64_t>::with<bool>,
  caf::replies_to<advise_atom, std::uint64_t, double>::with<std::uint8_t>,
  caf::reacts_to<subscribe_atom, progress_sink_actor>,
  /// The session's cache, leaving this node (the scheduler's export).
  caf::replies_to<export_atom, std::uint64_t>::with<session_kv>,
  /// Pulls the session's cache from node `from` (a node_actor) into this
  /// node's host pool; replies whether it came.
  caf::replies_to<pull_atom, std::uint64_t, caf::actor>::with<bool>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// The front of a deployment for the intake: the router of a multi-node
/// deployment (which also takes the nodes' progress and passes it on).
using front_actor = caf::typed_actor<
  caf::replies_to<submit_atom, request_spec>::with<std::uint8_t>,
  caf::replies_to<cancel_atom, std::uint64_t>::with<bool>,
  caf::replies_to<advise_atom, std::uint64_t, double>::with<std::uint8_t>,
  /// To itself: an advisory whose placement was put off (session, token)
  /// is due.
  caf::reacts_to<tick_atom, advise_atom, std::uint64_t, std::uint64_t>,
  caf::reacts_to<subscribe_atom, progress_sink_actor>,
  caf::reacts_to<progress_batch>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// memory_pool: pages for (tier, owner kind, owner id) from the device's
/// unified pool or the host pool (pool_tier, page_owner_kind in
/// runtime/memory_pool.hpp). reserve(tier, kind, owner, n, keep_free) replies
/// the owner's page ids: all n, or none when fewer than n + keep_free pages
/// are free.
using memory_pool_actor = caf::typed_actor<
  caf::replies_to<reserve_atom, std::uint8_t, std::uint8_t, std::uint64_t, std::uint64_t,
                  std::uint64_t>::with<std::vector<std::uint32_t>>,
  caf::reacts_to<release_atom, std::uint8_t, std::uint8_t, std::uint64_t>,
  /// adopt(tier, kind, from, to): every page of `from` becomes `to`'s.
  caf::reacts_to<adopt_atom, std::uint8_t, std::uint8_t, std::uint64_t, std::uint64_t>,
  /// adopt(tier, kind, from, to, pages): those pages of `from` become `to`'s
  /// (a request's prompt pages joining the prefix cache).
  caf::reacts_to<adopt_atom, std::uint8_t, std::uint8_t, std::uint64_t, std::uint64_t, std::vector<std::uint32_t>>,
  /// release(tier, kind, owner, pages): frees those pages of `owner`.
  caf::reacts_to<release_atom, std::uint8_t, std::uint8_t, std::uint64_t, std::vector<std::uint32_t>>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// copy_engine: adapter loads onto the device through the backend, queued by
/// transfer_class priority; load replies what the transfer took (an error
/// string in the report when the adapter's files could not be read).
using copy_engine_actor = caf::typed_actor<
  caf::replies_to<load_atom, transfer_order>::with<transfer_report>,
  /// Free an evicted adapter on the device.
  caf::reacts_to<evict_atom, std::uint32_t>,
  /// Forget an unregistered adapter on the device and in the host tier.
  caf::reacts_to<forget_atom, std::uint32_t>,
  /// Internal: transfer `id` finished (modelled time elapsed, or the worker
  /// thread is done) with this report.
  caf::reacts_to<tick_atom, std::uint64_t, transfer_report>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// adapter_cache: owns the adapter registry; pins adapters in GPU memory,
/// loading them when absent. acquire replies a scheduler_core::adapter_grant.
using adapter_cache_actor = caf::typed_actor<
  caf::replies_to<acquire_atom, std::uint32_t>::with<std::uint8_t>,
  caf::reacts_to<release_atom, std::uint32_t>,
  /// Evict idle adapters to free about this many pages; replies pages freed.
  caf::replies_to<trim_atom, std::uint64_t>::with<std::uint64_t>,
  /// Waiting requests per adapter, from the scheduler.
  caf::reacts_to<adapter_demand>,
  /// Adapters a predictor expects soon: load them while memory is idle.
  caf::reacts_to<prefetch_atom, std::vector<std::uint32_t>>,
  caf::replies_to<register_atom, adapter_spec>::with<register_result>,
  /// Unregister by id; replies "" or why it could not.
  caf::replies_to<unregister_atom, std::uint32_t>::with<std::string>,
  caf::replies_to<list_atom>::with<std::vector<adapter_status>>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// The queue tuner (policy actor): samples from the classifier; on its timer
/// it re-tunes and sends the result to the classifier and the scheduler.
using queue_tuner_actor = caf::typed_actor<
  caf::reacts_to<wrs_sample>,
  /// Also send tunings to this actor (the classifier, which is spawned after
  /// the tuner because it sends to it).
  caf::reacts_to<subscribe_atom, caf::actor>,
  caf::reacts_to<tick_atom>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// A predictive prefetcher (policy actor): told of arrivals per adapter,
/// it sends prefetch lists to the adapter cache on its own schedule.
using prefetcher_actor = caf::typed_actor<
  caf::reacts_to<arrival_atom, std::uint32_t>,
  caf::reacts_to<tick_atom>>;

/// executor: runs one step of a batch on its backend; stats replies the
/// backend's own figures (executor_backend::counters).
using executor_actor = caf::typed_actor<
  caf::replies_to<run_step_atom, std::vector<gpu::step_entry>>::with<gpu::step_result>,
  /// Internal timer: step `id` finished.
  caf::reacts_to<tick_atom, std::uint64_t>,
  caf::replies_to<stats_atom>::with<stat_values>>;

/// metrics: step and request figures; stats replies a snapshot.
using metrics_actor = caf::typed_actor<
  caf::reacts_to<step_metrics>,
  caf::reacts_to<progress_batch>,
  caf::reacts_to<tick_atom>,
  caf::replies_to<stats_atom>::with<stat_values>>;

} // namespace troupe
