// The adapter registry: every adapter the deployment knows (from the config,
// from scanned directories, or loaded at run time), with its rank, its size
// in pages and where its files are. Owned by the adapter cache actor; the
// intake keeps its own copy of the names, updated as adapters come and go.
#pragma once

#include "runtime/options.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace troupe {

struct adapter_entry {
  std::uint32_t id = 0; ///< 1-based, never reused; 0 is the base model
  std::string name;
  std::uint32_t rank = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pages = 0;
  /// PEFT directory; empty for adapters of the sim backend.
  std::string path;
};

/// The adapters of a deployment. Not thread-safe: one owner mutates it;
/// copies may be handed to others as snapshots.
class adapter_catalog {
public:
  using bytes_fn = std::function<std::uint64_t(std::uint32_t)>;

  /// `bytes_of_rank(r)` gives an adapter's weight size; pages round up.
  adapter_catalog(const std::vector<adapter_spec>& specs,
                  const adapter_generate_options& generate, bytes_fn bytes_of_rank,
                  std::uint64_t page_bytes);
  adapter_catalog() = default;

  // -- mutators ---------------------------------------------------------------

  /// Registers `spec` under a fresh id. Fails, saying why, when the name is
  /// empty, has whitespace or is taken, or the rank is 0.
  std::variant<adapter_entry, std::string> add(const adapter_spec& spec);

  /// Unregisters `name`; false when unknown. Its id is never given again.
  bool remove(const std::string& name);

  // -- observers --------------------------------------------------------------

  /// Looks up by name; nullptr if unknown.
  const adapter_entry* find(const std::string& name) const;
  /// Looks up by id; nullptr if unknown (and for id 0).
  const adapter_entry* by_id(std::uint32_t id) const;
  /// Every entry, by id.
  const std::map<std::uint32_t, adapter_entry>& all() const noexcept { return entries_; }

private:
  bytes_fn bytes_of_rank_;
  std::uint64_t page_bytes_ = 0;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, adapter_entry> entries_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

/// The adapters in `dir`: one per subdirectory holding adapter_config.json,
/// named after the subdirectory, rank from the file; sorted by name. An
/// error names the directory or file at fault.
std::variant<std::vector<adapter_spec>, std::string> scan_adapter_directory(const std::string& dir);

/// An adapter at `path` (a PEFT directory): its rank from adapter_config.json.
std::variant<adapter_spec, std::string> describe_adapter(const std::string& name,
                                                         const std::string& path);

} // namespace troupe
