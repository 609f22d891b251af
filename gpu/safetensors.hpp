// Reading and writing the safetensors format: one file, or a set of shards
// named by model.safetensors.index.json; F32, F16 and BF16; files are
// memory-mapped. Used by the Llama and PEFT loaders and by troupe-mkmodel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace troupe::gpu {

enum class dtype : std::uint8_t { f32, f16, bf16 };

/// "F32", "F16", "BF16".
std::string_view to_string(dtype x) noexcept;
/// Bytes of one element: 4 or 2.
std::size_t dtype_size(dtype x) noexcept;

/// A tensor inside a mapped file; valid while its archive lives.
struct tensor_view {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> data;
  std::string file; ///< the file it lives in, for error messages
};

/// Read-only, memory-mapped tensors of one model or adapter.
class safetensors_archive {
public:
  /// `path` is a .safetensors file, a model.safetensors.index.json, or a
  /// directory holding one of those (index first). Errors name the file.
  static std::variant<safetensors_archive, std::string> open(const std::string& path);

  safetensors_archive(safetensors_archive&&) noexcept;
  safetensors_archive& operator=(safetensors_archive&&) noexcept;
  ~safetensors_archive();

  /// The tensor called `name`, or nullptr.
  const tensor_view* find(const std::string& name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;

  /// Tensor `name` after checking that its shape is `shape`; the error
  /// names the file and the tensor (missing, wrong shape).
  std::variant<const tensor_view*, std::string> get(const std::string& name,
                                                    std::span<const std::uint64_t> shape) const;
  /// get(name, shape), converted to fp32 (to_f32).
  std::variant<std::vector<float>, std::string>
  read_f32(const std::string& name, std::span<const std::uint64_t> shape) const;

  struct impl;

private:
  explicit safetensors_archive(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The values of `t` as fp32 (exact from F16 and BF16).
std::vector<float> to_f32(const tensor_view& t);

/// A tensor to write.
struct named_tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values; ///< row-major, converted to `type` on write
};

/// Writes one safetensors file (with optional __metadata__ pairs); an error
/// message on failure.
std::optional<std::string>
write_safetensors(const std::string& path, const std::vector<named_tensor>& tensors, dtype type,
                  const std::vector<std::pair<std::string, std::string>>& metadata = {});

} // namespace troupe::gpu
