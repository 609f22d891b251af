#include "tools/workload/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <set>
#include <string_view>
#include <unordered_map>

namespace troupe::workload {

namespace {

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Uniform in (0, 1).
double uniform(std::uint64_t& s) {
  return (static_cast<double>(splitmix(s) >> 11) + 0.5) / 9007199254740992.0;
}

double normal(std::uint64_t& s) {
  // Box-Muller; one of the pair is enough here.
  const double u1 = uniform(s), u2 = uniform(s);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 by the boost u^(1/shape).
double gamma(std::uint64_t& s, double shape) {
  if (shape < 1.0)
    return gamma(s, shape + 1.0) * std::pow(uniform(s), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0, v = 0;
    do {
      x = normal(s);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = uniform(s);
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v)))
      return d * v;
  }
}

bool parse_u32(std::string_view text, std::uint32_t& out) {
  while (!text.empty() && (text.back() == '\r' || text.back() == ' '))
    text.remove_suffix(1);
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size();
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

/// "YYYY-MM-DD HH:MM:SS[.fffffff]" to seconds since the epoch; false if malformed.
bool parse_timestamp(std::string_view t, double& out) {
  if (t.size() < 19 || t[4] != '-' || t[7] != '-' || t[10] != ' ' || t[13] != ':' || t[16] != ':')
    return false;
  auto num = [&](std::size_t at, std::size_t len, unsigned& v) {
    auto [p, ec] = std::from_chars(t.data() + at, t.data() + at + len, v);
    return ec == std::errc{} && p == t.data() + at + len;
  };
  unsigned y, mo, d, h, mi, s;
  if (!num(0, 4, y) || !num(5, 2, mo) || !num(8, 2, d) || !num(11, 2, h) || !num(14, 2, mi)
      || !num(17, 2, s) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
    return false;
  double frac = 0;
  if (t.size() > 19) {
    if (t[19] != '.' || t.size() == 20)
      return false;
    double scale = 0.1;
    for (std::size_t i = 20; i < t.size(); ++i) {
      if (t[i] < '0' || t[i] > '9')
        return false;
      frac += (t[i] - '0') * scale;
      scale /= 10;
    }
  }
  out = static_cast<double>(days_from_civil(y, mo, d)) * 86400.0 + h * 3600.0 + mi * 60.0 + s + frac;
  return true;
}

/// The data rows of a CSV file whose header starts with `header` (or is
/// exactly `header`): (line number, text), line ends and empty lines
/// dropped; or what was wrong.
std::variant<std::vector<std::pair<std::size_t, std::string>>, std::string>
read_rows(const std::string& path, std::string_view header, bool exact = false) {
  std::ifstream in{path};
  if (!in)
    return path + ": cannot open";
  std::string line;
  if (!std::getline(in, line))
    return path + ": empty file";
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  if (exact ? line != header : line.rfind(header, 0) != 0)
    return path + ":1: expected " + (exact ? "the header " : "a header starting ") + std::string{header}
           + ", got \"" + line + "\"";
  std::vector<std::pair<std::size_t, std::string>> rows;
  for (std::size_t n = 2; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (!line.empty())
      rows.emplace_back(n, std::move(line));
  }
  return rows;
}

} // namespace

std::variant<std::vector<request>, std::string> load_sharegpt_lengths(const std::string& path) {
  auto read = read_rows(path, "num_prefill_tokens,num_decode_tokens");
  if (auto* e = std::get_if<std::string>(&read))
    return *e;
  std::vector<request> out;
  for (const auto& [n, line] : std::get<0>(read)) {
    const auto where = path + ":" + std::to_string(n) + ": ";
    const auto c1 = line.find(',');
    const auto c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c1 == std::string::npos)
      return where + "expected comma-separated fields, got \"" + line + "\"";
    request r;
    r.adapter = none_adapter;
    if (!parse_u32(std::string_view{line}.substr(0, c1), r.prompt_tokens) || r.prompt_tokens == 0)
      return where + "num_prefill_tokens \"" + line.substr(0, c1) + "\" is not a positive integer";
    const auto decode = std::string_view{line}.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    if (!parse_u32(decode, r.output_tokens) || r.output_tokens == 0)
      return where + "num_decode_tokens \"" + std::string{decode} + "\" is not a positive integer";
    out.push_back(r);
  }
  if (out.empty())
    return path + ": no requests";
  return out;
}

std::variant<std::vector<conversation>, std::string> load_conversations(const std::string& path) {
  // conversation_id,messages,rounds,role_sequence,prompt_chars,response_chars,
  // prompt_tokens_est,response_tokens_est,is_failure
  auto read = read_rows(path, "conversation_id,messages,rounds,");
  if (auto* e = std::get_if<std::string>(&read))
    return *e;
  std::vector<conversation> out;
  for (const auto& [n, line] : std::get<0>(read)) {
    std::vector<std::string_view> f;
    std::string_view rest{line};
    for (auto c = rest.find(','); ; c = rest.find(',')) {
      f.push_back(rest.substr(0, c));
      if (c == std::string_view::npos)
        break;
      rest.remove_prefix(c + 1);
    }
    const auto where = path + ":" + std::to_string(n) + ": ";
    if (f.size() != 9)
      return where + "expected 9 fields, got " + std::to_string(f.size());
    if (f[8] == "1")
      continue;
    conversation c;
    if (!parse_u32(f[2], c.rounds) || !parse_u32(f[6], c.prompt_tokens) || !parse_u32(f[7], c.response_tokens))
      return where + "rounds, prompt_tokens_est and response_tokens_est must be integers";
    if (c.rounds == 0)
      continue;
    c.prompt_tokens = std::max<std::uint32_t>(c.prompt_tokens, c.rounds);
    c.response_tokens = std::max<std::uint32_t>(c.response_tokens, c.rounds);
    out.push_back(c);
  }
  if (out.empty())
    return path + ": no conversations";
  return out;
}

void cap_rounds(std::vector<conversation>& conversations, std::uint32_t max_rounds) {
  if (max_rounds == 0)
    return;
  for (auto& c : conversations)
    if (c.rounds > max_rounds) {
      c.prompt_tokens = static_cast<std::uint32_t>(std::uint64_t{c.prompt_tokens} * max_rounds / c.rounds);
      c.response_tokens = static_cast<std::uint32_t>(std::uint64_t{c.response_tokens} * max_rounds / c.rounds);
      c.rounds = max_rounds;
    }
}

void cap_lengths(std::vector<request>& r, std::uint32_t prompt, std::uint32_t output) {
  for (auto& x : r) {
    if (prompt > 0)
      x.prompt_tokens = std::min(x.prompt_tokens, prompt);
    if (output > 0)
      x.output_tokens = std::min(x.output_tokens, output);
  }
}

std::vector<request> multi_turn(const std::vector<conversation>& conversations, double rate, double think_s,
                                std::uint64_t seed) {
  const auto starts = gamma_arrivals(conversations.size(), rate, 1.0, seed);
  std::vector<request> out;
  for (std::size_t i = 0; i < conversations.size(); ++i) {
    const auto& c = conversations[i];
    for (std::uint32_t t = 0; t < c.rounds; ++t) {
      request r;
      r.arrival_s = starts[i];
      r.prompt_tokens = std::max<std::uint32_t>(c.prompt_tokens / c.rounds, 1);
      r.output_tokens = std::max<std::uint32_t>(c.response_tokens / c.rounds, 1);
      r.adapter = none_adapter;
      r.session = i + 1;
      r.think_s = think_s;
      out.push_back(r);
    }
  }
  return out;
}

std::variant<std::vector<request>, std::string> load_trace(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    return path + ": cannot open";
  std::string header;
  std::getline(in, header);
  if (header.rfind("num_prefill_tokens", 0) == 0)
    return load_sharegpt_lengths(path);
  return load_azure_trace(path);
}

std::variant<std::vector<request>, std::string> load_azure_trace(const std::string& path) {
  auto read = read_rows(path, "TIMESTAMP,ContextTokens,GeneratedTokens", true);
  if (auto* e = std::get_if<std::string>(&read))
    return *e;
  std::vector<request> out;
  double first = 0;
  for (const auto& [n, line] : std::get<0>(read)) {
    const auto where = path + ":" + std::to_string(n) + ": ";
    const auto c1 = line.find(',');
    const auto c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos || line.find(',', c2 + 1) != std::string::npos)
      return where + "expected 3 comma-separated fields, got \"" + line + "\"";
    double t = 0;
    if (!parse_timestamp(std::string_view{line}.substr(0, c1), t))
      return where + "TIMESTAMP \"" + line.substr(0, c1) + "\" is not YYYY-MM-DD HH:MM:SS.fffffff";
    request r;
    if (!parse_u32(std::string_view{line}.substr(c1 + 1, c2 - c1 - 1), r.prompt_tokens) || r.prompt_tokens == 0)
      return where + "ContextTokens \"" + line.substr(c1 + 1, c2 - c1 - 1) + "\" is not a positive integer";
    if (!parse_u32(std::string_view{line}.substr(c2 + 1), r.output_tokens) || r.output_tokens == 0)
      return where + "GeneratedTokens \"" + line.substr(c2 + 1) + "\" is not a positive integer";
    if (out.empty())
      first = t;
    r.arrival_s = t - first;
    if (r.arrival_s < 0)
      return where + "TIMESTAMP goes back in time";
    r.adapter = none_adapter;
    out.push_back(r);
  }
  if (out.empty())
    return path + ": no requests";
  return out;
}

std::vector<double> gamma_arrivals(std::size_t n, double rate, double cv, std::uint64_t seed) {
  std::vector<double> out;
  out.reserve(n);
  std::uint64_t s = seed;
  const double shape = 1.0 / (cv * cv), scale = cv * cv / rate;
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    t += gamma(s, shape) * scale;
    out.push_back(t);
  }
  return out;
}

std::vector<std::int32_t> prompt_of(std::size_t index, std::uint32_t tokens, std::uint32_t shared_prefix,
                                    std::uint32_t groups) {
  std::vector<std::int32_t> out;
  out.reserve(tokens);
  const auto shared = std::min(tokens, shared_prefix);
  const auto group = index % std::max<std::uint32_t>(groups, 1);
  for (std::uint32_t j = 0; j < shared; ++j)
    out.push_back(static_cast<std::int32_t>(10 + (group * 89 + j * 13 + 5) % 400));
  for (std::uint32_t j = shared; j < tokens; ++j)
    out.push_back(static_cast<std::int32_t>(10 + (index * 31 + j * 7) % 400));
  return out;
}

std::vector<request> synthetic(std::size_t n, double rate, double cv, std::uint32_t prompt_lo,
                               std::uint32_t prompt_hi, std::uint32_t output_lo, std::uint32_t output_hi,
                               std::uint64_t seed) {
  const auto t = gamma_arrivals(n, rate, cv, seed);
  std::uint64_t s = seed ^ 0x5bd1e995u;
  auto draw = [&](std::uint32_t lo, std::uint32_t hi) {
    if (hi <= lo)
      return lo;
    return lo + static_cast<std::uint32_t>(splitmix(s) % (std::uint64_t{hi} - lo + 1));
  };
  std::vector<request> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({t[i], draw(prompt_lo, prompt_hi), draw(output_lo, output_hi), none_adapter});
  return out;
}

std::vector<request> window(const std::vector<request>& in, double from_s, double seconds) {
  std::vector<request> out;
  for (const auto& r : in)
    if (r.arrival_s >= from_s && r.arrival_s < from_s + seconds) {
      out.push_back(r);
      out.back().arrival_s -= from_s;
    }
  return out;
}

void scale_time(std::vector<request>& r, double factor) {
  for (auto& x : r)
    x.arrival_s *= factor;
}

void set_rate(std::vector<request>& r, double rate) {
  if (r.size() < 2 || rate <= 0)
    return;
  const double span = r.back().arrival_s - r.front().arrival_s;
  if (span <= 0)
    return;
  const double current = static_cast<double>(r.size() - 1) / span;
  scale_time(r, current / rate);
}

std::size_t clamp_context(std::vector<request>& r, std::uint32_t max_context) {
  std::size_t changed = 0;
  for (auto& x : r) {
    bool c = false;
    if (x.output_tokens >= max_context) {
      x.output_tokens = max_context - 1;
      c = true;
    }
    if (x.prompt_tokens + x.output_tokens > max_context) {
      x.prompt_tokens = max_context - x.output_tokens;
      c = true;
    }
    changed += c ? 1 : 0;
  }
  return changed;
}

std::variant<adapter_set, std::string> make_adapter_set(std::uint32_t n,
                                                        const std::vector<std::uint32_t>& ranks,
                                                        const std::string& popularity, bool cycle_ranks) {
  if (n == 0)
    return std::string{"the adapter count must be at least 1"};
  if (ranks.empty())
    return std::string{"no ranks given"};
  adapter_set set;
  const std::size_t k = ranks.size();
  // Each adapter's rank class: its rank's position in `ranks`.
  std::vector<std::size_t> cls(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    cls[i] = cycle_ranks ? i % k : std::min<std::size_t>(k - 1, static_cast<std::size_t>(i) * k / n);
    set.ranks.push_back(ranks[cls[i]]);
  }
  const auto colon = popularity.find(':');
  const std::string kind = popularity.substr(0, colon);
  double param = 1.0;
  if (colon != std::string::npos) {
    const auto text = popularity.substr(colon + 1);
    char* end = nullptr;
    param = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(param) || param < 0)
      return "popularity \"" + popularity + "\": \"" + text + "\" is not a number >= 0";
  }
  const double dn = n;
  if (kind == "uniform") {
    set.weights.assign(n, 1.0);
  } else if (kind == "power") {
    if (param <= 0)
      return std::string{"power:<alpha> needs alpha > 0"};
    for (std::uint32_t i = 0; i < n; ++i)
      set.weights.push_back(std::pow((i + 1) / dn, param) - std::pow(i / dn, param));
  } else if (kind == "zipf") {
    for (std::uint32_t i = 0; i < n; ++i)
      set.weights.push_back(1.0 / std::pow(i + 1.0, param));
  } else if (kind == "chameleon") {
    std::vector<double> members(k, 0);
    for (std::uint32_t i = 0; i < n; ++i)
      members[cls[i]] += 1;
    for (std::uint32_t i = 0; i < n; ++i)
      set.weights.push_back(1.0 / std::pow(cls[i] + 1.0, param) / members[cls[i]]);
  } else {
    return "popularity \"" + popularity + "\": expected uniform, power:<alpha>, zipf:<s> or chameleon:<alpha>";
  }
  return set;
}

/// Sets `field` of each request to what `draw()` gives, but a later turn of
/// a conversation to its first turn's (its KV cache is of that adapter, its
/// client of that class); draw() is called for first turns only.
template <class T, class Draw>
void draw_per_conversation(std::vector<request>& r, T request::*field, Draw draw) {
  std::unordered_map<std::uint64_t, T> of_session;
  for (auto& x : r) {
    if (x.session != 0)
      if (auto seen = of_session.find(x.session); seen != of_session.end()) {
        x.*field = seen->second;
        continue;
      }
    x.*field = draw();
    if (x.session != 0)
      of_session.emplace(x.session, x.*field);
  }
}

void assign_adapters(std::vector<request>& r, const adapter_set& set, double base_fraction,
                     std::uint64_t seed) {
  std::vector<double> cdf(set.weights.size());
  std::partial_sum(set.weights.begin(), set.weights.end(), cdf.begin());
  const double total = cdf.empty() ? 0 : cdf.back();
  std::uint64_t s = seed;
  draw_per_conversation(r, &request::adapter, [&]() -> std::uint32_t {
    if (cdf.empty() || uniform(s) < base_fraction)
      return none_adapter;
    const double u = uniform(s) * total;
    const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
    return static_cast<std::uint32_t>(
      std::min<std::ptrdiff_t>(it - cdf.begin(), static_cast<std::ptrdiff_t>(cdf.size()) - 1));
  });
}

std::variant<std::vector<priority_share>, std::string> parse_priority_mix(const std::string& text) {
  std::vector<priority_share> mix;
  double total = 0;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const auto entry = text.substr(at, comma - at);
    at = comma + 1;
    const auto colon = entry.find(':');
    if (colon == std::string::npos)
      return "priority mix entry \"" + entry + "\": expected PRIORITY:SHARE, e.g. -1:0.3";
    const auto p_text = entry.substr(0, colon), s_text = entry.substr(colon + 1);
    std::int32_t p = 0;
    const auto [p_end, p_err] = std::from_chars(p_text.data(), p_text.data() + p_text.size(), p);
    if (p_text.empty() || p_err != std::errc{} || p_end != p_text.data() + p_text.size())
      return "priority mix entry \"" + entry + "\": \"" + p_text + "\" is not a 32-bit integer";
    char* end = nullptr;
    const double share = std::strtod(s_text.c_str(), &end);
    if (s_text.empty() || end != s_text.c_str() + s_text.size() || !std::isfinite(share) || share <= 0)
      return "priority mix entry \"" + entry + "\": \"" + s_text + "\" is not a share > 0";
    for (const auto& m : mix)
      if (m.priority == p)
        return "priority mix \"" + text + "\": priority " + p_text + " is given twice";
    mix.push_back({p, share});
    total += share;
  }
  for (auto& m : mix)
    m.share /= total;
  return mix;
}

void assign_priorities(std::vector<request>& r, const std::vector<priority_share>& mix, std::uint64_t seed) {
  if (mix.empty())
    return;
  // Drawn from a stream of their own, so a mix changes no adapter draw.
  std::uint64_t s = seed ^ 0x7072696f72697479ull;
  draw_per_conversation(r, &request::priority, [&] {
    double u = uniform(s);
    for (const auto& m : mix) {
      if (u < m.share)
        return m.priority;
      u -= m.share;
    }
    return mix.back().priority; // where rounding leaves u past the sum
  });
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

summary summarize(const std::vector<request>& r) {
  summary s;
  s.requests = r.size();
  if (r.empty())
    return s;
  s.duration_s = r.back().arrival_s - r.front().arrival_s;
  s.mean_rate = s.duration_s > 0 ? static_cast<double>(r.size() - 1) / s.duration_s : 0;
  std::vector<double> in, out;
  std::set<std::uint32_t> adapters;
  for (const auto& x : r) {
    in.push_back(x.prompt_tokens);
    out.push_back(x.output_tokens);
    if (x.adapter != none_adapter)
      adapters.insert(x.adapter);
  }
  s.prompt_mean = std::accumulate(in.begin(), in.end(), 0.0) / static_cast<double>(in.size());
  s.output_mean = std::accumulate(out.begin(), out.end(), 0.0) / static_cast<double>(out.size());
  s.prompt_p50 = percentile(in, 50);
  s.prompt_p99 = percentile(in, 99);
  s.output_p50 = percentile(out, 50);
  s.output_p99 = percentile(out, 99);
  s.distinct_adapters = adapters.size();
  return s;
}

} // namespace troupe::workload
