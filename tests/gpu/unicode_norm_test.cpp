// unicode_norm: hand-checked examples of each form (UAX #15's among them);
// ill-formed bytes copied through as cuts; the fast paths' thresholds; the
// forms' invariants; and agreement with Python's unicodedata
// (tests/oracle/unicode_norm_reference.py) on every code point alone and on
// random strings of marks, Hangul, composites and compatibility characters.

#include "gpu/unicode_norm.hpp"

#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using troupe::gpu::unicode_form;
using troupe::gpu::unicode_normalize;
using json = nlohmann::json;

constexpr unicode_form all_forms[] = {unicode_form::nfc, unicode_form::nfd, unicode_form::nfkc,
                                      unicode_form::nfkd};

/// One code point as UTF-8.
std::string utf8(char32_t cp) {
  const auto cont = [cp](int shift) { return static_cast<char>(0x80 | ((cp >> shift) & 0x3F)); };
  if (cp < 0x80)
    return {static_cast<char>(cp)};
  if (cp < 0x800)
    return {static_cast<char>(0xC0 | (cp >> 6)), cont(0)};
  if (cp < 0x10000)
    return {static_cast<char>(0xE0 | (cp >> 12)), cont(6), cont(0)};
  return {static_cast<char>(0xF0 | (cp >> 18)), cont(12), cont(6), cont(0)};
}

/// For messages: the text with non-ASCII as \u escapes.
std::string shown(const std::string& s) {
  return json(s).dump(-1, ' ', true, json::error_handler_t::replace);
}

// -- hand-checked ------------------------------------------------------------

struct example {
  const char* text;
  const char* nfc;
  const char* nfd;
  const char* nfkc;
  const char* nfkd;
};

TEST(unicode_norm, hand_checked_examples) {
  const example examples[] = {
    {"", "", "", "", ""},
    {"plain ASCII", "plain ASCII", "plain ASCII", "plain ASCII", "plain ASCII"},
    {"e\u0301", "\u00e9", "e\u0301", "\u00e9", "e\u0301"},
    {"\u00e9", "\u00e9", "e\u0301", "\u00e9", "e\u0301"},
    // Hangul: one LVT syllable is three jamo and back; L V T and LV T compose.
    {"\ud55c", "\ud55c", "\u1112\u1161\u11ab", "\ud55c", "\u1112\u1161\u11ab"},
    {"\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8"},
    {"\uac00\u11a8", "\uac01", "\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8"},
    // U+11A7 is TBase itself, no trailing consonant: nothing composes.
    {"\uac00\u11a7", "\uac00\u11a7", "\u1100\u1161\u11a7", "\uac00\u11a7", "\u1100\u1161\u11a7"},
    // Singletons: ANGSTROM SIGN, a CJK compatibility ideograph.
    {"\u212b", "\u00c5", "A\u030a", "\u00c5", "A\u030a"},
    {"\uf900", "\u8c48", "\u8c48", "\u8c48", "\u8c48"},
    // Compatibility only.
    {"\ufb01", "\ufb01", "\ufb01", "fi", "fi"},
    {"\u00a0", "\u00a0", "\u00a0", " ", " "},
    {"\u2460", "\u2460", "\u2460", "1", "1"},
    {"\u320e", "\u320e", "\u320e", "(\uac00)", "(\u1100\u1161)"},
    // UAX #15's long s with dot above and dot below.
    {"\u1e9b\u0323", "\u1e9b\u0323", "\u017f\u0323\u0307", "\u1e69", "s\u0323\u0307"},
    // Reordering: below (220) before above (230), whatever the order given.
    {"a\u0323\u0302", "\u1ead", "a\u0323\u0302", "\u1ead", "a\u0323\u0302"},
    {"a\u0302\u0323", "\u1ead", "a\u0323\u0302", "\u1ead", "a\u0323\u0302"},
    {"\u1e0b\u0323", "\u1e0d\u0307", "d\u0323\u0307", "\u1e0d\u0307", "d\u0323\u0307"},
    // Equal classes keep their order.
    {"a\u0301\u0300", "\u00e1\u0300", "a\u0301\u0300", "\u00e1\u0300", "a\u0301\u0300"},
    // Blocked: the overline (230) stands between a and the acute (230).
    {"a\u0305\u0301", "a\u0305\u0301", "a\u0305\u0301", "a\u0305\u0301", "a\u0305\u0301"},
    {"a\u0301\u0301", "\u00e1\u0301", "a\u0301\u0301", "\u00e1\u0301", "a\u0301\u0301"},
    // A non-starter decomposition and a composition exclusion never compose back.
    {"\u0344", "\u0308\u0301", "\u0308\u0301", "\u0308\u0301", "\u0308\u0301"},
    {"\u0958", "\u0915\u093c", "\u0915\u093c", "\u0915\u093c", "\u0915\u093c"},
    // Two starters that compose (Oriya vowel sign O).
    {"\u0b47\u0b3e", "\u0b4b", "\u0b47\u0b3e", "\u0b4b", "\u0b47\u0b3e"},
    // Outside the BMP: musical symbols (a canonical decomposition, ccc 216).
    {"\U0001d15e", "\U0001d157\U0001d165", "\U0001d157\U0001d165", "\U0001d157\U0001d165",
     "\U0001d157\U0001d165"},
  };
  for (const example& e : examples) {
    SCOPED_TRACE(shown(e.text));
    EXPECT_EQ(shown(unicode_normalize(e.text, unicode_form::nfc)), shown(e.nfc));
    EXPECT_EQ(shown(unicode_normalize(e.text, unicode_form::nfd)), shown(e.nfd));
    EXPECT_EQ(shown(unicode_normalize(e.text, unicode_form::nfkc)), shown(e.nfkc));
    EXPECT_EQ(shown(unicode_normalize(e.text, unicode_form::nfkd)), shown(e.nfkd));
  }
}

TEST(unicode_norm, version_and_names) {
  EXPECT_EQ(troupe::gpu::unicode_norm_version(), "14.0.0");
  EXPECT_EQ(to_string(unicode_form::nfc), "nfc");
  EXPECT_EQ(to_string(unicode_form::nfkd), "nfkd");
}

TEST(unicode_norm, ill_formed_bytes_are_copied_and_cut_runs) {
  const std::string cases[] = {
    "e\xff\u0301",            // a stray byte between a letter and its accent
    "a\u0302\xff\u0323",      // no reordering across it
    "\xc0\xaf\u0301",         // overlong '/'
    "e\xed\xa0\x80\u0301",    // a surrogate (U+D800) encoded
    "e\xf4\x90\x80\x80\u0301", // past U+10FFFF
    "e\xe2\x82",              // cut short at the end
    "\xe2\x82" "e\u0301",     // cut short before more
    "\x80\xbf",               // lone continuation bytes
    "\xf8\x88\x80\x80\x80",   // five-byte form
    "\xfe\xff",
  };
  for (const std::string& text : cases) {
    SCOPED_TRACE(shown(text));
    for (const unicode_form form : all_forms) {
      std::string want = text;
      // Only what lies between the stray bytes changes.
      if (form == unicode_form::nfc || form == unicode_form::nfkc) {
        for (const auto& [from, to] : {std::pair<std::string, std::string>{"a\u0302", "\u00e2"},
                                       {"e\u0301", "\u00e9"}}) {
          if (const auto at = want.find(from); at != std::string::npos)
            want.replace(at, from.size(), to);
        }
      }
      EXPECT_EQ(shown(unicode_normalize(text, form)), shown(want)) << to_string(form);
    }
  }
}

TEST(unicode_norm, below_the_thresholds_nothing_changes_on_the_full_path_either) {
  // Each text ends in a stray byte and a mark, which sends it down the full
  // path, while the byte keeps the mark apart.
  const std::pair<unicode_form, char32_t> thresholds[] = {
    {unicode_form::nfc, 0x300}, {unicode_form::nfd, 0xC0}, {unicode_form::nfkc, 0xA0}, {unicode_form::nfkd, 0xA0}};
  for (const auto& [form, limit] : thresholds) {
    SCOPED_TRACE(to_string(form));
    // The threshold is tight: its own code point changes something.
    const std::string at = form == unicode_form::nfc ? "a\u0300" : utf8(limit);
    EXPECT_NE(unicode_normalize(at, form), at);
    int differ = 0;
    for (char32_t a = 0; a < limit; ++a) {
      for (char32_t b = 0; b < limit; ++b) {
        const std::string text = utf8(a) + utf8(b) + "\xff\u0300";
        if (unicode_normalize(text, form) != text && ++differ <= 5)
          ADD_FAILURE() << shown(text) << " changes";
        const std::string fast = utf8(a) + utf8(b);
        if (unicode_normalize(fast, form) != fast && ++differ <= 5)
          ADD_FAILURE() << shown(fast) << " changes";
      }
    }
    EXPECT_EQ(differ, 0);
  }
}

// -- random strings ------------------------------------------------------------

/// Strings of up to 12 pieces: ASCII, Latin-1, combining marks of many
/// classes, Hangul syllables and jamo (composable and not), composites,
/// exclusions and compatibility characters, and now and then any code point.
std::vector<std::string> random_strings(std::uint32_t seed, int count) {
  static const std::vector<char32_t> pool = {
    'a', 'e', 'o', 'A', 's', 'd', 'q', ' ', '1', '(',
    0xA0, 0xA8, 0xAA, 0xB2, 0xB4, 0xBD, 0xC5, 0xC7, 0xDC, 0xE9, 0xF1, 0xFC,
    0x300, 0x301, 0x302, 0x304, 0x305, 0x307, 0x308, 0x30A, 0x315, 0x31B, 0x323, 0x327, 0x328, 0x334,
    0x338, 0x340, 0x341, 0x344, 0x345, 0x35C, 0x35D, 0x5B0, 0x5B4, 0x5C1, 0x64B, 0x670, 0x93C, 0x94D,
    0xE38, 0xE48, 0xF71, 0xF72, 0xF73, 0xF74, 0xF80, 0x1DCE, 0x302A, 0x3099, 0x309A, 0x1D165, 0x1D16D,
    0xAC00, 0xAC01, 0xAC1C, 0xD55C, 0xD7A3, 0x1100, 0x1112, 0x1113, 0x1161, 0x1175, 0x1176, 0x11A7, 0x11A8,
    0x11C2, 0x11C3, 0x3131, 0x314F, 0xFFA1,
    0x1E9B, 0x1E0B, 0x1EA1, 0x01D5, 0x212B, 0x2126, 0xF900, 0xFA10, 0x0958, 0x2ADC, 0x0B47, 0x0B3E, 0x0B4B,
    0x0CC6, 0x0CC2, 0x0CD5, 0x0DD9, 0x0DCF, 0x304B, 0x304C, 0x30D8, 0x1B05, 0x1B35, 0x1D15E, 0x110A5,
    0xFB01, 0xFB03, 0x2460, 0x3200, 0x320E, 0x33A1, 0xFDFA, 0xFF21, 0xFF76, 0xFF9E, 0x1D400, 0x2168, 0x2153,
    0x1E9A, 0x0149, 0x017F, 0x1FBF, 0x1FEE, 0x1FC1, 0x03D3, 0x2FA1D, 0x3250, 0xFE8E, 0x0F77};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> length(1, 12);
  std::uniform_int_distribution<std::size_t> in_pool(0, pool.size() - 1);
  std::uniform_int_distribution<std::uint32_t> scalar(0, 0x10FFFF - 0x800); // surrogates skipped below
  std::uniform_int_distribution<std::uint32_t> syllable(0xAC00, 0xD7A3);
  const auto one = [&]() -> char32_t {
    switch (rng() % 10) {
      case 0: {
        const std::uint32_t cp = scalar(rng);
        return cp < 0xD800 ? cp : cp + 0x800;
      }
      case 1:
        return syllable(rng);
      default:
        return pool[in_pool(rng)];
    }
  };
  std::vector<std::string> out(static_cast<std::size_t>(count));
  for (std::string& s : out) {
    for (std::size_t k = length(rng); k > 0; --k)
      s += utf8(one());
  }
  return out;
}

TEST(unicode_norm, invariants_on_random_strings) {
  const auto nf = [](const std::string& s, unicode_form f) { return unicode_normalize(s, f); };
  for (const std::string& x : random_strings(7, 4000)) {
    SCOPED_TRACE(shown(x));
    const std::string nfc = nf(x, unicode_form::nfc);
    const std::string nfd = nf(x, unicode_form::nfd);
    const std::string nfkd = nf(x, unicode_form::nfkd);
    ASSERT_EQ(nf(nfd, unicode_form::nfc), nfc);
    ASSERT_EQ(nf(nfc, unicode_form::nfc), nfc);
    ASSERT_EQ(nf(nfc, unicode_form::nfd), nfd);
    ASSERT_EQ(nf(nfd, unicode_form::nfd), nfd);
    ASSERT_EQ(nf(x, unicode_form::nfkc), nf(nfkd, unicode_form::nfc));
    ASSERT_EQ(nf(nfkd, unicode_form::nfkd), nfkd);
  }
}

// -- against Python's unicodedata ------------------------------------------------

/// The words as a shell command line, each in single quotes.
std::string command_line(std::initializer_list<std::string_view> words) {
  std::string line;
  for (const std::string_view word : words) {
    line += line.empty() ? "'" : " '";
    for (const char c : word)
      line += c == '\'' ? std::string_view("'\\''") : std::string_view(&c, 1);
    line += '\'';
  }
  return line;
}

class unicode_norm_oracle : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(dir_.dir().empty()) << "no temporary directory"; }

  /// Writes `texts` for oracle() to read.
  void write_texts(const std::vector<std::string>& texts) {
    std::ofstream(in_) << json(texts).dump();
  }

  /// Python's normalization of the texts write_texts() wrote last.
  std::vector<std::string> oracle(unicode_form form) {
    const std::string cmd =
      command_line({"/usr/bin/python3", TROUPE_UNICODE_ORACLE_SCRIPT, to_string(form), in_}) + " > " +
      command_line({out_});
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "failed: " << cmd;
      return {};
    }
    std::ifstream f(out_);
    return json::parse(f).get<std::vector<std::string>>();
  }

  /// Each form of each text against Python's.
  void agree(const std::vector<std::string>& texts) {
    write_texts(texts);
    for (const unicode_form form : all_forms) {
      SCOPED_TRACE(to_string(form));
      const auto want = oracle(form);
      ASSERT_EQ(want.size(), texts.size());
      int differ = 0;
      for (std::size_t k = 0; k < texts.size(); ++k) {
        const std::string got = unicode_normalize(texts[k], form);
        if (got != want[k] && ++differ <= 10)
          ADD_FAILURE() << shown(texts[k]) << ": " << shown(got) << " but Python says " << shown(want[k]);
      }
      EXPECT_EQ(differ, 0);
    }
  }

  troupe::testing::temp_dir dir_{"troupe_unicode"};
  std::string in_ = (dir_.dir() / "texts.json").string();
  std::string out_ = (dir_.dir() / "normalized.json").string();
};

TEST_F(unicode_norm_oracle, same_unicode_version) {
  const std::string cmd =
    command_line({"/usr/bin/python3", TROUPE_UNICODE_ORACLE_SCRIPT, "--version"}) + " > " + command_line({out_});
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string version;
  std::ifstream(out_) >> version;
  EXPECT_EQ(version, troupe::gpu::unicode_norm_version())
    << "regenerate gpu/unicode_norm_data.inc with this Python (tools/gen-unicode-norm.py)";
}

TEST_F(unicode_norm_oracle, every_code_point_alone) {
  std::vector<std::string> texts;
  texts.reserve(0x110000);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp < 0xD800 || cp > 0xDFFF)
      texts.push_back(utf8(cp));
  }
  agree(texts);
}

TEST_F(unicode_norm_oracle, random_strings) {
  agree(random_strings(1, 4000));
}

} // namespace
