#include "gpu/unicode_norm.hpp"

#include <algorithm>
#include <iterator>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace troupe::gpu {

namespace {

// -- the tables (tools/gen-unicode-norm.py) --------------------------------

/// Code points first..last have canonical combining class ccc (never 0).
struct ccc_range {
  std::uint32_t first;
  std::uint32_t last;
  std::uint8_t ccc;
};

/// cp's full decomposition: decomposition_pool[offset, offset + length).
struct decomposition {
  std::uint32_t cp;
  std::uint16_t offset;
  std::uint16_t length;
};

/// The primary composite of the starter `first` followed by `second`.
struct composition {
  std::uint32_t first;
  std::uint32_t second;
  std::uint32_t composite;
};

#include "gpu/unicode_norm_data.inc"

// Runs are cut before each ASCII character (see normalizer::add): no
// composition takes one as its second, so nothing joins across it.
static_assert(std::ranges::none_of(compositions,
                                   [](const composition& c) { return c.second < 0x80; }));
static_assert(std::size(decomposition_pool) < (std::size_t{1} << 16));

// -- the forms ----------------------------------------------------------------

struct form_traits {
  std::string_view name;
  bool compat;                // compatibility decompositions too
  bool compose;               // canonical composition after
  std::uint32_t stable_below; // no text of code points below this changes
};

form_traits traits(unicode_form form) {
  switch (form) {
    case unicode_form::nfc:
      return {"nfc", false, true, nfc_stable_below};
    case unicode_form::nfd:
      return {"nfd", false, false, nfd_stable_below};
    case unicode_form::nfkc:
      return {"nfkc", true, true, nfkc_stable_below};
    case unicode_form::nfkd:
      return {"nfkd", true, false, nfkd_stable_below};
  }
  return {"?", false, false, 0};
}

// -- Hangul syllables (Unicode 3.12) ---------------------------------------

constexpr std::uint32_t s_base = 0xAC00;
constexpr std::uint32_t l_base = 0x1100;
constexpr std::uint32_t v_base = 0x1161;
constexpr std::uint32_t t_base = 0x11A7;
constexpr std::uint32_t l_count = 19;
constexpr std::uint32_t v_count = 21;
constexpr std::uint32_t t_count = 28;
constexpr std::uint32_t n_count = v_count * t_count; // 588
constexpr std::uint32_t s_count = l_count * n_count; // 11172

// -- look-ups ----------------------------------------------------------------

std::uint8_t combining_class(std::uint32_t cp) {
  if (cp < ccc_ranges[0].first)
    return 0;
  const auto it = std::partition_point(std::begin(ccc_ranges), std::end(ccc_ranges),
                                       [cp](const ccc_range& r) { return r.last < cp; });
  return it != std::end(ccc_ranges) && it->first <= cp ? it->ccc : 0;
}

/// cp's full decomposition in `table`; empty when it has none there.
std::span<const std::uint32_t> find_decomposition(std::span<const decomposition> table,
                                                  std::uint32_t cp) {
  const auto it = std::partition_point(table.begin(), table.end(),
                                       [cp](const decomposition& d) { return d.cp < cp; });
  if (it == table.end() || it->cp != cp)
    return {};
  return std::span<const std::uint32_t>(decomposition_pool).subspan(it->offset, it->length);
}

/// The primary composite of the starter a and b; 0 when there is none.
std::uint32_t composite(std::uint32_t a, std::uint32_t b) {
  // Unsigned differences: a below the base wraps past the count.
  if (a - l_base < l_count && b - v_base < v_count)
    return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
  if (a - s_base < s_count && (a - s_base) % t_count == 0 && b - (t_base + 1) < t_count - 1)
    return a + (b - t_base);
  const auto it = std::partition_point(
      std::begin(compositions), std::end(compositions),
      [a, b](const composition& c) { return std::tie(c.first, c.second) < std::tie(a, b); });
  return it != std::end(compositions) && it->first == a && it->second == b ? it->composite : 0;
}

// -- UTF-8 -------------------------------------------------------------------

struct utf8_char {
  std::uint32_t cp = 0;
  std::size_t length = 0; // 0: s[i] starts no well-formed character
};

/// The character at s[i] by Unicode's table of well-formed byte sequences
/// (3-7): no overlong forms, surrogates, values past U+10FFFF or cut ones.
utf8_char decode_at(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) -> std::uint32_t {
    return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; // 0 past the end: no continuation
  };
  const std::uint32_t lead = byte(i);
  if (lead < 0x80)
    return {lead, 1};
  std::size_t n = 0;
  std::uint32_t lo = 0x80; // the second byte's bounds
  std::uint32_t hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    lo = lead == 0xE0 ? 0xA0 : lo;
    hi = lead == 0xED ? 0x9F : hi;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    lo = lead == 0xF0 ? 0x90 : lo;
    hi = lead == 0xF4 ? 0x8F : hi;
  } else {
    return {};
  }
  std::uint32_t cp = lead & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) {
    const std::uint32_t b = byte(i + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
      return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, n};
}

/// Whether every well-formed character of `text` is below `limit`.
bool all_below(std::string_view text, std::uint32_t limit) {
  for (std::size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const utf8_char c = decode_at(text, i);
    if (c.length != 0 && c.cp >= limit)
      return false;
    i += std::max<std::size_t>(c.length, 1);
  }
  return true;
}

// -- the algorithm -------------------------------------------------------------

/// Decomposes characters into a buffer, then at each cut orders, composes
/// and writes them out. Each buffer entry holds its combining class above
/// the code point.
class normalizer {
public:
  normalizer(const form_traits& form, std::size_t size_hint)
      : compat_(form.compat), compose_(form.compose) {
    out_.reserve(size_hint + size_hint / 8);
  }

  /// A well-formed character; an ASCII one first cuts the run (the
  /// static_assert above: nothing before it changes with what follows).
  void add(std::uint32_t cp) {
    if (cp < 0x80)
      flush();
    decompose(cp);
  }

  /// A byte that is not well-formed UTF-8: copied, and a cut.
  void add_stray(char byte) {
    flush();
    out_.push_back(byte);
  }

  std::string take() && {
    flush();
    return std::move(out_);
  }

private:
  static constexpr int ccc_shift = 24;
  static constexpr std::uint32_t cp_mask = (std::uint32_t{1} << ccc_shift) - 1;

  void push(std::uint32_t cp) {
    buf_.push_back((std::uint32_t{combining_class(cp)} << ccc_shift) | cp);
  }

  void decompose(std::uint32_t cp) {
    // Below the decomposing forms' thresholds: no decomposition, class 0.
    if (cp < (compat_ ? nfkd_stable_below : nfd_stable_below)) {
      buf_.push_back(cp);
      return;
    }
    if (cp - s_base < s_count) {
      const std::uint32_t s = cp - s_base;
      buf_.push_back(l_base + s / n_count);
      buf_.push_back(v_base + s % n_count / t_count);
      if (s % t_count != 0)
        buf_.push_back(t_base + s % t_count);
      return;
    }
    std::span<const std::uint32_t> d;
    if (compat_)
      d = find_decomposition(compatibility_decompositions, cp);
    if (d.empty())
      d = find_decomposition(canonical_decompositions, cp);
    if (d.empty())
      push(cp);
    for (const std::uint32_t c : d)
      push(c);
  }

  /// Canonical ordering: each run of non-starters sorted by class, stably.
  void reorder() {
    const auto by_class = [](std::uint32_t x, std::uint32_t y) {
      return (x >> ccc_shift) < (y >> ccc_shift);
    };
    const auto starter = [](std::uint32_t x) { return (x >> ccc_shift) == 0; };
    for (auto it = buf_.begin(); it != buf_.end();) {
      const auto first = std::find_if_not(it, buf_.end(), starter);
      it = std::find_if(first, buf_.end(), starter);
      if (!std::is_sorted(first, it, by_class))
        std::stable_sort(first, it, by_class);
    }
  }

  /// Canonical composition: each character joins the last starter unless
  /// blocked, that is unless a character between them has a class of 0 or
  /// at least its own. Those between are non-starters in class order, so
  /// the last one kept decides.
  void compose() {
    constexpr std::size_t none = ~std::size_t{0};
    std::size_t starter = none;
    std::uint32_t last_class = 0;
    std::size_t kept = 0;
    for (std::size_t r = 0; r < buf_.size(); ++r) {
      const std::uint32_t c = buf_[r];
      const std::uint32_t cls = c >> ccc_shift;
      if (starter != none && (kept == starter + 1 || last_class < cls)) {
        // Primary composites are starters (the generator checks).
        if (const std::uint32_t k = composite(buf_[starter] & cp_mask, c & cp_mask); k != 0) {
          buf_[starter] = k;
          continue;
        }
      }
      if (cls == 0)
        starter = kept;
      last_class = cls;
      buf_[kept++] = c;
    }
    buf_.resize(kept);
  }

  void emit(std::uint32_t cp) {
    if (cp < 0x80) {
      out_.push_back(static_cast<char>(cp));
      return;
    }
    const int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    constexpr unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    out_.push_back(static_cast<char>(lead[n] | (cp >> (6 * (n - 1)))));
    for (int k = n - 2; k >= 0; --k)
      out_.push_back(static_cast<char>(0x80 | ((cp >> (6 * k)) & 0x3F)));
  }

  void flush() {
    if (buf_.empty())
      return;
    reorder();
    if (compose_)
      compose();
    for (const std::uint32_t c : buf_)
      emit(c & cp_mask);
    buf_.clear();
  }

  bool compat_;
  bool compose_;
  std::vector<std::uint32_t> buf_;
  std::string out_;
};

} // namespace

std::string_view to_string(unicode_form form) noexcept {
  return traits(form).name;
}

std::string unicode_normalize(std::string_view text, unicode_form form) {
  const form_traits t = traits(form);
  if (all_below(text, t.stable_below))
    return std::string(text);
  normalizer n(t, text.size());
  for (std::size_t i = 0; i < text.size();) {
    const utf8_char c = decode_at(text, i);
    if (c.length == 0) {
      n.add_stray(text[i++]);
      continue;
    }
    n.add(c.cp);
    i += c.length;
  }
  return std::move(n).take();
}

std::string_view unicode_norm_version() noexcept {
  return unicode_version;
}

} // namespace troupe::gpu
