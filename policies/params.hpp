// Numeric policy parameters (`[scheduler] params = { ... }` and the like):
// one place that checks every key against its rule and applies all of them
// or none, with messages that name the policy, the key and the rule. Used by
// the policies' configure().
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace troupe::policies {

class param_spec {
public:
  /// `what`: how messages name the owner, e.g. `policy "slora"`.
  explicit param_spec(std::string what) : what_(std::move(what)) {}

  /// A finite number in [lo, hi].
  param_spec& number(std::string key, double& target, double lo = 0, double hi = INFINITY) {
    const std::string rule = hi == INFINITY ? "a finite number >= " + fmt(lo)
                                            : "a number in [" + fmt(lo) + ", " + fmt(hi) + "]";
    return add(std::move(key), rule, [lo, hi](double v) { return std::isfinite(v) && v >= lo && v <= hi; },
               [&target](double v) { target = v; });
  }

  /// A whole number in [lo, hi].
  template <class Int>
  param_spec& whole(std::string key, Int& target, double lo = 0, double hi = 1e6) {
    return add(std::move(key), "a whole number in [" + fmt(lo) + ", " + fmt(hi) + "]",
               [lo, hi](double v) { return std::isfinite(v) && v == std::floor(v) && v >= lo && v <= hi; },
               [&target](double v) { target = static_cast<Int>(v); });
  }

  /// 0 or 1.
  param_spec& flag(std::string key, bool& target) {
    return add(std::move(key), "0 or 1", [](double v) { return v == 0 || v == 1; },
               [&target](double v) { target = v == 1; });
  }

  /// Checks every key of `params`; "" and all applied, or what was wrong and
  /// nothing applied.
  std::string apply(const std::map<std::string, double>& params) const {
    std::vector<const rule*> chosen;
    for (const auto& [key, value] : params) {
      const rule* r = find(key);
      if (r == nullptr)
        return what_ + " takes " + names() + "; got \"" + key + "\"";
      if (!r->ok(value))
        return "\"" + key + "\" must be " + r->text + ", got " + fmt(value);
    }
    for (const auto& [key, value] : params)
      find(key)->set(value);
    return {};
  }

private:
  struct rule {
    std::string key, text;
    std::function<bool(double)> ok;
    std::function<void(double)> set;
  };

  param_spec& add(std::string key, std::string text, std::function<bool(double)> ok,
                  std::function<void(double)> set) {
    rules_.push_back({std::move(key), std::move(text), std::move(ok), std::move(set)});
    return *this;
  }
  const rule* find(const std::string& key) const {
    for (const auto& r : rules_)
      if (r.key == key)
        return &r;
    return nullptr;
  }
  std::string names() const {
    if (rules_.empty())
      return "no parameters";
    std::string out;
    for (std::size_t i = 0; i < rules_.size(); ++i)
      out += (i == 0 ? "" : i + 1 == rules_.size() ? " and " : ", ") + ("\"" + rules_[i].key + "\"");
    return out;
  }
  static std::string fmt(double v) {
    if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15)
      return std::to_string(static_cast<long long>(v));
    return std::to_string(v);
  }

  std::string what_;
  std::vector<rule> rules_;
};

} // namespace troupe::policies
