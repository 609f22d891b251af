// CAF 0.17 inspect overloads for every message payload, so they can be
// serialized by CAF (and cross the middleman). Included by type_ids.hpp.
#pragma once

#include "messages/payloads.hpp"

#include <caf/meta/type_name.hpp>

namespace troupe {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
  return f(caf::meta::type_name("token_event"), x.request_id, x.index, x.token);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logprobs_event& x) {
  return f(caf::meta::type_name("logprobs_event"), x.request_id, x.index, x.logprobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prompt_logprobs_event& x) {
  return f(caf::meta::type_name("prompt_logprobs_event"), x.request_id, x.logprobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_event& x) {
  return f(caf::meta::type_name("finish_event"), x.request_id, x.reason,
           x.prompt_tokens, x.completion_tokens, x.queue_ms, x.ttft_ms, x.e2e_ms, x.cached_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, progress_batch& x) {
  return f(caf::meta::type_name("progress_batch"), x.tokens, x.finished, x.logprobs, x.prompt_logprobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_metrics& x) {
  return f(caf::meta::type_name("step_metrics"), x.batch_size, x.new_tokens,
           x.device_seconds, x.wall_seconds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stat_value& x) {
  return f(caf::meta::type_name("stat_value"), x.name, x.value, x.kind);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, adapter_status& x) {
  return f(caf::meta::type_name("adapter_status"), x.name, x.rank, x.resident);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  return f(caf::meta::type_name("request_spec"), x.request_id, x.prompt,
           x.max_new_tokens, x.fit_context, x.adapter_id, x.adapter_rank, x.adapter_pages, x.seed, x.temperature,
           x.top_p, x.top_k, x.logprobs, x.prompt_logprobs, x.presence_penalty, x.frequency_penalty,
           x.logit_bias, x.min_p, x.repetition_penalty, x.priority, x.session, x.stop, x.stop_token_ids, x.bad_words, x.allowed_token_ids, x.ignore_eos, x.skip_special_tokens, x.min_tokens, x.json_object,
           x.json_schema, x.json_trigger, x.json_trigger_first, x.json_trigger_head, x.json_answer, x.reasoning_close, x.reasoning_open, x.choice, x.regex, x.grammar, x.queue,
           x.predicted_tokens, x.arrival_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, adapter_demand& x) {
  return f(caf::meta::type_name("adapter_demand"), x.adapter_ids, x.waiting);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_order& x) {
  return f(caf::meta::type_name("transfer_order"), x.adapter_id, x.bytes, x.path, x.kind,
           x.request_id, x.device_pages, x.host_pages, x.kv_op, x.data);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_kv& x) {
  return f(caf::meta::type_name("session_kv"), x.session, x.tokens, x.adapter_id, x.pages, x.data,
           x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_report& x) {
  return f(caf::meta::type_name("transfer_report"), x.error, x.host_hit, x.disk_seconds,
           x.copy_seconds, x.data);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, adapter_spec& x) {
  return f(caf::meta::type_name("adapter_spec"), x.name, x.rank, x.path);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, adapter_entry& x) {
  return f(caf::meta::type_name("adapter_entry"), x.id, x.name, x.rank, x.bytes, x.pages, x.path);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wrs_sample& x) {
  return f(caf::meta::type_name("wrs_sample"), x.arrival_s, x.wrs, x.cost_tokens, x.predicted_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, register_result& x) {
  return f(caf::meta::type_name("register_result"), x.entry, x.error);
}

} // namespace troupe

namespace troupe::gpu {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_entry& x) {
  return f(caf::meta::type_name("step_entry"), x.request_id, x.adapter_id,
           x.adapter_rank, x.new_tokens, x.context_tokens, x.output_index, x.seed,
           x.temperature, x.top_p, x.top_k, x.min_p, x.repetition_penalty, x.logprobs, x.prompt_logprobs,
           x.logit_adjust, x.tokens, x.pages,
           x.hidden, x.stream);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logit_adjustment& x) {
  return f(caf::meta::type_name("logit_adjustment"), x.token, x.delta, x.repeated);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  return f(caf::meta::type_name("token_logprob"), x.token, x.logprob);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.logprob, x.top);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_failure& x) {
  return f(caf::meta::type_name("step_failure"), x.request_id, x.reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.tokens, x.logprobs, x.prompt_logprobs, x.device_seconds,
           x.failures);
}

} // namespace troupe::gpu

namespace troupe::policies {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_tuning& x) {
  return f(caf::meta::type_name("queue_tuning"), x.cutoffs, x.quotas);
}

} // namespace troupe::policies
