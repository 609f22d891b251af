#include "runtime/adapter_registry.hpp"

#include "gpu/lora.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace troupe {

// -- adapter_catalog ------------------------------------------------------------

adapter_catalog::adapter_catalog(const std::vector<adapter_spec>& specs,
                                 const adapter_generate_options& generate,
                                 bytes_fn bytes_of_rank, std::uint64_t page_bytes)
  : bytes_of_rank_(std::move(bytes_of_rank)), page_bytes_(page_bytes) {
  // Config entries were validated by the config loader; add() only refuses
  // what it would refuse at run time too.
  for (const auto& s : specs)
    add(s);
  for (std::uint32_t i = 0; i < generate.count && !generate.ranks.empty(); ++i)
    add({generate.prefix + std::to_string(i), generate.ranks[i % generate.ranks.size()], ""});
}

std::variant<adapter_entry, std::string> adapter_catalog::add(const adapter_spec& spec) {
  if (spec.name.empty())
    return std::string{"the adapter name is empty"};
  if (std::any_of(spec.name.begin(), spec.name.end(),
                  [](unsigned char c) { return c <= ' ' || c == 0x7f; }))
    return "the adapter name \"" + spec.name + "\" contains whitespace or control characters";
  if (by_name_.contains(spec.name))
    return "an adapter named \"" + spec.name + "\" is already registered";
  if (spec.rank == 0)
    return "adapter \"" + spec.name + "\": rank must be at least 1";
  adapter_entry e;
  e.id = next_id_++;
  e.name = spec.name;
  e.rank = spec.rank;
  e.bytes = bytes_of_rank_ ? bytes_of_rank_(spec.rank) : 0;
  e.pages = page_bytes_ == 0 ? 0 : (e.bytes + page_bytes_ - 1) / page_bytes_;
  e.path = spec.path;
  by_name_.emplace(e.name, e.id);
  entries_.emplace(e.id, e);
  return e;
}

bool adapter_catalog::remove(const std::string& name) {
  auto i = by_name_.find(name);
  if (i == by_name_.end())
    return false;
  entries_.erase(i->second);
  by_name_.erase(i);
  return true;
}

const adapter_entry* adapter_catalog::find(const std::string& name) const {
  auto i = by_name_.find(name);
  return i == by_name_.end() ? nullptr : &entries_.at(i->second);
}

const adapter_entry* adapter_catalog::by_id(std::uint32_t id) const {
  auto i = entries_.find(id);
  return i == entries_.end() ? nullptr : &i->second;
}

// -- files ----------------------------------------------------------------------

std::variant<adapter_spec, std::string> describe_adapter(const std::string& name,
                                                         const std::string& path) {
  auto config = gpu::read_peft_config(path);
  if (auto* err = std::get_if<std::string>(&config))
    return *err;
  return adapter_spec{name, std::get<gpu::lora_adapter>(config).rank, path};
}

std::variant<std::vector<adapter_spec>, std::string> scan_adapter_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return dir + ": not a directory";
  std::vector<adapter_spec> out;
  for (const auto& sub : fs::directory_iterator{dir, ec}) {
    if (!sub.is_directory(ec) || !fs::exists(sub.path() / "adapter_config.json", ec))
      continue;
    auto spec = describe_adapter(sub.path().filename().string(), sub.path().string());
    if (auto* err = std::get_if<std::string>(&spec))
      return *err;
    out.push_back(std::move(std::get<adapter_spec>(spec)));
  }
  if (ec)
    return dir + ": " + ec.message();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

} // namespace troupe
