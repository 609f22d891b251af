#include "tools/workload/report.hpp"

#include "tools/workload/workload.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <limits>
#include <map>
#include <numeric>

namespace troupe::workload {

latency_summary summarize_latency(std::vector<double> v) {
  latency_summary s;
  s.count = v.size();
  if (v.empty())
    return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.p50 = percentile(v, 50);
  s.p90 = percentile(v, 90);
  s.p99 = percentile(v, 99);
  return s;
}

run_summary summarize_run(const std::vector<request_record>& records, const slo& target,
                          double offered_rate, std::string label) {
  run_summary r;
  r.label = std::move(label);
  r.offered_rate = offered_rate;
  r.requests = records.size();
  std::vector<double> ttft, tbt, e2e, slowdown;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  std::uint64_t tokens = 0;
  std::size_t attained = 0;
  double wtt = 0;
  std::size_t wtt_n = 0;
  for (const auto& x : records) {
    first = std::min(first, x.arrival_s);
    if (!x.ok()) {
      ++r.failed;
      continue;
    }
    ++r.finished;
    tokens += x.completion_tokens;
    last = std::max(last, x.arrival_s + x.e2e_s);
    if (x.ttft_s >= 0)
      ttft.push_back(x.ttft_s);
    if (x.tbt_mean_s >= 0)
      tbt.push_back(x.tbt_mean_s);
    e2e.push_back(x.e2e_s);
    if (x.isolated_s > 0)
      slowdown.push_back(x.e2e_s / x.isolated_s);
    if (x.queue_s >= 0 && x.e2e_s > x.queue_s) {
      wtt += x.e2e_s / (x.e2e_s - x.queue_s);
      ++wtt_n;
    }
    const bool ttft_ok = target.ttft_s <= 0 || (x.ttft_s >= 0 && x.ttft_s <= target.ttft_s);
    const bool tbt_ok = target.tbt_s <= 0 || (target.tbt_p99 ? x.tbt_p99_s : x.tbt_mean_s) <= target.tbt_s;
    attained += ttft_ok && tbt_ok ? 1 : 0;
  }
  r.duration_s = r.finished > 0 ? last - first : 0;
  if (r.duration_s > 0) {
    r.requests_per_s = static_cast<double>(r.finished) / r.duration_s;
    r.tokens_per_s = static_cast<double>(tokens) / r.duration_s;
  }
  r.ttft = summarize_latency(std::move(ttft));
  r.tbt = summarize_latency(std::move(tbt));
  r.e2e = summarize_latency(std::move(e2e));
  r.slowdown = summarize_latency(std::move(slowdown));
  r.weighted_turnaround = wtt_n > 0 ? wtt / static_cast<double>(wtt_n) : 0;
  r.attainment = r.requests > 0 ? static_cast<double>(attained) / static_cast<double>(r.requests) : 0;
  std::map<std::int32_t, std::vector<request_record>, std::greater<>> by_priority;
  for (const auto& x : records)
    by_priority[x.priority].push_back(x);
  if (by_priority.size() > 1)
    for (auto& [priority, of_class] : by_priority) {
      const double share = static_cast<double>(of_class.size()) / static_cast<double>(records.size());
      auto c = summarize_run(of_class, target, offered_rate * share, "priority " + std::to_string(priority));
      c.priority = priority;
      r.classes.push_back(std::move(c));
    }
  return r;
}

double effective_throughput(const std::vector<run_summary>& runs, double min_attainment) {
  double best = 0;
  for (const auto& r : runs)
    if (r.attainment >= min_attainment)
      best = std::max(best, r.offered_rate);
  return best;
}

namespace {

void latency_json(std::ostream& out, const char* name, const latency_summary& l) {
  out << "\"" << name << "\":{\"mean\":" << l.mean << ",\"p50\":" << l.p50 << ",\"p90\":" << l.p90
      << ",\"p99\":" << l.p99 << ",\"count\":" << l.count << "}";
}

/// Labels are ours (policy names and the like), but quote what JSON needs.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

void write_json(std::ostream& out, const std::vector<run_summary>& runs, double min_attainment) {
  out << "{\"runs\":[";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    out << (i ? "," : "") << "{\"label\":" << quoted(r.label) << ",\"offered_rate\":" << r.offered_rate
        << ",\"requests\":" << r.requests << ",\"finished\":" << r.finished << ",\"failed\":" << r.failed
        << ",\"duration_s\":" << r.duration_s << ",\"requests_per_s\":" << r.requests_per_s
        << ",\"tokens_per_s\":" << r.tokens_per_s << ",";
    latency_json(out, "ttft_s", r.ttft);
    out << ",";
    latency_json(out, "tbt_s", r.tbt);
    out << ",";
    latency_json(out, "e2e_s", r.e2e);
    if (r.slowdown.count > 0) {
      out << ",";
      latency_json(out, "slowdown", r.slowdown);
    }
    out << ",\"weighted_turnaround\":" << r.weighted_turnaround << ",\"attainment\":" << r.attainment << ",\"pcie_bytes\":" << r.pcie_bytes
        << ",\"adapter_hit_rate\":" << r.adapter_hit_rate;
    if (!r.classes.empty()) {
      out << ",\"classes\":[";
      for (std::size_t k = 0; k < r.classes.size(); ++k) {
        const auto& c = r.classes[k];
        out << (k ? "," : "") << "{\"priority\":" << c.priority << ",\"requests\":" << c.requests
            << ",\"finished\":" << c.finished << ",\"failed\":" << c.failed << ",\"tokens_per_s\":" << c.tokens_per_s << ",";
        latency_json(out, "ttft_s", c.ttft);
        out << ",";
        latency_json(out, "tbt_s", c.tbt);
        out << ",";
        latency_json(out, "e2e_s", c.e2e);
        out << ",\"attainment\":" << c.attainment << "}";
      }
      out << "]";
    }
    out << "}";
  }
  out << "],\"effective_throughput\":{";
  std::map<std::string, std::vector<run_summary>> by_label;
  for (const auto& r : runs)
    by_label[r.label].push_back(r);
  bool first = true;
  for (const auto& [label, rs] : by_label) {
    out << (first ? "" : ",") << quoted(label) << ":" << effective_throughput(rs, min_attainment);
    first = false;
  }
  out << "},\"min_attainment\":" << min_attainment << "}\n";
}

void write_outputs(const std::vector<run_summary>& runs, const std::string& json_path,
                   const std::string& csv_path) {
  if (!json_path.empty()) {
    std::ofstream j{json_path};
    write_json(j, runs);
  }
  if (!csv_path.empty()) {
    std::ofstream c{csv_path};
    write_summary_csv(c, runs);
  }
}

std::string effective_throughput_lines(const std::vector<run_summary>& runs, double min_attainment) {
  std::map<std::string, std::vector<run_summary>> by_label;
  for (const auto& r : runs)
    by_label[r.label].push_back(r);
  std::ostringstream out;
  for (const auto& [label, rs] : by_label)
    out << "effective throughput (attainment >= " << min_attainment << ") " << label << ": "
        << effective_throughput(rs, min_attainment) << " req/s\n";
  return out.str();
}

void write_summary_csv(std::ostream& out, const std::vector<run_summary>& runs) {
  out << "label,offered_rate,requests,finished,failed,requests_per_s,tokens_per_s,ttft_p50_s,ttft_p90_s,"
         "ttft_p99_s,tbt_p50_s,tbt_p99_s,e2e_p50_s,e2e_p90_s,e2e_p99_s,weighted_turnaround,attainment,pcie_bytes,"
         "adapter_hit_rate,slowdown_p50,slowdown_p99\n";
  for (const auto& r : runs)
    out << r.label << "," << r.offered_rate << "," << r.requests << "," << r.finished << "," << r.failed << ","
        << r.requests_per_s << "," << r.tokens_per_s << "," << r.ttft.p50 << "," << r.ttft.p90 << ","
        << r.ttft.p99 << "," << r.tbt.p50 << "," << r.tbt.p99 << "," << r.e2e.p50 << "," << r.e2e.p90 << ","
        << r.e2e.p99 << "," << r.weighted_turnaround << "," << r.attainment << "," << r.pcie_bytes << "," << r.adapter_hit_rate << ","
        << (r.slowdown.count > 0 ? r.slowdown.p50 : -1.0) << "," << (r.slowdown.count > 0 ? r.slowdown.p99 : -1.0) << "\n";
}

void write_records_csv(std::ostream& out, const std::string& label, double offered_rate,
                       const std::vector<request_record>& records, bool header) {
  if (header)
    out << "label,offered_rate,id,arrival_s,prompt_tokens,max_tokens,completion_tokens,adapter,ttft_s,tbt_mean_s,"
           "e2e_s,queue_s,outcome,session,tokens_fnv,isolated_s,tbt_p99_s,priority\n";
  for (const auto& x : records)
    out << label << "," << offered_rate << "," << x.id << "," << x.arrival_s << "," << x.prompt_tokens << ","
        << x.max_tokens << "," << x.completion_tokens << "," << x.adapter << "," << x.ttft_s << ","
        << x.tbt_mean_s << "," << x.e2e_s << "," << x.queue_s << "," << x.outcome << "," << x.session << ","
        << x.tokens_fnv << "," << x.isolated_s << "," << x.tbt_p99_s << "," << x.priority << "\n";
}

} // namespace troupe::workload
