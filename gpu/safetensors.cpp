// The safetensors reader (memory-mapped files, single or sharded through an
// index JSON, every header field validated) and writer, with exact F16/BF16
// conversions (round-to-nearest-even on write, subnormals, inf and NaN).
#include "gpu/safetensors.hpp"

#include "gpu/json_bounded.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace troupe::gpu {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this reader copies bytes as they are");

std::string_view to_string(dtype x) noexcept {
  switch (x) {
    case dtype::f32:
      return "F32";
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
  }
  return "?";
}

std::size_t dtype_size(dtype x) noexcept {
  return x == dtype::f32 ? 4 : 2;
}

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using detail::parse_bounded;

// -- conversions -------------------------------------------------------------

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

std::uint16_t float_to_half(float f) noexcept {
  // After F. Giesen's float_to_half_fast3_rtne: round to nearest even.
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) // inf or NaN (NaN stays quiet)
    return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) // at or above 65520 rounds to inf
    return sign | 0x7c00u;
  if (x < 0x38800000u) {
    // Subnormal or zero: let the FPU round at the 2^-24 ulp by adding 0.5.
    const float sum = std::bit_cast<float>(x) + 0.5f;
    return sign | static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(sum) - 0x3f000000u);
  }
  const std::uint32_t odd = (x >> 13) & 1u;
  x += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return sign | static_cast<std::uint16_t>(x >> 13);
}

float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign, force quiet
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

std::string shape_string(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Product of `shape` times `elem`, or nullopt on overflow.
std::optional<std::uint64_t> byte_count(std::span<const std::uint64_t> shape, std::uint64_t elem) {
  std::uint64_t n = elem;
  for (const auto d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  return n;
}

// -- mapping -------------------------------------------------------------------

/// One read-only memory-mapped file.
class mapped_file {
public:
  static std::variant<std::unique_ptr<mapped_file>, std::string> open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return path + ": cannot open: " + std::strerror(errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return path + ": cannot stat: " + std::strerror(err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return path + ": not a regular file";
    }
    auto file = std::unique_ptr<mapped_file>(new mapped_file);
    file->size_ = static_cast<std::size_t>(st.st_size);
    if (file->size_ > 0) {
      void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (addr == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return path + ": cannot mmap: " + std::strerror(err);
      }
      file->addr_ = addr;
    }
    ::close(fd);
    return file;
  }

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() {
    if (addr_)
      ::munmap(addr_, size_);
  }

  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(addr_), size_};
  }

private:
  mapped_file() = default;
  void* addr_ = nullptr;
  std::size_t size_ = 0;
};

std::optional<dtype> parse_dtype(std::string_view s) {
  if (s == "F32")
    return dtype::f32;
  if (s == "F16")
    return dtype::f16;
  if (s == "BF16")
    return dtype::bf16;
  return std::nullopt;
}

/// Parses one tensor entry of a header; the error names file and tensor.
std::variant<tensor_view, std::string> parse_entry(const std::string& path, const std::string& name,
                                                   const json& e, std::span<const std::byte> data) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!e.is_object())
    return where + ": header entry is not an object";
  if (!e.contains("dtype") || !e["dtype"].is_string())
    return where + ": missing or non-string 'dtype'";
  const auto type_name = e["dtype"].get<std::string>();
  const auto type = parse_dtype(type_name);
  if (!type)
    return where + ": unsupported dtype '" + type_name + "' (expected F32, F16 or BF16)";
  if (!e.contains("shape") || !e["shape"].is_array())
    return where + ": missing or non-array 'shape'";
  tensor_view t;
  t.name = name;
  t.type = *type;
  t.file = path;
  for (const json& d : e["shape"]) {
    if (!d.is_number_unsigned())
      return where + ": 'shape' holds " + d.dump() + ", not a non-negative integer";
    t.shape.push_back(d.get<std::uint64_t>());
  }
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
      !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
    return where + ": 'data_offsets' must be two non-negative integers";
  const auto begin = e["data_offsets"][0].get<std::uint64_t>();
  const auto end = e["data_offsets"][1].get<std::uint64_t>();
  if (end < begin)
    return where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           "] end before begin";
  if (end > data.size())
    return where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           "] beyond the " + std::to_string(data.size()) + "-byte data buffer (file truncated?)";
  const auto bytes = byte_count(t.shape, dtype_size(t.type));
  if (!bytes || *bytes != end - begin)
    return where + ": " + std::to_string(end - begin) + " bytes for shape " + shape_string(t.shape) +
           " of " + type_name;
  t.data = data.subspan(begin, end - begin);
  return t;
}

} // namespace

// -- archive -------------------------------------------------------------------

struct safetensors_archive::impl {
  std::string source; ///< the path open() was given
  std::vector<std::unique_ptr<mapped_file>> files;
  std::map<std::string, tensor_view> tensors;

  /// Maps one .safetensors file and adds its tensors.
  std::optional<std::string> add_file(const std::string& path) {
    auto opened = mapped_file::open(path);
    if (auto* err = std::get_if<std::string>(&opened))
      return *err;
    auto file = std::move(std::get<std::unique_ptr<mapped_file>>(opened));
    const auto bytes = file->bytes();
    if (bytes.size() < 8)
      return path + ": file of " + std::to_string(bytes.size()) +
             " bytes is too short for a safetensors header";
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (n > bytes.size() - 8)
      return path + ": header length " + std::to_string(n) + " runs past the end of the " +
             std::to_string(bytes.size()) + "-byte file";
    const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
    bool too_deep = false;
    const json header = parse_bounded({text, static_cast<std::size_t>(n)}, too_deep, false);
    if (header.is_discarded())
      return path + ": header is not valid JSON";
    if (too_deep)
      return path + ": header nests JSON deeper than 64 levels";
    if (!header.is_object())
      return path + ": header is not a JSON object";
    const auto data = bytes.subspan(8 + n);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__")
        continue;
      auto parsed = parse_entry(path, name, entry, data);
      if (auto* err = std::get_if<std::string>(&parsed))
        return *err;
      if (tensors.count(name))
        return path + ": tensor '" + name + "' also appears in " + tensors.at(name).file;
      tensors.emplace(name, std::move(std::get<tensor_view>(parsed)));
    }
    files.push_back(std::move(file));
    return std::nullopt;
  }

  /// Reads an index JSON and maps every shard it names.
  std::optional<std::string> add_index(const std::string& path) {
    std::ifstream in{path, std::ios::binary};
    if (!in)
      return path + ": cannot open index";
    std::ostringstream text;
    text << in.rdbuf();
    bool too_deep = false;
    const std::string index_text = text.str();
    const json index = parse_bounded(index_text, too_deep, false);
    if (index.is_discarded() || too_deep || !index.is_object())
      return path + ": index is not a valid JSON object";
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      return path + ": index has no object 'weight_map'";
    const fs::path dir = fs::path{path}.parent_path();
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        return path + ": weight_map entry for tensor '" + name + "' is not a file name";
      by_shard[shard.get<std::string>()].push_back(name);
    }
    for (const auto& [shard, names] : by_shard) {
      const std::string shard_path = (dir / shard).string();
      if (auto err = add_file(shard_path))
        return path + ": shard '" + shard + "' (tensor '" + names.front() + "'): " + *err;
      for (const auto& name : names) {
        const auto it = tensors.find(name);
        if (it == tensors.end() || it->second.file != shard_path)
          return path + ": tensor '" + name + "' is mapped to shard " + shard_path +
                 ", which does not hold it";
      }
    }
    return std::nullopt;
  }
};

std::variant<safetensors_archive, std::string> safetensors_archive::open(const std::string& path) {
  try {
    std::error_code ec;
    std::string file = path;
    if (fs::is_directory(path, ec)) {
      file.clear();
      for (const char* name : {"model.safetensors.index.json", "model.safetensors", "adapter_model.safetensors"}) {
        const fs::path candidate = fs::path{path} / name;
        if (fs::exists(candidate, ec)) {
          file = candidate.string();
          break;
        }
      }
      if (file.empty())
        return path + ": no model.safetensors.index.json, model.safetensors or adapter_model.safetensors";
    }
    auto p = std::make_unique<impl>();
    p->source = file;
    const bool is_index = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
    if (auto err = is_index ? p->add_index(file) : p->add_file(file))
      return *err;
    return safetensors_archive{std::move(p)};
  } catch (const std::exception& e) {
    return path + ": cannot open safetensors: " + e.what();
  }
}

safetensors_archive::safetensors_archive(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
safetensors_archive::safetensors_archive(safetensors_archive&&) noexcept = default;
safetensors_archive& safetensors_archive::operator=(safetensors_archive&&) noexcept = default;
safetensors_archive::~safetensors_archive() = default;

const tensor_view* safetensors_archive::find(const std::string& name) const {
  const auto it = impl_->tensors.find(name);
  return it == impl_->tensors.end() ? nullptr : &it->second;
}

std::vector<std::string> safetensors_archive::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->tensors.size());
  for (const auto& [name, t] : impl_->tensors)
    out.push_back(name);
  return out;
}

std::variant<const tensor_view*, std::string>
safetensors_archive::get(const std::string& name, std::span<const std::uint64_t> shape) const {
  const tensor_view* t = find(name);
  if (!t)
    return impl_->source + ": no tensor '" + name + "'";
  if (!std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end()))
    return "tensor '" + name + "' in " + t->file + " has shape " + shape_string(t->shape) +
           ", expected " + shape_string(shape);
  return t;
}

std::variant<std::vector<float>, std::string>
safetensors_archive::read_f32(const std::string& name, std::span<const std::uint64_t> shape) const {
  try {
    auto t = get(name, shape);
    if (auto* err = std::get_if<std::string>(&t))
      return *err;
    return to_f32(*std::get<const tensor_view*>(t));
  } catch (const std::exception& e) {
    return impl_->source + ": cannot read tensor '" + name + "': " + e.what();
  }
}

std::vector<float> to_f32(const tensor_view& t) {
  const std::size_t n = t.data.size() / dtype_size(t.type);
  std::vector<float> out(n);
  const std::byte* src = t.data.data();
  switch (t.type) {
    case dtype::f32:
      if (n)
        std::memcpy(out.data(), src, n * 4);
      break;
    case dtype::f16:
    case dtype::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t v = 0;
        std::memcpy(&v, src + 2 * i, 2);
        out[i] = t.type == dtype::f16 ? half_to_float(v) : bf16_to_float(v);
      }
      break;
  }
  return out;
}

// -- writing -------------------------------------------------------------------

std::optional<std::string>
write_safetensors(const std::string& path, const std::vector<named_tensor>& tensors, dtype type,
                  const std::vector<std::pair<std::string, std::string>>& metadata) {
  try {
    std::vector<const named_tensor*> sorted;
    for (const auto& t : tensors)
      sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    json header = json::object();
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      const named_tensor& t = *sorted[i];
      if (t.name.empty() || t.name == "__metadata__")
        return path + ": invalid tensor name '" + t.name + "'";
      if (i > 0 && sorted[i - 1]->name == t.name)
        return path + ": tensor '" + t.name + "' given twice";
      const auto count = byte_count(t.shape, 1);
      if (!count || *count != t.values.size())
        return path + ": tensor '" + t.name + "' has " + std::to_string(t.values.size()) +
               " values for shape " + shape_string(t.shape);
      const std::uint64_t bytes = *count * dtype_size(type);
      header[t.name] = {{"dtype", std::string{to_string(type)}},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    if (!metadata.empty()) {
      json meta = json::object();
      for (const auto& [k, v] : metadata)
        meta[k] = v;
      header["__metadata__"] = meta;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');

    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    if (!out)
      return path + ": cannot create file";
    const std::uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<char> buf;
    for (const auto* t : sorted) {
      buf.resize(t->values.size() * dtype_size(type));
      for (std::size_t i = 0; i < t->values.size(); ++i) {
        const float v = t->values[i];
        switch (type) {
          case dtype::f32:
            std::memcpy(buf.data() + 4 * i, &v, 4);
            break;
          case dtype::f16: {
            const std::uint16_t h = float_to_half(v);
            std::memcpy(buf.data() + 2 * i, &h, 2);
            break;
          }
          case dtype::bf16: {
            const std::uint16_t b = float_to_bf16(v);
            std::memcpy(buf.data() + 2 * i, &b, 2);
            break;
          }
        }
      }
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
    out.flush();
    if (!out)
      return path + ": write failed";
    return std::nullopt;
  } catch (const std::exception& e) {
    return path + ": cannot write safetensors: " + e.what();
  }
}

} // namespace troupe::gpu
