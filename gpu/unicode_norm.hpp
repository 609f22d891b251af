// unicode_norm: Unicode normalization (UAX #15: NFC, NFD, NFKC, NFKD) of
// UTF-8 text, dependency-free, from tables generated out of Python's
// unicodedata (tools/gen-unicode-norm.py writes gpu/unicode_norm_data.inc).
// For tokenizer.json's normalizers, as Hugging Face's tokenizers applies them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::gpu {

/// The four normalization forms of UAX #15.
enum class unicode_form : std::uint8_t { nfc, nfd, nfkc, nfkd };

/// "nfc", "nfd", "nfkc" or "nfkd".
std::string_view to_string(unicode_form form) noexcept;

/// The text in that normalization form (UAX #15). Bytes that are not part of
/// well-formed UTF-8 are copied through unchanged and end a run: nothing
/// reorders or composes across them. Any thread; it keeps no state.
std::string unicode_normalize(std::string_view text, unicode_form form);

/// The Unicode version of the tables ("14.0.0").
std::string_view unicode_norm_version() noexcept;

} // namespace troupe::gpu
