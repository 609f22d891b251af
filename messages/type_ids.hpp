// The one CAF type-ID block of the project and its atoms. Every actor and
// tool that builds an actor_system loads it with add_message_types (see
// messages/type_ids.cpp: register_message_types).
#pragma once

#include "messages/inspect.hpp"

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(troupe, (troupe::token_event))
  CAF_ADD_TYPE_ID(troupe, (troupe::finish_event))
  CAF_ADD_TYPE_ID(troupe, (troupe::progress_batch))
  CAF_ADD_TYPE_ID(troupe, (troupe::step_metrics))
  CAF_ADD_TYPE_ID(troupe, (troupe::adapter_status))
  CAF_ADD_TYPE_ID(troupe, (troupe::request_spec))
  CAF_ADD_TYPE_ID(troupe, (troupe::gpu::step_entry))
  CAF_ADD_TYPE_ID(troupe, (troupe::gpu::step_result))
  CAF_ADD_TYPE_ID(troupe, (troupe::stat_values))
  CAF_ADD_TYPE_ID(troupe, (std::vector<std::uint32_t>))
  CAF_ADD_TYPE_ID(troupe, (troupe::adapter_demand))
  CAF_ADD_TYPE_ID(troupe, (troupe::transfer_order))
  CAF_ADD_TYPE_ID(troupe, (troupe::transfer_report))
  CAF_ADD_TYPE_ID(troupe, (troupe::adapter_spec))
  CAF_ADD_TYPE_ID(troupe, (troupe::adapter_entry))
  CAF_ADD_TYPE_ID(troupe, (troupe::register_result))
  CAF_ADD_TYPE_ID(troupe, (troupe::wrs_sample))
  CAF_ADD_TYPE_ID(troupe, (troupe::policies::queue_tuning))
  CAF_ADD_TYPE_ID(troupe, (troupe::session_kv))
  // Sent between nodes (the router subscribes to each node's progress).
  CAF_ADD_TYPE_ID(troupe, (caf::typed_actor<caf::reacts_to<troupe::progress_batch>>))

  CAF_ADD_ATOM(troupe, troupe, submit_atom, "submit")
  CAF_ADD_ATOM(troupe, troupe, cancel_atom, "cancel")
  CAF_ADD_ATOM(troupe, troupe, classify_atom, "classify")
  CAF_ADD_ATOM(troupe, troupe, reserve_atom, "reserve")
  CAF_ADD_ATOM(troupe, troupe, release_atom, "release")
  CAF_ADD_ATOM(troupe, troupe, acquire_atom, "acquire")
  CAF_ADD_ATOM(troupe, troupe, trim_atom, "trim")
  CAF_ADD_ATOM(troupe, troupe, load_atom, "load")
  CAF_ADD_ATOM(troupe, troupe, run_step_atom, "run_step")
  CAF_ADD_ATOM(troupe, troupe, stats_atom, "stats")
  CAF_ADD_ATOM(troupe, troupe, list_atom, "list")
  CAF_ADD_ATOM(troupe, troupe, subscribe_atom, "subscribe")
  CAF_ADD_ATOM(troupe, troupe, tick_atom, "tick")
  CAF_ADD_ATOM(troupe, troupe, frame_atom, "frame")
  CAF_ADD_ATOM(troupe, troupe, gone_atom, "gone")
  CAF_ADD_ATOM(troupe, troupe, drain_atom, "drain")
  CAF_ADD_ATOM(troupe, troupe, register_atom, "register")
  CAF_ADD_ATOM(troupe, troupe, unregister_atom, "unregist")
  CAF_ADD_ATOM(troupe, troupe, evict_atom, "evict")
  CAF_ADD_ATOM(troupe, troupe, forget_atom, "forget")
  CAF_ADD_ATOM(troupe, troupe, prefetch_atom, "prefetch")
  CAF_ADD_ATOM(troupe, troupe, arrival_atom, "arrival")
  CAF_ADD_ATOM(troupe, troupe, adopt_atom, "adopt")
  CAF_ADD_ATOM(troupe, troupe, advise_atom, "advise")
  CAF_ADD_ATOM(troupe, troupe, export_atom, "export")
  CAF_ADD_ATOM(troupe, troupe, import_atom, "import")
  CAF_ADD_ATOM(troupe, troupe, pull_atom, "pull")

CAF_END_TYPE_ID_BLOCK(troupe)

namespace troupe {

/// Registers every message type of the project with `cfg`. Call once before
/// constructing the actor_system.
void register_message_types(caf::actor_system_config& cfg);

} // namespace troupe
