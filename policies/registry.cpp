#include "policies/registry.hpp"

#include "policies/adaptive_scheduling_policy.hpp"
#include "policies/aptserve_scheduling_policy.hpp"
#include "policies/chameleon_scheduling_policy.hpp"
#include "policies/fcfs_scheduling_policy.hpp"
#include "policies/priority_scheduling_policy.hpp"
#include "policies/sjf_scheduling_policy.hpp"
#include "policies/slora_scheduling_policy.hpp"

#include <map>
#include <mutex>

namespace troupe::policies {

namespace {

template <class Policy>
class registry {
public:
  registry(std::string builtin, policy_factory<Policy> f) {
    factories_.emplace(std::move(builtin), std::move(f));
  }

  void add(std::string name, policy_factory<Policy> f) {
    std::lock_guard guard{mtx_};
    factories_[std::move(name)] = std::move(f);
  }

  std::unique_ptr<Policy> make(const std::string& name) const {
    policy_factory<Policy> f;
    {
      std::lock_guard guard{mtx_};
      auto i = factories_.find(name);
      if (i == factories_.end())
        return nullptr;
      f = i->second;
    }
    // Outside the lock: a factory may build another policy by name.
    return f();
  }

  std::vector<std::string> names() const {
    std::lock_guard guard{mtx_};
    std::vector<std::string> out;
    for (const auto& [name, f] : factories_)
      out.push_back(name);
    return out;
  }

private:
  mutable std::mutex mtx_;
  std::map<std::string, policy_factory<Policy>> factories_;
};

registry<scheduling_policy>& schedulers() {
  static registry<scheduling_policy>& r = []() -> registry<scheduling_policy>& {
    static registry<scheduling_policy> built{"fcfs", [] { return std::make_unique<fcfs_scheduling_policy>(); }};
    built.add("slora", [] { return std::make_unique<slora_scheduling_policy>(); });
    built.add("chameleon", [] { return std::make_unique<chameleon_scheduling_policy>(); });
    built.add("adaptive", [] { return std::make_unique<adaptive_scheduling_policy>(); });
    built.add("aptserve", [] { return std::make_unique<aptserve_scheduling_policy>(); });
    built.add("sjf", [] { return std::make_unique<sjf_scheduling_policy>(); });
    built.add("priority", [] { return std::make_unique<priority_scheduling_policy>(); });
    return built;
  }();
  return r;
}

registry<classifier_policy>& classifiers() {
  static registry<classifier_policy>& r = []() -> registry<classifier_policy>& {
    static registry<classifier_policy> built{"single_queue",
                                             [] { return std::make_unique<single_queue_classifier_policy>(); }};
    built.add("chameleon", [] { return std::make_unique<chameleon_classifier_policy>(); });
    return built;
  }();
  return r;
}

registry<eviction_policy>& evictions() {
  static registry<eviction_policy>& r = [] () -> registry<eviction_policy>& {
    static registry<eviction_policy> built{"lru", [] { return std::make_unique<lru_eviction_policy>(); }};
    built.add("lfu", [] { return std::make_unique<lfu_eviction_policy>(); });
    built.add("slora", [] { return std::make_unique<slora_eviction_policy>(); });
    built.add("chameleon", [] {
      return std::make_unique<score_eviction_policy>("chameleon", score_weights{0.45, 0.10, 0.45});
    });
    built.add("fairshare", [] {
      return std::make_unique<score_eviction_policy>("fairshare", score_weights{1.0 / 3, 1.0 / 3, 1.0 / 3});
    });
    return built;
  }();
  return r;
}

} // namespace

void register_scheduling_policy(std::string name, policy_factory<scheduling_policy> f) {
  schedulers().add(std::move(name), std::move(f));
}
void register_classifier_policy(std::string name, policy_factory<classifier_policy> f) {
  classifiers().add(std::move(name), std::move(f));
}
void register_eviction_policy(std::string name, policy_factory<eviction_policy> f) {
  evictions().add(std::move(name), std::move(f));
}

std::unique_ptr<scheduling_policy> make_scheduling_policy(const std::string& name) {
  return schedulers().make(name);
}
std::unique_ptr<classifier_policy> make_classifier_policy(const std::string& name) {
  return classifiers().make(name);
}
std::unique_ptr<eviction_policy> make_eviction_policy(const std::string& name) {
  return evictions().make(name);
}

std::vector<std::string> scheduling_policy_names() { return schedulers().names(); }
std::vector<std::string> classifier_policy_names() { return classifiers().names(); }
std::vector<std::string> eviction_policy_names() { return evictions().names(); }

} // namespace troupe::policies
