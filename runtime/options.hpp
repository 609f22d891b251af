// Plain per-role option structs, filled once from the deployment TOML file by
// runtime/config.cpp and handed to actors and cores. No parsing logic here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe {

/// [server]: the ZeroMQ front door.
struct server_options {
  std::string endpoint = "tcp://127.0.0.1:5555";
  /// Frames larger than this get a `frame_too_large` error and are not parsed;
  /// frames over twice this are dropped by ZeroMQ with the connection.
  std::uint64_t max_frame_bytes = 1 << 20;
  /// Accepted requests not yet finished; beyond it new ones get `overloaded`.
  std::uint32_t max_pending = 65536;
  /// Seconds a graceful stop waits for in-flight requests.
  double drain_timeout_s = 30.0;
  bool operator==(const server_options&) const = default;
};

/// [http]: the OpenAI-compatible HTTP front (runtime/http_front), a client
/// of the intake on the node that takes the clients.
struct http_options {
  /// "host:port" (an IP address or localhost; port 0: any free one); empty:
  /// no HTTP front.
  std::string listen;
  /// The name clients give as "model" for the base model; empty: the model
  /// directory's name, else the model shape's (e.g. "llama-2-7b").
  std::string model;
  /// Connections open at once; past it a new one gets 503.
  std::uint32_t max_connections = 256;
  /// Keys HTTP clients must send as "Authorization: Bearer KEY" for /v1/
  /// paths (any one of them); empty: no key needed.
  std::vector<std::string> api_keys;
  /// Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's
  /// paths; the wire's load_adapter and unload_adapter). Off by default: a
  /// load reads a path on the server, so give api_keys with it.
  bool adapter_updates = false;
  /// Memory (MiB) the front keeps POST /v1/responses answers in, for
  /// previous_response_id and GET /v1/responses/ID (least recently used
  /// dropped first); 0: none kept.
  std::uint32_t response_store_mb = 64;
  /// Memory (MiB) the front keeps conversations in (OpenAI's Conversations
  /// API, /v1/conversations; least recently used dropped first); 0: none.
  std::uint32_t conversation_store_mb = 64;
  /// A directory the front writes kept responses, conversations, files
  /// and batches to (a file each), and reads them back from at start, so
  /// that a restart loses none (a running batch goes on); "": kept in
  /// memory only.
  /// Bytes of files uploaded for batches (POST /v1/files) kept at most;
  /// 0: the Files and Batch APIs are not served. A batch's output files
  /// are kept even past it.
  std::uint32_t file_store_mb = 256;
  /// Lines of batches (POST /v1/batches) this front runs at once, across
  /// all batches.
  std::uint32_t batch_concurrency = 32;
  /// The `priority` a batch line runs at where its body gives none: below
  /// interactive requests' default 0, so that a policy that honours
  /// priorities ([scheduler] policy "priority") serves them first.
  std::int32_t batch_priority = -1;
  std::string store_dir;
  /// Each store_dir write reaches the disk (fsync) before the front goes
  /// on: a crash of the machine loses nothing written, and each write waits
  /// for the disk. A batch's answers (its log) are flushed in the
  /// background instead, together (kept_files::append).
  bool store_sync = false;
  /// POST /v1/chat/completions' template: "llama2", "llama3", "chatml",
  /// "custom" (the chat_* formats below), "model" (the Hugging Face
  /// template of model.path: chat_template.jinja or tokenizer_config.json),
  /// "jinja" (the one in chat_jinja), or "auto" (the default): the model's
  /// where model.path holds one that serves, else none; empty: chat
  /// completions are not served.
  std::string chat_template = "auto";
  /// jinja: a file holding a Hugging Face chat template (Jinja2), or a
  /// tokenizer_config.json (.json) holding one.
  std::string chat_jinja;
  std::string chat_system;     ///< custom: a system message, "{content}" its text; empty: refused
  std::string chat_user;       ///< custom: a user message
  std::string chat_assistant;  ///< custom: an assistant message
  std::string chat_generation; ///< custom: after the last message (the assistant's turn opens)
  std::vector<std::string> chat_stop; ///< custom, model, jinja: strings that end the assistant's turn
  std::string chat_tools;       ///< custom: the functions offered, "{tools}" one to a line (ends the system message)
  std::string chat_tool_call;   ///< custom, model, jinja: one call, "{call}" its JSON after a marker that opens it
  std::string chat_tool_result; ///< custom: a tool message's text at "{content}"
  std::string chat_tool_arguments; ///< model, jinja: a call's arguments key in the output ("" arguments, or parameters)
  /// How a chat answer's reasoning is told from its content (vLLM's
  /// --reasoning-parser): "deepseek_r1", "qwen3", or "" (all content).
  std::string reasoning_parser;
  /// A chat completion may bring its own Jinja template (its
  /// `chat_template`, as vLLM's --trust-request-chat-template allows).
  bool request_chat_template = false;
  /// Where OpenAI requests that leave out temperature, top_p or top_k get
  /// them: "auto", model.path's generation_config.json (vLLM's
  /// --generation-config auto); "": the wire's defaults (OpenAI's).
  std::string generation_config = "auto";
  bool enabled() const noexcept { return !listen.empty(); }
  bool operator==(const http_options&) const = default;
};

/// [logging]
struct logging_options {
  /// trace, debug, info, warn, error, critical, off
  std::string level = "info";
  /// Empty: stderr. Otherwise a file path.
  std::string file;
  bool operator==(const logging_options&) const = default;
};

/// [caf]: settings handed to CAF's actor_system_config.
struct caf_options {
  /// 0: CAF's default (hardware concurrency).
  std::uint32_t scheduler_threads = 0;
  bool operator==(const caf_options&) const = default;
};

/// [model]
struct model_options {
  /// Built-in shape name ("llama-2-7b", "llama-2-13b"); ignored if shape_file set.
  std::string preset = "llama-2-7b";
  /// JSON file with a model shape (HF config.json keys); overrides preset.
  std::string shape_file;
  /// Directory of a Hugging Face Llama model (config.json, *.safetensors,
  /// tokenizer.model) for the cpu backend; relative to the working directory.
  std::string path;
  /// Upper bound on prompt + max_tokens; 0 means the shape's own limit.
  std::uint32_t max_context = 0;
  bool operator==(const model_options&) const = default;
};

/// [backend]: which executor/copy-engine backend runs.
struct backend_options {
  /// "sim" (cost model), "cpu" (fp32 reference) or "cuda" (where built).
  std::string kind = "sim";
  /// GPU preset for the sim cost model: "A100-80GB", "H100-80GB", "H200".
  std::string gpu = "H100-80GB";
  /// Wall seconds per predicted second: 1 = real time, 0 = instant.
  double time_scale = 1.0;
  /// Base seed mixed into per-request seeds.
  std::uint64_t seed = 0;
  /// cuda: weights, activations and cache as "float16" or "bfloat16".
  std::string dtype = "float16";
  /// cuda: the CUDA device ordinal.
  std::uint32_t device = 0;
  /// cuda: CUDA graphs of repeated steps kept for replay
  /// (gpu::cuda::model_config::step_graphs); 0 launches every step directly.
  std::uint32_t step_graphs = 0;
  /// sim: the cost model's constants and the GPU preset's rates by name
  /// (gpu::cost_override_names(); troupe-cost-fit writes them from a GPU's
  /// measurements); empty keeps the defaults and the preset.
  std::map<std::string, double> cost;
  bool operator==(const backend_options&) const = default;
};

/// [memory_pool]: the unified page pool for KV cache and adapter weights.
struct memory_pool_options {
  /// Tokens of KV cache per page.
  std::uint32_t page_tokens = 16;
  /// Pages in the pool; 0 derives it from the GPU memory and `gpu_memory_fraction`.
  std::uint64_t pages = 0;
  /// Share of GPU memory left after the weights that the pool may take.
  double gpu_memory_fraction = 0.9;
  /// Pages of host memory for swapped-out KV (same page size); 0: none.
  std::uint64_t host_pages = 0;
  /// Pages of session caches kept in files on disk, below the host pool
  /// (0: no disk tier).
  std::uint64_t disk_pages = 0;
  /// Where those files go ("": the system's temporary directory); each
  /// process uses a directory of its own in it, removed when it stops.
  std::string disk_dir;
  /// Write-back below this share of the host pool free or clean (a copy on
  /// disk already): host caches are copied to disk ahead of need, so a
  /// cache leaving the GPU rarely waits for a write (0: only on demand).
  double disk_write_back = 0.5;
  /// A turn whose cache is on disk: "read" it back always, or by "cost":
  /// only when predicted no slower than recomputing it, counting the disk's
  /// queue and the batch a recompute holds up, within disk_max_wait_s
  /// (policies/disk_fetch.hpp); a cache pushed out on demand is written by
  /// the same measure, else dropped.
  std::string disk_fetch = "cost";
  /// The disk's sustained rate for those predictions.
  double disk_bytes_per_s = 2e9;
  double disk_max_wait_s = 1.0;
  bool operator==(const memory_pool_options&) const = default;
};

/// [scheduler]
struct scheduler_options {
  /// Name in the scheduling policy registry: fcfs, slora, chameleon.
  std::string policy = "fcfs";
  /// Handed to the policy (slora: cluster, slo_s; chameleon: bypass, ...).
  std::map<std::string, double> params;
  /// Most requests in the running batch.
  std::uint32_t max_running = 256;
  /// Most tokens (prefill + decode) one step may process.
  std::uint32_t token_budget = 8192;
  /// Most requests waiting to be admitted; beyond it: `overloaded`.
  std::uint32_t max_waiting = 65536;
  /// "full": admission reserves a request's whole life (prompt +
  /// max_tokens), so it never runs short (S-LoRA). "on_demand": pages as it
  /// grows (vLLM): more requests fit, and when one cannot grow the policy
  /// preempts (swap or recompute).
  std::string kv_reservation = "full";
  /// on_demand: fraction of the pool admissions leave free for growth.
  double growth_watermark = 0.01;
  /// Share of the pool finished turns may keep for their sessions (the next
  /// turn reuses the KV of its history instead of recomputing it); 0: none.
  double session_fraction = 0.25;
  /// Which session cache leaves a tier first: "lru" or "largest".
  std::string session_eviction = "lru";
  /// An advisory whose turn is expected later (`in_s`) than this fetches
  /// the session's cache only this many seconds before the turn.
  double advise_fetch_lead_s = 1.0;
  /// Automatic prefix caching: whole prompt pages stay cached after their
  /// prefill, and later prompts that begin with the same tokens (and
  /// adapter) read them instead of computing them again.
  bool prefix_caching = true;
  /// "repeated": a prompt page is cached once a second request's prompt
  /// holds it (a prompt seen once takes no memory from the adapter cache);
  /// "all": every prompt's pages.
  std::string prefix_cache_admission = "repeated";
  /// Share of the pool cached prompt pages no request reads may keep (the
  /// rest of idle memory is the adapter cache's).
  double prefix_cache_fraction = 0.25;
  bool operator==(const scheduler_options&) const = default;
};

/// [classifier]: assigns queues and predicted output lengths.
struct classifier_options {
  bool enabled = true;
  /// Name in the classifier policy registry: single_queue, chameleon.
  std::string policy = "single_queue";
  /// Handed to the policy (chameleon: WRS weights and scales).
  std::map<std::string, double> params;
  /// Output-length predictor: max_tokens, history, oracle.
  std::string predictor = "max_tokens";
  std::map<std::string, double> predictor_params;
  bool operator==(const classifier_options&) const = default;
};

/// [queue_tuner]: the policy actor that re-runs K-means, cut-offs and quotas.
struct queue_tuner_options {
  bool enabled = false;
  /// Seconds between tunings.
  double period_s = 300.0;
  /// Seconds of recent requests a tuning looks at.
  double window_s = 300.0;
  std::uint32_t max_queues = 4;
  /// Share of the one-queue WCSS another queue must remove.
  double elbow = 0.05;
  /// Latency target each queue's minimum quota is sized for.
  double slo_s = 5.0;
  /// S in the minimum quota S·T·(λ + 1/SLO): "max" (the queue's largest
  /// cost, Chameleon's) or "mean" (its mean cost, Little's law).
  std::string quota_size = "max";
  /// Seconds per output token used to turn predicted lengths into durations.
  double iteration_s = 0.03;
  bool operator==(const queue_tuner_options&) const = default;
};

/// [adapter_cache]
struct adapter_cache_options {
  /// Name in the eviction policy registry: lru, lfu, fairshare, slora, chameleon.
  std::string policy = "lru";
  /// Parameters handed to the policy (chameleon/fairshare: frequency,
  /// recency, size weights); the policy rejects keys it does not take.
  std::map<std::string, double> params;
  /// Most adapters resident on the GPU at once; 0: bounded by pool pages only.
  std::uint32_t max_resident = 0;
  /// Seconds of history behind an adapter's use frequency.
  double window_s = 300.0;
  /// Load the adapters of queued requests before they are admitted.
  bool prefetch = true;
  /// Prefetch only while this share of the pool stays free afterwards.
  double prefetch_free_fraction = 0.1;
  /// Predictive prefetch policy actor: "none" (off) or "histogram".
  std::string predictor = "none";
  /// Seconds between the predictor's rounds.
  double predictor_interval_s = 1.0;
  /// Host memory for parsed adapters (the host tier); 0: unbounded. Adapters
  /// beyond it are read from disk again on their next load.
  std::uint64_t host_bytes = 0;
  /// Directories scanned at start: each subdirectory with an
  /// adapter_config.json registers as an adapter named after it.
  std::vector<std::string> directories;
  bool operator==(const adapter_cache_options&) const = default;
};

/// [copy_engine]
struct copy_engine_options {
  /// A session cache coming back from the host pool streams in layer by
  /// layer under its turn's first step (backends that can; cpu).
  bool layer_streaming = true;
  /// Concurrent host-to-device transfers in flight.
  std::uint32_t max_inflight = 4;
  bool operator==(const copy_engine_options&) const = default;
};

/// [metrics]
struct metrics_options {
  bool enabled = true;
  /// Seconds between log lines with throughput figures; 0 disables them.
  double log_interval_s = 10.0;
  bool operator==(const metrics_options&) const = default;
};

/// One LoRA adapter known to the deployment ([[adapters]] entries).
struct adapter_spec {
  std::string name;
  std::uint32_t rank = 8;
  /// Directory with PEFT files; empty for the sim backend.
  std::string path;
  bool operator==(const adapter_spec&) const = default;
};

/// [adapters_generate]: synthesize `count` adapters named `<prefix><i>`,
/// with ranks drawn round-robin from `ranks` (for benchmarks and the sim).
struct adapter_generate_options {
  std::uint32_t count = 0;
  std::string prefix = "lora-";
  std::vector<std::uint32_t> ranks{8, 16, 32, 64};
  bool operator==(const adapter_generate_options&) const = default;
};

/// A multi-node deployment: every node runs its own actors; the router node
/// also takes clients over ZeroMQ and places their requests on the nodes.
/// Nodes talk through CAF's middleman. No nodes: a single-node deployment.
struct cluster_options {
  /// Each node's middleman address, "host:port", in node order.
  std::vector<std::string> nodes;
  /// The node this process is (troupe-serve --node overrides it).
  std::uint32_t node = 0;
  /// The node with the router and the ZeroMQ endpoint.
  std::uint32_t router = 0;
  /// How long the router waits for the other nodes to come up.
  double connect_timeout_s = 30;
  /// How long the router waits for a node's answer (a submission, a cancel,
  /// an advisory, a session's KV pull) and a node for another's KV export.
  /// A request to a node that is gone is never answered otherwise. Past it
  /// a submission takes the node as lost (its requests go elsewhere), a KV
  /// pull counts as failed and the turn runs without it (its prompt
  /// computed again), a cancel answers "not found", an advisory "none".
  double node_timeout_s = 30;
  /// A session's turn stays on the node holding its KV while that node has
  /// at most this many more requests in flight than the least loaded node;
  /// past that it moves and its KV is pulled along.
  std::uint32_t imbalance = 2;
  /// A request with an adapter and no session goes to the node its
  /// adapter's last request went to (its weights likely cached there), by
  /// the same imbalance rule.
  bool adapter_affinity = false;
  /// > 0: a request whose prompt has at least this many tokens follows the
  /// last prompt that began with the same ones (prefix caching's locality).
  std::uint32_t prefix_affinity_tokens = 0;
  /// An advisory further ahead than this chooses its turn's node (and
  /// starts the pull of its KV) only this many seconds before the turn,
  /// by the load then; one nearer is placed at once. A large value places
  /// every advisory at once.
  double advise_place_lead_s = 1.0;
  bool enabled() const noexcept { return !nodes.empty(); }
  bool operator==(const cluster_options&) const = default;
};

/// The whole deployment, as validated from one file.
struct deployment_options {
  /// Path of the file it came from ("<embedded default>" for the built-in).
  std::string source;
  server_options server;
  http_options http;
  logging_options logging;
  caf_options caf;
  model_options model;
  backend_options backend;
  memory_pool_options memory_pool;
  scheduler_options scheduler;
  classifier_options classifier;
  queue_tuner_options queue_tuner;
  adapter_cache_options adapter_cache;
  copy_engine_options copy_engine;
  metrics_options metrics;
  cluster_options cluster;
  std::vector<adapter_spec> adapters;
  adapter_generate_options adapter_generate;
  bool operator==(const deployment_options&) const = default;
};

} // namespace troupe
