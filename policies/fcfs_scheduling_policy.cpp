#include "policies/fcfs_scheduling_policy.hpp"

namespace troupe::policies {

schedule_decision fcfs_scheduling_policy::schedule(const schedule_input& in) {
  schedule_decision out;
  batch_admission batch{in};
  for (const auto& w : in.waiting)
    if (!batch.admit(w, out))
      break;
  return out;
}

} // namespace troupe::policies
