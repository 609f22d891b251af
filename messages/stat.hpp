// A named figure in a stats reply, and what kind of figure it is: how a
// deployment of several nodes adds it up and how /metrics types it. Plain
// data (no CAF, no JSON): actors, the wire and tests share it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace troupe {

enum class stat_kind : unsigned char {
  /// A level that may go up and down (requests running, pages free); the
  /// nodes' figures add up.
  gauge,
  /// A total since start that only grows (requests accepted, bytes
  /// copied); the nodes' figures add up. Prometheus: `counter`, `_total`.
  counter,
  /// A figure that does not add up over nodes (a percentile, a mean, a
  /// rate, the uptime): a router gives each node's and the largest.
  level,
};

struct stat_value {
  stat_value(std::string n, double v, stat_kind k) : name(std::move(n)), value(v), kind(k) {}
  stat_value() = default;

  std::string name;
  double value = 0;
  stat_kind kind = stat_kind::gauge;

  friend bool operator==(const stat_value&, const stat_value&) = default;
};

using stat_values = std::vector<stat_value>;

inline stat_value stat_gauge(std::string name, double value) {
  return {std::move(name), value, stat_kind::gauge};
}
inline stat_value stat_counter(std::string name, double value) {
  return {std::move(name), value, stat_kind::counter};
}
inline stat_value stat_level(std::string name, double value) {
  return {std::move(name), value, stat_kind::level};
}

/// "gauge", "counter" or "level".
constexpr const char* to_string(stat_kind k) {
  return k == stat_kind::counter ? "counter" : k == stat_kind::level ? "level" : "gauge";
}

/// Appends (name, value) pairs (a policy's or a backend's figures) as `kind`.
inline void append_stats(stat_values& out, const std::vector<std::pair<std::string, double>>& figures,
                         stat_kind kind) {
  for (const auto& [name, value] : figures)
    out.emplace_back(name, value, kind);
}

/// The figures of a deployment's nodes (per_node[i]: node i's, empty where
/// it gave none) as the deployment's: gauges and counters of the same name
/// add up; a level does not, so each node's is given as node<i>_NAME and
/// NAME is the largest of them, but adapter_cache_hit_rate, which the
/// summed adapter_cache_hits and adapter_cache_misses give exactly. Names
/// in order of first appearance, then the per-node levels.
stat_values merge_node_stats(const std::vector<stat_values>& per_node);

} // namespace troupe
