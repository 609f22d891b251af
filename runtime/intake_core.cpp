#include "runtime/intake_core.hpp"

#include "gpu/random.hpp"
#include "runtime/grammar_constraint.hpp"
#include "runtime/json_pattern.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/json_trigger.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe {

intake_core::intake_core(intake_limits limits, const adapter_catalog& adapters,
                         std::shared_ptr<const gpu::executor_backend> backend)
  : limits_(limits), backend_(std::move(backend)) {
  for (const auto& [id, e] : adapters.all())
    adapters_.emplace(e.name, e);
  limits_.parse.vocab_size = backend_->vocab().vocab_size();
  if (limits_.parse.max_tokens > limits_.max_context)
    limits_.parse.max_tokens = limits_.max_context;
}

outbound_frame intake_core::error_frame(const std::string& peer, const std::string& id,
                                        wire::error_code code, std::string message) {
  ++rejected_;
  return {peer, wire::to_json(wire::error_reply{id, code, std::move(message)})};
}

namespace {

/// The length of `s` without a UTF-8 sequence cut short at its end: a lead
/// byte in the last three bytes whose sequence runs past the end. Bytes
/// that are not UTF-8 at all are not held (they could never complete).
std::size_t complete_utf8_prefix(std::string_view s) {
  const auto n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation byte: its lead is further back
    const std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back < len ? n - back : n;
  }
  return n;
}

/// vLLM's bad_words as token sequences: each word (its leading blanks cut)
/// as the vocabulary encodes it alone and after a space, less the leading
/// tokens that stand for no text (a BOS the encoding adds) and, alone,
/// those that stand for blanks only (the space SentencePiece puts first as
/// a token of its own); each sequence once.
std::vector<std::vector<std::int32_t>> bad_word_tokens(const gpu::tokenizer& vocab,
                                                       const std::vector<std::string>& words) {
  const auto blank = [](const std::string& s) { return s.find_first_not_of(" \t\n\r") == std::string::npos; };
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& word : words) {
    const auto bare = word.substr(std::min(word.size(), word.find_first_not_of(" \t\n\r")));
    if (bare.empty())
      continue; // blanks alone: nothing to keep out
    for (const auto& text : {bare, " " + bare}) {
      auto tokens = vocab.encode(text);
      const bool alone = text.size() == bare.size();
      const auto first = std::find_if(tokens.begin(), tokens.end(), [&](std::int32_t t) {
        const auto shown = vocab.decode(t);
        return alone ? !blank(shown) : !shown.empty();
      });
      tokens.erase(tokens.begin(), first);
      if (!tokens.empty() && std::find(out.begin(), out.end(), tokens) == out.end())
        out.push_back(std::move(tokens));
    }
  }
  return out;
}

} // namespace

std::string intake_core::decode(const std::vector<std::int32_t>& tokens, bool keep_special, bool ended) const {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    text += backend_->vocab().shown(tokens[i], keep_special && !(ended && i + 1 == tokens.size()));
  return text;
}

bool intake_core::ended_by_last(const pending& p, const std::vector<std::int32_t>& tokens, std::uint8_t reason) {
  const auto why = static_cast<finish_reason>(reason);
  return p.keep_special && !tokens.empty() && (why == finish_reason::eos || why == finish_reason::stop)
         && std::binary_search(p.ends.begin(), p.ends.end(), tokens.back());
}

wire::token_logprobs intake_core::logprobs_of(std::int32_t token, const gpu::token_logprobs* lp) const {
  const auto& vocab = backend_->vocab();
  wire::token_logprobs out;
  out.sampled = {token, vocab.decode(token), lp ? lp->logprob : 0.0f};
  if (lp != nullptr) {
    out.top.reserve(lp->top.size());
    for (const auto& x : lp->top)
      out.top.push_back({x.token, vocab.decode(x.token), x.logprob});
  }
  return out;
}

std::vector<wire::token_logprobs> intake_core::prompt_logprobs_of(const std::vector<std::int32_t>& prompt,
                                                                 const std::vector<gpu::token_logprobs>& lps) const {
  std::vector<wire::token_logprobs> out;
  out.reserve(prompt.size());
  for (std::size_t k = 0; k < prompt.size(); ++k)
    out.push_back(logprobs_of(prompt[k], k == 0 || k - 1 >= lps.size() ? nullptr : &lps[k - 1]));
  if (!out.empty()) // nothing precedes the first token
    out.front().sampled.logprob = std::numeric_limits<float>::quiet_NaN();
  return out;
}

void intake_core::send_accepted(pending& p, std::vector<outbound_frame>& out) {
  if (p.accepted_sent)
    return;
  p.accepted_sent = true;
  ++accepted_;
  out.push_back({p.peer, wire::to_json(wire::accepted_reply{p.client_id, p.prompt_tokens})});
}

void intake_core::forget(std::uint64_t request_id) {
  auto i = requests_.find(request_id);
  if (i == requests_.end())
    return;
  by_client_.erase({i->second.peer, i->second.client_id});
  if (!i->second.adapter.empty()) {
    auto u = adapter_users_.find(i->second.adapter);
    if (u != adapter_users_.end() && --u->second == 0)
      adapter_users_.erase(u);
  }
  requests_.erase(i);
}

std::uint32_t intake_core::adapter_users(const std::string& name) const {
  auto i = adapter_users_.find(name);
  return i == adapter_users_.end() ? 0 : i->second;
}

void intake_core::adapter_request(const std::string& peer, wire::load_adapter_request&& l,
                                  intake_actions& out) {
  if (adapters_.contains(l.name)) {
    out.replies.push_back(error_frame(peer, l.id, wire::error_code::adapter_exists,
                                      "an adapter named \"" + l.name
                                        + "\" is already registered; unload it first"));
    return;
  }
  out.register_adapter = adapter_spec{l.name, l.rank, l.path};
  out.query_id = l.id;
}

void intake_core::adapter_request(const std::string& peer, wire::unload_adapter_request&& u,
                                  intake_actions& out) {
  auto i = adapters_.find(u.name);
  if (i == adapters_.end()) {
    out.replies.push_back(error_frame(peer, u.id, wire::error_code::unknown_adapter,
                                      "no adapter named \"" + u.name + "\""));
    return;
  }
  if (const auto users = adapter_users(u.name); users > 0) {
    out.replies.push_back(error_frame(
      peer, u.id, wire::error_code::adapter_in_use,
      "adapter \"" + u.name + "\" is used by " + std::to_string(users)
        + " request(s) in flight; unload it after they finish"));
    return;
  }
  // Forget the name now: no request accepted from here on can use it.
  out.unregister_adapter = i->second;
  out.query_id = u.id;
  adapters_.erase(i);
}

std::vector<outbound_frame> intake_core::on_registered(const std::string& peer,
                                                       const std::string& client_id,
                                                       const std::variant<adapter_entry, std::string>& r) {
  if (const auto* err = std::get_if<std::string>(&r))
    return {error_frame(peer, client_id, wire::error_code::bad_adapter, *err)};
  const auto& e = std::get<adapter_entry>(r);
  adapters_[e.name] = e;
  return {{peer, wire::to_json(wire::adapter_reply{client_id, e.name, e.rank, "loaded"})}};
}

std::vector<outbound_frame> intake_core::on_unregistered(const std::string& peer,
                                                         const std::string& client_id,
                                                         const adapter_entry& entry,
                                                         const std::string& error) {
  if (!error.empty())
    return {error_frame(peer, client_id, wire::error_code::internal, error)};
  return {{peer, wire::to_json(wire::adapter_reply{client_id, entry.name, entry.rank, "unloaded"})}};
}

intake_actions intake_core::on_frame(const std::string& peer, std::string_view payload,
                                     double now_s) {
  intake_actions out;
  auto parsed = wire::parse_request(payload, limits_.parse);
  if (auto* err = std::get_if<wire::parse_error>(&parsed)) {
    out.replies.push_back(error_frame(peer, err->id, err->code, err->message));
    return out;
  }
  auto& req = std::get<wire::request>(parsed);
  if (auto* g = std::get_if<wire::generate_request>(&req)) {
    generate(peer, std::move(*g), now_s, out);
  } else if (auto* c = std::get_if<wire::cancel_request>(&req)) {
    auto i = by_client_.find({peer, c->id});
    if (i == by_client_.end())
      out.replies.push_back(error_frame(peer, c->id, wire::error_code::unknown_request,
                                        "no request with id \"" + c->id
                                          + "\" is in flight for this client"));
    else if (auto& p = requests_.at(i->second); p.submitted)
      out.cancel = i->second;
    else
      p.cancel_held = true; // sent once the scheduler has it
  } else if (auto* h = std::get_if<wire::health_request>(&req)) {
    const bool failed = backend_ && !backend_->broken().empty();
    out.replies.push_back(
      {peer, wire::to_json(wire::health_reply{h->id, failed ? "failed" : draining_ ? "draining" : "ok"})});
  } else if (auto* s = std::get_if<wire::stats_request>(&req)) {
    out.ask = intake_actions::query::stats;
    out.query_id = s->id;
  } else if (auto* l = std::get_if<wire::list_adapters_request>(&req)) {
    out.ask = intake_actions::query::adapters;
    out.query_id = l->id;
  } else if (auto* la = std::get_if<wire::load_adapter_request>(&req)) {
    adapter_request(peer, std::move(*la), out);
  } else if (auto* ua = std::get_if<wire::unload_adapter_request>(&req)) {
    adapter_request(peer, std::move(*ua), out);
  } else if (auto* ad = std::get_if<wire::advise_request>(&req)) {
    out.advise = intake_actions::advisory{session_id_of(ad->session), ad->session, ad->in_s};
    out.query_id = ad->id;
  } else if (backend_ == nullptr) {
    // tokenize, detokenize: answered here, with the backend's tokenizer.
    out.replies.push_back(error_frame(peer, std::visit([](const auto& r) { return r.id; }, req),
                                      wire::error_code::internal, "this server has no tokenizer"));
  } else if (auto* t = std::get_if<wire::tokenize_request>(&req)) {
    out.replies.push_back(
      {peer, wire::to_json(wire::tokenize_reply{t->id, backend_->vocab().encode(t->prompt), limits_.max_context,
                                                backend_->vocab().end_tokens()})});
  } else if (auto* d = std::get_if<wire::detokenize_request>(&req)) {
    out.replies.push_back({peer, wire::to_json(wire::detokenize_reply{d->id, decode(d->tokens)})});
  }
  return out;
}

std::uint64_t session_id_of(const std::string& name) noexcept {
  if (name.empty())
    return 0;
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h | 1;
}

void intake_core::generate(const std::string& peer, wire::generate_request&& g,
                           double now_s, intake_actions& out) {
  using wire::error_code;
  // Thinking counted whatever holds the content (the marks are taken off a
  // request whose constraint this backend cannot hold).
  std::optional<reasoning_counter> thinking;
  if (!g.reasoning_close.empty())
    thinking.emplace(g.reasoning_open, g.reasoning_close);
  if (draining_) {
    out.replies.push_back(error_frame(peer, g.id, error_code::shutting_down,
                                      "the server is shutting down and takes no new requests"));
    return;
  }
  if (backend_) {
    if (auto why = backend_->broken(); !why.empty()) {
      out.replies.push_back(error_frame(peer, g.id, error_code::internal,
                                        "the " + backend_->name() + " backend can run nothing more (" + why
                                          + "); the server is stopping"));
      return;
    }
  }
  if (by_client_.contains({peer, g.id})) {
    out.replies.push_back(error_frame(peer, g.id, error_code::duplicate_id,
                                      "a request with id \"" + g.id
                                        + "\" is still in flight; use a new id"));
    return;
  }
  if (requests_.size() >= limits_.max_pending) {
    out.replies.push_back(error_frame(
      peer, g.id, error_code::overloaded,
      std::to_string(requests_.size()) + " requests are pending (limit "
        + std::to_string(limits_.max_pending) + "); retry later"));
    return;
  }
  const adapter_entry* adapter = nullptr;
  if (!g.adapter.empty()) {
    auto a = adapters_.find(g.adapter);
    adapter = a == adapters_.end() ? nullptr : &a->second;
    if (adapter == nullptr) {
      out.replies.push_back(error_frame(peer, g.id, error_code::unknown_adapter,
                                        "no adapter named \"" + g.adapter
                                          + "\"; list_adapters shows the known ones"));
      return;
    }
  }
  // Log-probabilities the backend cannot compute: refused, naming the field.
  auto refuse_uncomputed = [&](const char* field, const char* what) {
    out.replies.push_back(error_frame(peer, g.id, error_code::bad_request,
                                      std::string("field \"") + field + "\": the " + backend_->name()
                                        + " backend computes no " + what + "; the cpu and cuda backends do"));
  };
  if (g.logprobs >= 0 && !backend_->computes_logprobs()) {
    refuse_uncomputed("logprobs", "log-probabilities (it has no logits), so it cannot rank OpenAI's best_of "
                                  "candidates by them either");
    return;
  }
  if (!g.json_trigger.empty() && !g.json_trigger_first && g.json_answer.empty() && !backend_->computes_logprobs()) {
    // Free text until the trigger: served, all of it free (the wire's word).
    g.json_object = false;
    g.json_schema.clear();
    g.json_trigger.clear();
    g.json_trigger_head.clear();
    g.reasoning_close.clear();
    g.reasoning_open.clear();
  }
  // Output held token by token: the field that holds it, and to what.
  const auto [held_by, held_to] = !g.json_answer.empty()   ? std::pair{"json_answer", "JSON"}
                                  : g.json_object           ? std::pair{"response_format", "JSON"}
                                  : !g.json_schema.empty() ? std::pair{"json_schema", "JSON"}
                                  : !g.choice.empty()      ? std::pair{"choice", "the choices"}
                                  : !g.regex.empty()       ? std::pair{"regex", "an expression"}
                                  : !g.grammar.empty()     ? std::pair{"grammar", "a grammar"}
                                                           : std::pair{"", ""};
  if (*held_by != '\0' && !backend_->computes_logprobs()) {
    out.replies.push_back(error_frame(peer, g.id, error_code::bad_request,
                                      std::string("field \"") + held_by + "\": the " + backend_->name()
                                        + " backend samples from no logits, so it cannot keep an output to " + held_to
                                        + "; the cpu and cuda backends do"));
    return;
  }
  if (!g.regex.empty()) {
    try {
      (void)json_pattern(g.regex, json_pattern::match::whole);
    } catch (const std::invalid_argument& e) {
      out.replies.push_back(error_frame(peer, g.id, error_code::bad_request, std::string("field \"regex\": ") + e.what()));
      return;
    }
  }
  if (!g.grammar.empty()) {
    try {
      (void)held_grammar(g.grammar);
    } catch (const std::invalid_argument& e) {
      out.replies.push_back(
        error_frame(peer, g.id, error_code::bad_request, std::string("field \"grammar\": ") + e.what()));
      return;
    }
  }
  if (!g.json_schema.empty()) {
    try {
      if (g.json_trigger_head.empty())
        (void)schemas_.get(g.json_schema);
      else // the properties are the values' schemas
        (void)trigger_heads(g.json_schema, g.json_trigger_head, schemas_);
    } catch (const std::invalid_argument& e) {
      out.replies.push_back(error_frame(peer, g.id, error_code::bad_request,
                                        std::string("field \"json_schema\": ") + e.what()));
      return;
    }
  }
  if (!g.json_answer.empty()) {
    try {
      (void)schemas_.get(g.json_answer);
    } catch (const std::invalid_argument& e) {
      out.replies.push_back(error_frame(peer, g.id, error_code::bad_request,
                                        std::string("field \"json_answer\": ") + e.what()));
      return;
    }
  }
  for (const auto& [given, field] : {std::pair{!g.bad_words.empty(), "bad_words"},
                                     std::pair{!g.allowed_token_ids.empty(), "allowed_token_ids"}})
    if (given && !backend_->computes_logprobs()) {
      out.replies.push_back(error_frame(peer, g.id, error_code::bad_request,
                                        std::string("field \"") + field + "\": the " + backend_->name()
                                          + " backend samples from no logits, so it cannot keep tokens out of "
                                            "an output; the cpu and cuda backends do"));
      return;
    }
  if (g.prompt_logprobs >= 0 && !backend_->computes_prompt_logprobs()) {
    refuse_uncomputed("prompt_logprobs", "prompt log-probabilities (OpenAI's echo asks for them with logprobs or a "
                                         "prompt of token ids)");
    return;
  }
  auto prompt = g.prompt_tokens ? std::move(*g.prompt_tokens)
                                : backend_->vocab().encode(g.prompt.value_or(""));
  if (g.truncate_prompt_tokens != 0) {
    // vLLM's: only the prompt's last tokens are read; -1, as many as
    // leave room for max_tokens in the context (one token at least).
    const auto keep = g.truncate_prompt_tokens < 0
                        ? std::size_t{limits_.max_context} - std::min(g.max_tokens, limits_.max_context - 1)
                        : static_cast<std::size_t>(g.truncate_prompt_tokens);
    if (prompt.size() > keep)
      prompt.erase(prompt.begin(), prompt.end() - static_cast<std::ptrdiff_t>(keep));
  }
  if (g.fit_context) { // max_tokens cut to what the context leaves
    if (prompt.size() >= limits_.max_context) {
      out.replies.push_back(error_frame(peer, g.id, error_code::prompt_too_long,
                                        "prompt of " + std::to_string(prompt.size())
                                          + " tokens leaves no room for output in the context of "
                                          + std::to_string(limits_.max_context) + " tokens"));
      return;
    }
    g.max_tokens = std::min<std::uint32_t>(g.max_tokens, limits_.max_context - static_cast<std::uint32_t>(prompt.size()));
    g.min_tokens = std::min(g.min_tokens, g.max_tokens);
  }
  const auto total = std::uint64_t{prompt.size()} + g.max_tokens;
  if (total > limits_.max_context) {
    out.replies.push_back(error_frame(
      peer, g.id, error_code::prompt_too_long,
      "prompt of " + std::to_string(prompt.size()) + " tokens plus max_tokens "
        + std::to_string(g.max_tokens) + " exceeds the context of "
        + std::to_string(limits_.max_context) + " tokens"));
    return;
  }
  const auto id = next_id_++;
  request_spec spec;
  spec.request_id = id;
  spec.prompt = std::move(prompt);
  spec.max_new_tokens = g.max_tokens;
  spec.fit_context = g.fit_context;
  spec.adapter_id = adapter ? adapter->id : 0;
  spec.adapter_rank = adapter ? adapter->rank : 0;
  spec.adapter_pages = adapter ? adapter->pages : 0;
  spec.seed = g.sampling.seed ? *g.sampling.seed : gpu::splitmix64(limits_.base_seed ^ gpu::splitmix64(id));
  spec.temperature = g.sampling.temperature;
  spec.top_p = g.sampling.top_p;
  spec.top_k = g.sampling.top_k;
  spec.logprobs = g.logprobs;
  spec.prompt_logprobs = g.prompt_logprobs;
  spec.presence_penalty = g.sampling.presence_penalty;
  spec.frequency_penalty = g.sampling.frequency_penalty;
  spec.min_p = g.sampling.min_p;
  spec.repetition_penalty = g.sampling.repetition_penalty;
  for (const auto& [token, bias] : g.sampling.logit_bias)
    spec.logit_bias.push_back({token, bias});
  spec.priority = g.priority;
  spec.session = session_id_of(g.session);
  spec.stop = std::move(g.stop);
  spec.stop_token_ids = std::move(g.stop_token_ids);
  spec.bad_words = bad_word_tokens(backend_->vocab(), g.bad_words);
  spec.allowed_token_ids = std::move(g.allowed_token_ids);
  spec.ignore_eos = g.ignore_eos;
  spec.skip_special_tokens = g.skip_special_tokens;
  spec.min_tokens = g.min_tokens;
  spec.json_object = g.json_object;
  spec.json_schema = std::move(g.json_schema);
  spec.json_trigger = std::move(g.json_trigger);
  spec.json_trigger_first = g.json_trigger_first;
  spec.json_trigger_head = std::move(g.json_trigger_head);
  spec.json_answer = std::move(g.json_answer);
  spec.reasoning_close = std::move(g.reasoning_close);
  spec.reasoning_open = std::move(g.reasoning_open);
  spec.choice = std::move(g.choice);
  spec.regex = std::move(g.regex);
  spec.grammar = std::move(g.grammar);
  spec.predicted_tokens = g.max_tokens;
  spec.arrival_s = now_s;
  pending p;
  p.peer = peer;
  p.client_id = g.id;
  p.stream = g.stream;
  p.logprobs = g.logprobs >= 0;
  p.prompt_logprobs = g.prompt_logprobs >= 0;
  if (p.prompt_logprobs)
    p.prompt = spec.prompt;
  p.prompt_tokens = static_cast<std::uint32_t>(spec.prompt.size());
  p.keep_special = !spec.skip_special_tokens;
  p.thinking = std::move(thinking);
  if (p.keep_special) {
    p.ends = spec.stop_token_ids;
    if (!spec.ignore_eos)
      for (const auto t : backend_->vocab().end_tokens())
        p.ends.push_back(t);
    std::sort(p.ends.begin(), p.ends.end());
  }
  if (adapter != nullptr) {
    p.adapter = adapter->name;
    ++adapter_users_[adapter->name];
  }
  by_client_.emplace(std::pair{peer, g.id}, id);
  requests_.emplace(id, std::move(p));
  out.submit = std::move(spec);
}

std::vector<outbound_frame> intake_core::on_submit_result(std::uint64_t request_id,
                                                          scheduler_core::submit_result r) {
  std::vector<outbound_frame> out;
  auto i = requests_.find(request_id);
  if (i == requests_.end())
    return out;
  auto& p = i->second;
  using sr = scheduler_core::submit_result;
  std::string why;
  wire::error_code code = wire::error_code::internal;
  switch (r) {
    case sr::accepted:
      p.submitted = true;
      if (p.cancel_held)
        due_cancels_.push_back(request_id);
      if (!p.peer_gone)
        send_accepted(p, out);
      return out;
    case sr::queue_full:
      code = wire::error_code::overloaded;
      why = "the scheduler's waiting queue is full; retry later";
      break;
    case sr::duplicate:
      why = "the scheduler already holds this request (internal id clash)";
      break;
    case sr::too_large:
      code = wire::error_code::prompt_too_long;
      why = "prompt plus max_tokens need more KV-cache pages than the GPU pool holds";
      break;
  }
  if (!p.peer_gone)
    out.push_back(error_frame(p.peer, p.client_id, code, why));
  forget(request_id);
  return out;
}

std::vector<outbound_frame> intake_core::on_submit_failed(std::uint64_t request_id,
                                                          const std::string& why) {
  std::vector<outbound_frame> out;
  auto i = requests_.find(request_id);
  if (i == requests_.end())
    return out;
  if (!i->second.peer_gone)
    out.push_back(error_frame(i->second.peer, i->second.client_id,
                              wire::error_code::internal, "could not schedule: " + why));
  forget(request_id);
  return out;
}

std::vector<outbound_frame> intake_core::on_progress(const progress_batch& batch) {
  std::vector<outbound_frame> out;
  // Requests that end with this batch, and why: their last chunk takes all
  // its text.
  std::map<std::uint64_t, std::uint8_t> ending;
  for (const auto& f : batch.finished)
    ending.emplace(f.request_id, f.reason);
  // Log-probabilities by (request, token index).
  std::map<std::pair<std::uint64_t, std::uint32_t>, const gpu::token_logprobs*> logprobs;
  for (const auto& lp : batch.logprobs)
    logprobs.emplace(std::pair{lp.request_id, lp.index}, &lp.logprobs);
  auto logprobs_for = [&](const token_event& t) {
    auto i = logprobs.find({t.request_id, t.index});
    return logprobs_of(t.token, i == logprobs.end() ? nullptr : i->second);
  };
  // A prompt's log-probabilities, with its first token.
  auto prompt_logprobs_for = [&](pending& p, std::uint64_t id) {
    std::vector<wire::token_logprobs> out;
    for (const auto& lp : batch.prompt_logprobs)
      if (lp.request_id == id)
        out = prompt_logprobs_of(p.prompt, lp.logprobs);
    p.prompt.clear();
    return out;
  };
  // Tokens of one request within a batch are consecutive; send one chunk each.
  std::size_t k = 0;
  while (k < batch.tokens.size()) {
    const auto id = batch.tokens[k].request_id;
    std::size_t end = k;
    while (end < batch.tokens.size() && batch.tokens[end].request_id == id)
      ++end;
    auto i = requests_.find(id);
    if (i != requests_.end() && !i->second.peer_gone) {
      auto& p = i->second;
      send_accepted(p, out);
      if (p.thinking)
        for (auto j = k; j < end && !p.thinking->done(); ++j)
          p.thinking->feed(backend_->vocab().shown(batch.tokens[j].token, p.keep_special));
      if (p.stream) {
        wire::token_reply t;
        t.id = p.client_id;
        t.index = batch.tokens[k].index;
        if (p.prompt_logprobs && t.index == 0)
          t.prompt_logprobs = prompt_logprobs_for(p, id);
        for (auto j = k; j < end; ++j) {
          t.tokens.push_back(batch.tokens[j].token);
          if (p.logprobs)
            t.logprobs.push_back(logprobs_for(batch.tokens[j]));
        }
        // Each chunk's text ends on a character boundary, so that it is
        // valid UTF-8 on its own; the request's last chunk takes all.
        const auto ends = ending.find(id);
        t.text = std::move(p.held)
                 + decode(t.tokens, p.keep_special, ends != ending.end() && ended_by_last(p, t.tokens, ends->second));
        p.held.clear();
        if (ends == ending.end()) {
          const auto whole = complete_utf8_prefix(t.text);
          p.held = t.text.substr(whole);
          t.text.resize(whole);
        }
        out.push_back({p.peer, wire::to_json(t)});
      } else {
        if (p.prompt_logprobs && batch.tokens[k].index == 0)
          p.prompt_logprobs_out = prompt_logprobs_for(p, id);
        for (auto j = k; j < end; ++j) {
          p.tokens.push_back(batch.tokens[j].token);
          if (p.logprobs)
            p.token_logprobs.push_back(logprobs_for(batch.tokens[j]));
        }
      }
    }
    k = end;
  }
  for (const auto& f : batch.finished) {
    auto i = requests_.find(f.request_id);
    if (i == requests_.end())
      continue;
    auto& p = i->second;
    if (!p.peer_gone) {
      // Progress may overtake the scheduler's answer: accepted comes first.
      send_accepted(p, out);
      wire::done_reply d;
      d.id = p.client_id;
      d.finish_reason = std::string{to_string(static_cast<finish_reason>(f.reason))};
      d.prompt_tokens = f.prompt_tokens;
      d.completion_tokens = f.completion_tokens;
      d.cached_tokens = f.cached_tokens;
      d.reasoning_tokens = p.thinking ? p.thinking->count() : 0;
      d.time = {f.queue_ms, f.ttft_ms, f.e2e_ms};
      if (!p.stream) {
        d.text = decode(p.tokens, p.keep_special, ended_by_last(p, p.tokens, f.reason));
        d.tokens = std::move(p.tokens);
        if (p.logprobs)
          d.logprobs = std::move(p.token_logprobs);
        if (p.prompt_logprobs_out)
          d.prompt_logprobs = std::move(p.prompt_logprobs_out);
      }
      if (static_cast<finish_reason>(f.reason) == finish_reason::aborted)
        out.push_back(error_frame(p.peer, p.client_id, wire::error_code::overloaded,
                                  "aborted before it started: the server could not return its first token "
                                  "within the scheduler's first-token target; retry later"));
      else if (static_cast<finish_reason>(f.reason) == finish_reason::adapter_error)
        out.push_back(error_frame(p.peer, p.client_id, wire::error_code::bad_adapter,
                                  "adapter \"" + p.adapter
                                    + "\" could not be loaded (its files are missing or corrupt; the server log names the file)"));
      else if (static_cast<finish_reason>(f.reason) == finish_reason::error)
        out.push_back(error_frame(p.peer, p.client_id, wire::error_code::internal,
                                  "the server could not complete this request (its adapter could not be loaded or a step failed); "
                                  "the server log says why under request " + std::to_string(f.request_id)));
      else
        out.push_back({p.peer, wire::to_json(d)});
    }
    forget(f.request_id);
  }
  return out;
}

std::vector<std::uint64_t> intake_core::on_peer_gone(const std::string& peer) {
  std::vector<std::uint64_t> out;
  for (auto& [id, p] : requests_) {
    if (p.peer == peer && !p.peer_gone) {
      p.peer_gone = true;
      if (p.submitted)
        out.push_back(id);
      else
        p.cancel_held = true;
    }
  }
  return out;
}

} // namespace troupe
