// Collects `stats` replies from several actors, one after another, for the
// actors that answer for a whole node or deployment. Included by actor .cpp
// files only (it pulls in CAF's request machinery).
#pragma once

#include "messages/interfaces.hpp"

#include <caf/actor_cast.hpp>
#include <caf/error.hpp>

#include <memory>
#include <vector>

namespace troupe {

using stats_source = caf::typed_actor<caf::replies_to<stats_atom>::with<stat_values>>;

/// Handles of the given actors that are set, as stats sources.
template <class... Handles>
std::vector<stats_source> stats_sources(const Handles&... hs) {
  std::vector<stats_source> out;
  for (auto a : {caf::actor_cast<caf::actor>(hs)...})
    if (a)
      out.push_back(caf::actor_cast<stats_source>(a));
  return out;
}

/// Appends every source's figures to `values`, then calls done(values); on
/// the first failure fail(error) instead.
template <class Self, class Done, class Fail>
void gather_stats(Self* self, std::shared_ptr<const std::vector<stats_source>> sources,
                  std::shared_ptr<stat_values> values, Done done, Fail fail, std::size_t i = 0) {
  if (i == sources->size()) {
    done(*values);
    return;
  }
  self->request((*sources)[i], caf::infinite, stats_atom_v)
    .then(
      [=](const stat_values& v) mutable {
        values->insert(values->end(), v.begin(), v.end());
        gather_stats(self, sources, values, done, fail, i + 1);
      },
      [fail](const caf::error& e) mutable { fail(e); });
}

} // namespace troupe
