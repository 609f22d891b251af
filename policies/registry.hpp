// Policy registries by name: the config names a policy, the registry builds
// it. Built-ins are registered on first use; researchers add their own with
// register_*_policy() before the deployment starts.
#pragma once

#include "policies/classifier_policy.hpp"
#include "policies/eviction_policy.hpp"
#include "policies/scheduling_policy.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe::policies {

template <class Policy>
using policy_factory = std::function<std::unique_ptr<Policy>()>;

/// Adds (or replaces) a factory under `name`. Call before spawning actors.
void register_scheduling_policy(std::string name, policy_factory<scheduling_policy> f);
void register_classifier_policy(std::string name, policy_factory<classifier_policy> f);
void register_eviction_policy(std::string name, policy_factory<eviction_policy> f);

/// Builds the named policy; nullptr when no policy has that name.
std::unique_ptr<scheduling_policy> make_scheduling_policy(const std::string& name);
std::unique_ptr<classifier_policy> make_classifier_policy(const std::string& name);
std::unique_ptr<eviction_policy> make_eviction_policy(const std::string& name);

/// Registered names, sorted (for config validation and error messages).
std::vector<std::string> scheduling_policy_names();
std::vector<std::string> classifier_policy_names();
std::vector<std::string> eviction_policy_names();

} // namespace troupe::policies
