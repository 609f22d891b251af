// Google Benchmark: the scheduler core's cost per iteration (admission by the
// policy, batch building, step bookkeeping) with 10,000 requests waiting over
// 2,000 adapters and a full running batch, for every scheduling policy; and
// what JSON output (response_format json_object) adds: the tokens a state
// allows in a Llama-sized vocabulary (read by the recognizer alone and held
// to a JSON Schema), and an iteration whose running requests all keep to JSON.
// Run: build/bin/troupe-scheduler-bench
#include "gpu/backend.hpp"
#include "policies/registry.hpp"
#include "runtime/choice_constraint.hpp"
#include "runtime/json_constraint.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/json_trigger.hpp"
#include "runtime/reasoning_gate.hpp"
#include "runtime/grammar_constraint.hpp"
#include "runtime/regex_constraint.hpp"
#include "runtime/scheduler_core.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace troupe;

struct harness {
  scheduler_core core;
  std::uint64_t next_id = 1;
  double now = 0;
  /// Applied to each request submitted (a bench's own sampling fields).
  std::function<void(request_spec&)> shape;

  static scheduler_limits limits(std::uint32_t max_running) {
    scheduler_limits l;
    l.max_running = max_running;
    l.token_budget = 8192;
    l.max_waiting = 1u << 20;
    l.total_pages = 1u << 30;
    l.page_tokens = 16;
    return l;
  }

  harness(std::uint32_t max_running, const char* policy, const gpu::tokenizer* vocab = nullptr)
    : core(limits(max_running), policies::make_scheduling_policy(policy), vocab) {
    // Four queues with room for everything (the tuner's output shape).
    core.on_tuning({{0.25, 0.5, 0.75}, {1u << 28, 1u << 28, 1u << 28, 1u << 28}});
  }

  void submit(std::uint32_t max_new, bool json = false) {
    request_spec s;
    s.json_object = json;
    s.request_id = next_id++;
    s.prompt.assign(64, 7);
    s.max_new_tokens = max_new;
    s.predicted_tokens = max_new;
    s.adapter_id = 1 + static_cast<std::uint32_t>(s.request_id % 2000);
    s.adapter_rank = 8u << (s.request_id % 5);
    s.adapter_pages = s.adapter_rank / 4;
    s.queue = static_cast<std::uint32_t>(s.request_id % 4);
    s.arrival_s = now;
    if (shape)
      shape(s);
    core.submit(std::move(s));
  }

  /// Grants whatever the core asks for, like an idle memory pool and a
  /// cache holding every adapter.
  void grant(scheduler_effects fx) {
    for (const auto& r : fx.reserves)
      core.on_pages(r.request_id, true, now);
    for (const auto& a : fx.acquires)
      core.on_adapter(a.request_id, true, now);
  }

  /// One scheduler iteration: admit, build the step, take its tokens; keeps
  /// the waiting queue at its size by submitting one request per finish.
  std::size_t iterate(std::vector<std::int32_t>& tokens, std::int32_t token = 100, bool json = false) {
    now += 0.001;
    grant(core.admit(now));
    auto batch = core.next_step(now);
    tokens.assign(batch.size(), token);
    auto fx = core.on_step_done(batch, tokens, now);
    for (std::size_t i = 0; i < fx.finished.size(); ++i)
      submit(64, json);
    return batch.size();
  }
};

const char* const policy_names[] = {"fcfs", "slora", "chameleon", "sjf", "adaptive", "aptserve"};

void bm_scheduler_iteration(benchmark::State& state) {
  const auto waiting = static_cast<std::size_t>(state.range(0));
  const auto running = static_cast<std::uint32_t>(state.range(1));
  const char* policy = policy_names[state.range(2)];
  state.SetLabel(policy);
  harness h{running, policy};
  for (std::size_t i = 0; i < waiting + running; ++i)
    h.submit(64);
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 4; ++i) // fill the running batch
    h.iterate(tokens);
  std::size_t batch = 0;
  for (auto _ : state)
    batch += h.iterate(tokens);
  state.counters["waiting"] = static_cast<double>(h.core.waiting());
  state.counters["batch"] = static_cast<double>(batch) / static_cast<double>(state.iterations());
}

BENCHMARK(bm_scheduler_iteration)
  ->ArgNames({"waiting", "running", "policy"})
  ->ArgsProduct({{0, 10000}, {32, 256}, {0, 1, 2, 3, 4, 5}})
  ->Unit(benchmark::kMicrosecond);

/// A vocabulary shaped like Llama's: 32,000 tokens, the 256 single bytes,
/// JSON's punctuation in the pieces a BPE vocabulary learns, and words of
/// 1 to 12 letters, half with a leading space. Token 0 stands for no text
/// (the end-of-sequence token), token 1 for the letter 'a'.
class llama_sized_vocab final : public gpu::tokenizer {
public:
  llama_sized_vocab() {
    pieces_ = {"", "a"};
    for (int b = 0; b < 256; ++b)
      pieces_.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"{", "}", "{\"", "\":", "\": ", "\",", "\", \"", "\":\"", "\"}", "},", "}}", "[", "]", "],",
                          "[{", "}]", "true", "false", "null", "0", "1", "10", "100", ".", "e", "\\n", "\\\"", "\n", "\n  ",
                          "  ", "    "})
      pieces_.push_back(p);
    std::mt19937 rng(5);
    while (pieces_.size() < 32000) {
      std::string w = rng() % 2 ? " " : "";
      for (auto n = 1 + rng() % 12; n > 0; --n)
        w += static_cast<char>('a' + rng() % 26);
      pieces_.push_back(std::move(w));
    }
  }
  std::vector<std::int32_t> encode(const std::string&) const override { return {}; }
  std::string decode(std::int32_t t) const override {
    return t >= 0 && t < vocab_size() ? pieces_[static_cast<std::size_t>(t)] : "";
  }
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::int32_t eos_token() const override { return 0; }

private:
  std::vector<std::string> pieces_;
};

const llama_sized_vocab& vocab32k() {
  static const llama_sized_vocab v;
  return v;
}

/// json_vocab::allowed for one state: looked up afresh each time (a cache
/// of one, two states alternating) or answered from the cache.
void bm_json_allowed(benchmark::State& state) {
  static const char* const states[] = {"", "{\"", "{\"a\":", "{\"a\":1"};
  static const char* const names[] = {"start", "in a string", "a value", "after a value"};
  const auto which = static_cast<std::size_t>(state.range(0));
  const bool cached = state.range(1) != 0;
  state.SetLabel(std::string(names[which]) + (cached ? ", cached" : ""));
  json_vocab v(vocab32k(), cached ? 64 : 1);
  json_machine m, other;
  m.feed(std::string_view(states[which]));
  other.feed(std::string_view("{\"a\":["));
  std::size_t allowed = 0;
  for (auto _ : state) {
    allowed = v.allowed(m)->size();
    if (!cached)
      benchmark::DoNotOptimize(v.allowed(other));
  }
  state.counters["allowed"] = static_cast<double>(allowed);
  if (!cached)
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}

BENCHMARK(bm_json_allowed)
  ->ArgNames({"state", "cached"})
  ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
  ->Unit(benchmark::kMicrosecond);

/// json_vocab::split looked up afresh for one state of a text, read by the
/// JSON recognizer alone (json_machine), by the schema machine holding it to
/// any object (what json_object requests use), to a schema with named,
/// typed properties (json_schema), and to the same with a pattern on `name`.
void bm_json_schema_split(benchmark::State& state) {
  static const char* const states[] = {"", "{\"na", "{\"name\":", "{\"name\":\"A", "{\"name\":\"A\",\"age\":1"};
  static const char* const names[] = {"start", "in a key", "a value", "in a string", "in a number"};
  static const char* const kinds[] = {"json_machine", "any object", "schema", "schema with a pattern",
                                      "schema with a pattern and a length"};
  const auto which = static_cast<std::size_t>(state.range(0));
  const auto kind = static_cast<std::size_t>(state.range(1));
  state.SetLabel(std::string(names[which]) + ", " + kinds[kind]);
  const auto schema = kind == 1 ? json_schema::any_object()
                    : kind == 2 ? json_schema::compile(R"({"type":"object","additionalProperties":false,
                                    "required":["name","age"],"properties":{"name":{"type":"string"},
                                    "age":{"type":"integer"},"city":{"enum":["Paris","Rome","Oslo"]}}})")
                    : kind == 3 ? json_schema::compile(R"({"type":"object","additionalProperties":false,
                                    "required":["name","age"],"properties":{"name":{"type":"string",
                                    "pattern":"^[A-Z][a-z]+( [A-Z][a-z]+)*$"},
                                    "age":{"type":"integer"},"city":{"enum":["Paris","Rome","Oslo"]}}})")
                                : json_schema::compile(R"({"type":"object","additionalProperties":false,
                                    "required":["name","age"],"properties":{"name":{"type":"string",
                                    "pattern":"^[A-Z][a-z]+( [A-Z][a-z]+)*$","minLength":2,"maxLength":40},
                                    "age":{"type":"integer"},"city":{"enum":["Paris","Rome","Oslo"]}}})");
  json_vocab v(vocab32k(), 1);
  std::size_t allowed = 0;
  const auto run = [&](auto m, auto other) {
    m.feed(std::string_view(states[which]));
    other.feed(std::string_view("{"));
    for (auto _ : state) {
      allowed = v.split(m)->allowed.size();
      benchmark::DoNotOptimize(v.split(other)); // so that m's answer is never the one kept
    }
  };
  if (kind == 0)
    run(json_machine{}, json_machine{});
  else
    run(schema_machine(schema), schema_machine(schema));
  state.counters["allowed"] = static_cast<double>(allowed);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}

BENCHMARK(bm_json_schema_split)
  ->ArgNames({"state", "kind"})
  ->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}})
  ->Unit(benchmark::kMicrosecond);

/// json_vocab::split looked up afresh inside a string held to a format
/// Troupe holds as a pattern (the per-walk DFA of the pattern's NFA), at
/// the string's start and partway: ipv6 (the largest NFA: eight groups,
/// "::" anywhere), duration, email and uri.
void bm_json_format_split(benchmark::State& state) {
  struct format {
    const char* name;
    const char* partway;
  };
  static const format formats[] = {
    {"ipv6", "2001:db8:"}, {"duration", "P1DT"}, {"email", "first.last@ex"}, {"uri", "https://example.com/a"}};
  const auto& f = formats[state.range(0)];
  const bool begun = state.range(1) != 0;
  state.SetLabel(std::string(f.name) + (begun ? ", partway" : ", start"));
  const auto schema = json_schema::compile(std::string(R"({"type":"object","properties":{"x":{"type":"string","format":")")
                                           + f.name + R"("}},"required":["x"],"additionalProperties":false})");
  json_vocab v(vocab32k(), 1);
  schema_machine m(schema), other(schema);
  m.feed(std::string_view(R"({"x":")"));
  other.feed(std::string_view(R"({"x":")"));
  (begun ? m : other).feed(std::string_view(f.partway));
  std::size_t allowed = 0;
  for (auto _ : state) {
    allowed = v.split(m)->allowed.size();
    benchmark::DoNotOptimize(v.split(other)); // so that m's answer is never the one kept
  }
  state.counters["allowed"] = static_cast<double>(allowed);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}

BENCHMARK(bm_json_format_split)
  ->ArgNames({"format", "begun"})
  ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
  ->Unit(benchmark::kMicrosecond);

/// json_vocab::split looked up afresh for the output held to choices
/// (guided_choice: 4 labels, or 64 words of the vocabulary) or to a regular
/// expression (guided_regex: a phone number, or lowercase words, which
/// keeps a third of the vocabulary), or to a GBNF grammar (guided_grammar:
/// the same two languages, and arithmetic over nested parentheses; warm, as
/// a grammar's later requests find the thread's remembered transitions, or
/// cold, a grammar new each time), at the output's start and one byte in.
void bm_held_text_split(benchmark::State& state) {
  static const char* const kinds[] = {"4 choices",      "64 choices",      "regex, phone",      "regex, words",
                                      "grammar, phone", "grammar, words", "grammar, arithmetic",
                                      "grammar, phone, cold", "grammar, words, cold", "grammar, arithmetic, cold"};
  const auto kind = static_cast<std::size_t>(state.range(0));
  const bool begun = state.range(1) != 0;
  state.SetLabel(std::string(kinds[kind]) + (begun ? ", one byte in" : ", start"));
  json_vocab v(vocab32k(), 1);
  std::size_t allowed = 0;
  // `other` is the state `m` is not (the start, or one byte in).
  const auto run = [&](auto m, auto other, unsigned char first) {
    (begun ? m : other).step(first);
    for (auto _ : state) {
      allowed = v.split(m)->allowed.size();
      benchmark::DoNotOptimize(v.split(other)); // so that m's answer is never the one kept
    }
  };
  if (kind < 2) {
    std::vector<std::string> labels{"positive", "negative", "neutral", "mixed"};
    if (kind == 1) {
      labels.clear();
      for (std::int32_t t = 1000; labels.size() < 64; t += 97)
        labels.push_back(vocab32k().decode(t));
    }
    std::sort(labels.begin(), labels.end());
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
    const auto held = std::make_shared<const std::vector<std::string>>(labels);
    run(choice_machine(held), choice_machine(held), static_cast<unsigned char>((*held)[0][0]));
  } else if (kind < 4) {
    const auto held = std::make_shared<const held_regex>(kind == 2 ? "[0-9]{3}-[0-9]{4}" : "[a-z]+( [a-z]+)*");
    run(regex_machine(held), regex_machine(held), kind == 2 ? '1' : 'a');
  } else {
    static const char* const grammars[] = {
      R"G(root ::= [0-9]{3} "-" [0-9]{4})G", R"G(root ::= [a-z]+ (" " [a-z]+)*)G",
      R"G(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")")G"};
    const auto text = grammars[(kind - 4) % 3];
    const auto first = kind % 3 == 2 ? 'a' : kind % 3 == 0 ? '(' : '1';
    if (kind < 7) {
      const auto held = std::make_shared<const held_grammar>(text);
      run(grammar_machine(held), grammar_machine(held), first);
    } else {
      // Cold: a grammar new to the thread each time (a new id), so no
      // character's effect on its stacks is remembered from before.
      for (auto _ : state) {
        const auto held = std::make_shared<const held_grammar>(text);
        grammar_machine m(held), other(held);
        (begun ? m : other).step(static_cast<unsigned char>(first));
        allowed = v.split(m)->allowed.size();
        benchmark::DoNotOptimize(v.split(other));
      }
    }
  }
  state.counters["allowed"] = static_cast<double>(allowed);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}

BENCHMARK(bm_held_text_split)
  ->ArgNames({"kind", "begun"})
  ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1}})
  ->Unit(benchmark::kMicrosecond);

/// A json_trigger built for the 32,000-token vocabulary: the free-text ban
/// list of each of the trigger's states, once per trigger and schema (the
/// scheduler keeps the last 16), the cost a request with tools offered
/// under tool_choice "auto" pays when its tools are new.
void bm_json_trigger_build(benchmark::State& state) {
  static const char* const triggers[] = {"<tool_call>", "<|python_tag|>"};
  const auto* trigger = triggers[state.range(0)];
  state.SetLabel(trigger);
  const auto schema = json_schema::compile(R"({"anyOf":[{"type":"object","required":["name","arguments"],
    "additionalProperties":false,"properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
    "required":["city"],"properties":{"city":{"type":"string"}}}}}]})");
  json_vocab v(vocab32k());
  std::size_t banned = 0;
  for (auto _ : state) {
    const json_trigger t(v, trigger, schema);
    banned = t.split({})->banned.size();
  }
  state.counters["banned_at_start"] = static_cast<double>(banned);
}

BENCHMARK(bm_json_trigger_build)->ArgName("trigger")->DenseRange(0, 1)->Unit(benchmark::kMillisecond);

/// A headed trigger (Mistral's later calls: "[TOOL_CALLS]", a tool's name,
/// "[ARGS]", its arguments) built for the 32,000-token vocabulary with 2
/// or 16 tools, and the splits a call asks of it along one name: the
/// states between the marker and the arguments, each read from the whole
/// vocabulary once (the scheduler keeps the trigger, and its splits, for
/// the next request with the same tools). `walk` 0: the build alone.
void bm_json_trigger_head(benchmark::State& state) {
  const auto tools = state.range(0);
  const bool walk = state.range(1) != 0;
  std::string schema = R"({"type":"object","properties":{"get_weather":{"type":"object","properties":)"
                       R"({"city":{"type":"string"}},"required":["city"]},"get_time":{"type":"object"})";
  for (std::int64_t k = 2; k < tools; ++k)
    schema += ",\"tool_" + std::to_string(k) + R"(":{"type":"object","properties":{"n":{"type":"integer"}}})";
  schema += "}}";
  json_schema_cache cache;
  const auto heads = trigger_heads(schema, "[ARGS]", cache);
  json_vocab v(vocab32k());
  std::size_t allowed = 0;
  for (auto _ : state) {
    const json_trigger t(v, "[TOOL_CALLS]", "[ARGS]", heads);
    if (!walk)
      continue;
    json_trigger::state s;
    t.advance(s, std::string_view("[TOOL_CALLS]"));
    for (const char c : std::string_view("get_weather[ARGS]")) {
      allowed += t.split(s)->allowed.size();
      t.advance(s, std::string_view(&c, 1));
    }
  }
  state.counters["allowed_per_walk"] =
    benchmark::Counter(static_cast<double>(allowed), benchmark::Counter::kAvgIterations);
}

BENCHMARK(bm_json_trigger_head)
  ->ArgNames({"tools", "walk"})
  ->ArgsProduct({{2, 16}, {0, 1}})
  ->Unit(benchmark::kMillisecond);

/// Tools offered with "auto" beside response_format: a trigger built for
/// the 32,000-token vocabulary and its first split, with an answer (the
/// output begins with the trigger or a value of the answer's schema: the
/// two splits' union, made once per trigger) or without (`answer` 0: free
/// text). `gate` 1: after a reasoning model's thinking (Qwen3's), where the
/// content's first split is read token by token through the gate (once
/// per gate). The answer's own first split is the vocabulary's, kept from
/// the first iteration as the scheduler keeps it.
void bm_json_trigger_answer(benchmark::State& state) {
  const bool answer = state.range(0) != 0;
  const bool gate = state.range(1) != 0;
  const auto calls = json_schema::compile(R"({"anyOf":[{"type":"object","required":["name","arguments"],
    "additionalProperties":false,"properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
    "required":["city"],"properties":{"city":{"type":"string"}}}}}]})");
  const auto reply = json_schema::compile(R"({"type":"object","required":["city","temperature"],
    "additionalProperties":false,"properties":{"city":{"type":"string"},"temperature":{"type":"number"}}})");
  json_vocab v(vocab32k());
  std::size_t allowed = 0;
  for (auto _ : state) {
    const auto t = std::make_shared<const json_trigger>(v, "<tool_call>", calls, answer ? reply : nullptr);
    if (!gate) {
      allowed = t->split(t->begin(false))->allowed.size();
      continue;
    }
    const reasoning_gate g(v, "<think>", "</think>", t, false);
    auto s = g.begin();
    g.advance(s, std::string_view("<think>ok</think>"));
    allowed = g.split(s)->allowed.size();
  }
  state.counters["allowed_at_start"] = static_cast<double>(allowed);
}

BENCHMARK(bm_json_trigger_answer)
  ->ArgNames({"answer", "gate"})
  ->ArgsProduct({{0, 1}, {0, 1}})
  ->Unit(benchmark::kMillisecond);

/// A reasoning gate built for the 32,000-token vocabulary and the splits a
/// reasoning model's first steps ask of it: the output's start (Qwen3's
/// "<think>" or content) and the thinking, then, for a forced call, the
/// content's start before its marker. What a request with response_format
/// or a forced call pays when its gate is new (the scheduler keeps the last
/// 16 gates, and each its splits).
void bm_reasoning_gate_build(benchmark::State& state) {
  const auto form = state.range(0);
  static const char* const names[] = {"json_schema", "forced call"};
  state.SetLabel(names[form]);
  const auto schema = json_schema::compile(R"({"anyOf":[{"type":"object","required":["name","arguments"],
    "additionalProperties":false,"properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
    "required":["city"],"properties":{"city":{"type":"string"}}}}}]})");
  json_vocab v(vocab32k());
  const auto trigger = std::make_shared<const json_trigger>(v, "<tool_call>", schema);
  std::size_t allowed = 0;
  for (auto _ : state) {
    const auto g = form == 0 ? reasoning_gate(v, "<think>", "</think>", schema)
                             : reasoning_gate(v, "<think>", "</think>", trigger, true);
    auto s = g.begin();
    allowed = g.split(s)->allowed.size();
    g.advance(s, "<think>");
    allowed += g.split(s)->allowed.size();
    if (form == 1) {
      g.advance(s, "</think>");
      allowed += g.split(s)->allowed.size();
    }
  }
  state.counters["allowed"] = static_cast<double>(allowed);
}

BENCHMARK(bm_reasoning_gate_build)->ArgName("form")->DenseRange(0, 1)->Unit(benchmark::kMillisecond);

/// A scheduler iteration (fcfs, nothing waiting) whose `running` requests
/// all sample the letter 'a' (text or a JSON string's inside, a state the
/// cache answers): what keeping them to JSON adds to building the step
/// (the bans merged into each entry's logit_adjust) and to taking its tokens.
void bm_json_iteration(benchmark::State& state) {
  const auto running = static_cast<std::uint32_t>(state.range(0));
  const bool json = state.range(1) != 0;
  state.SetLabel(json ? "json_object" : "text");
  harness h{running, "fcfs", &vocab32k()};
  for (std::uint32_t i = 0; i < running; ++i)
    h.submit(1u << 20, json);
  std::vector<std::int32_t> tokens;
  // The first steps write {"a, then the output stays in the string.
  const std::int32_t open = 258 + 2; // "{\""
  for (int i = 0; i < 4; ++i)
    h.iterate(tokens, json && i == 0 ? open : 1, json);
  std::size_t batch = 0;
  for (auto _ : state)
    batch += h.iterate(tokens, 1, json);
  state.counters["batch"] = static_cast<double>(batch) / static_cast<double>(state.iterations());
}

BENCHMARK(bm_json_iteration)
  ->ArgNames({"running", "json"})
  ->ArgsProduct({{1, 64}, {0, 1}})
  ->Unit(benchmark::kMicrosecond);

/// A scheduler iteration (fcfs, 64 running, nothing waiting) whose requests
/// have 1,024-token prompts of distinct tokens and no penalty, OpenAI's
/// presence and frequency penalties, or a repetition penalty (every prompt
/// token marked in each entry's logit_adjust, merged with the output's).
void bm_penalty_iteration(benchmark::State& state) {
  const auto kind = state.range(0);
  const char* const labels[] = {"none", "presence+frequency", "repetition"};
  state.SetLabel(labels[kind]);
  harness h{64, "fcfs"};
  h.shape = [kind](request_spec& s) {
    s.prompt.resize(1024);
    for (std::size_t i = 0; i < s.prompt.size(); ++i)
      s.prompt[i] = static_cast<std::int32_t>((i * 31 + s.request_id) % 32000);
    if (kind == 1) {
      s.presence_penalty = 0.5f;
      s.frequency_penalty = 0.25f;
    } else if (kind == 2) {
      s.repetition_penalty = 1.1f;
    }
  };
  for (std::uint32_t i = 0; i < 64; ++i)
    h.submit(1u << 20);
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 16; ++i) // every prefill done
    h.iterate(tokens, 100 + i);
  std::size_t batch = 0, adjustments = 0;
  std::int32_t token = 0;
  for (auto _ : state) {
    h.now += 0.001;
    h.grant(h.core.admit(h.now));
    auto step = h.core.next_step(h.now);
    for (const auto& e : step)
      adjustments += e.logit_adjust.size();
    tokens.assign(step.size(), 200 + (token++ % 64)); // 64 distinct output tokens, each repeated
    h.core.on_step_done(step, tokens, h.now);
    batch += step.size();
  }
  state.counters["batch"] = static_cast<double>(batch) / static_cast<double>(state.iterations());
  state.counters["adjust"] = static_cast<double>(adjustments) / static_cast<double>(batch);
}

BENCHMARK(bm_penalty_iteration)->ArgName("penalty")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
