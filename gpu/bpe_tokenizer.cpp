#include "gpu/bpe_tokenizer.hpp"

#include "gpu/added_tokens.hpp"

#include "gpu/json_bounded.hpp"
#include "gpu/unicode_norm.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace troupe::gpu {

namespace {

using json = nlohmann::json;

/// Ids above this are refused: a hostile file must not size the tables.
constexpr std::int64_t max_token_id = max_added_token_id;

/// GPT-2's pre-tokenizer pattern, which ByteLevel applies when use_regex.
constexpr std::string_view gpt2_pattern =
  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// -- UTF-8 ---------------------------------------------------------------

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

/// Calls run(piece) for each longest run of well-formed UTF-8 in `text` and
/// stray(byte) for each byte outside one, in order.
template <class Run, class Stray>
void for_each_utf8_run(std::string_view text, Run&& run, Stray&& stray) {
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    std::uint32_t cp = 0;
    while (j < text.size()) {
      const std::size_t n = utf8_char(text, j, cp);
      if (n == 0)
        break;
      j += n;
    }
    if (j > i)
      run(text.substr(i, j - i));
    if (j < text.size())
      stray(static_cast<unsigned char>(text[j++]));
    i = j;
  }
}

// -- GPT-2's byte alphabet -------------------------------------------------

/// Each byte as a printable character: the printable Latin-1 bytes stand
/// for themselves, the others for U+0100 onwards in byte order.
struct byte_alphabet {
  std::array<std::string, 256> symbol;
  std::unordered_map<std::uint32_t, unsigned char> byte_of;

  byte_alphabet() {
    std::uint32_t extra = 0;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const std::uint32_t cp = printable ? b : 256 + extra++;
      symbol[b] = utf8(cp);
      byte_of.emplace(cp, static_cast<unsigned char>(b));
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

std::string to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes)
    out += alphabet().symbol[static_cast<unsigned char>(c)];
  return out;
}

/// A vocabulary entry's bytes: each character through the alphabet back to
/// its byte (a character outside it stays as its UTF-8).
std::string from_symbols(std::string_view token) {
  std::string out;
  std::size_t i = 0;
  while (i < token.size()) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_char(token, i, cp);
    if (n == 0) {
      out.push_back(token[i++]);
      continue;
    }
    if (auto it = alphabet().byte_of.find(cp); it != alphabet().byte_of.end())
      out.push_back(static_cast<char>(it->second));
    else
      out.append(token.substr(i, n));
    i += n;
  }
  return out;
}

// -- regular expressions ---------------------------------------------------

struct code_deleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};

/// A compiled pattern (UTF, Unicode properties), shared by copies.
class regex {
public:
  static std::variant<regex, std::string> compile(std::string_view pattern, bool literal) {
    int err = 0;
    PCRE2_SIZE at = 0;
    // PCRE2_LITERAL takes no Unicode-property option (a literal needs none).
    const std::uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts,
                                  &err, &at, nullptr);
    if (c == nullptr) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      return "pattern does not compile at offset " + std::to_string(at) + ": " +
             reinterpret_cast<const char*>(msg.data());
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); // interpreted where JIT is unavailable
    regex r;
    r.code_ = std::shared_ptr<pcre2_code>(c, code_deleter{});
    return r;
  }

  /// The non-empty matches in `s` (well-formed UTF-8), left to right.
  void matches(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_.get(), nullptr);
    if (md == nullptr)
      return;
    std::size_t off = 0;
    while (off < s.size()) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), off,
                                 PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0)
        break; // no match, or a limit reached: the rest is one gap
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] > ov[0]) {
        out.emplace_back(ov[0], ov[1]);
        off = ov[1];
      } else {
        std::uint32_t cp = 0;
        off = ov[1] + std::max<std::size_t>(1, utf8_char(s, ov[1], cp));
      }
    }
    pcre2_match_data_free(md);
  }

private:
  std::shared_ptr<pcre2_code> code_;
};

// -- pre-tokenizer steps -----------------------------------------------------

enum class split_behavior : std::uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct split_step {
  regex re;
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;
};

struct byte_level_step {
  bool add_prefix_space = false;
  std::optional<regex> re; ///< GPT-2's pattern when use_regex
};

using pre_step = std::variant<split_step, byte_level_step>;

struct segment {
  std::size_t begin;
  std::size_t end;
  bool match;
};

/// Cuts `piece` as Hugging Face's Split does: matches and the gaps between
/// them, then merged by the behavior; empty pieces are dropped.
void split_piece(const split_step& step, const std::string& piece, std::vector<std::string>& out) {
  std::vector<std::pair<std::size_t, std::size_t>> found;
  step.re.matches(piece, found);
  std::vector<segment> segs;
  std::size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (b > prev)
      segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev < piece.size())
    segs.push_back({prev, piece.size(), false});
  if (step.invert)
    for (auto& s : segs)
      s.match = !s.match;
  std::vector<segment> merged;
  switch (step.behavior) {
    case split_behavior::removed:
      for (const auto& s : segs)
        if (!s.match)
          merged.push_back(s);
      break;
    case split_behavior::isolated:
      merged = segs;
      break;
    case split_behavior::merged_with_previous: {
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match && !previous_match && !merged.empty())
          merged.back().end = s.end;
        else
          merged.push_back(s);
        previous_match = s.match;
      }
      break;
    }
    case split_behavior::merged_with_next: {
      bool next_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !next_match && !merged.empty())
          merged.back().begin = it->begin;
        else
          merged.push_back(*it);
        next_match = it->match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case split_behavior::contiguous: {
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match == previous_match && !merged.empty())
          merged.back().end = s.end;
        else
          merged.push_back(s);
        previous_match = s.match;
      }
      break;
    }
  }
  for (const auto& s : merged)
    if (s.end > s.begin)
      out.push_back(piece.substr(s.begin, s.end - s.begin));
}

std::optional<split_behavior> behavior_named(std::string_view name) {
  if (name == "Removed")
    return split_behavior::removed;
  if (name == "Isolated")
    return split_behavior::isolated;
  if (name == "MergedWithPrevious")
    return split_behavior::merged_with_previous;
  if (name == "MergedWithNext")
    return split_behavior::merged_with_next;
  if (name == "Contiguous")
    return split_behavior::contiguous;
  return std::nullopt;
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

/// Reads parts of the file and keeps the first error, naming the part.
class reader {
public:
  explicit reader(std::string source) : source_(std::move(source)) {}

  void fail(const std::string& where, const std::string& what) {
    if (error_.empty())
      error_ = source_ + ": " + where + ": " + what;
  }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

  const json* object(const json& parent, const char* key, const std::string& where) {
    if (!parent.contains(key) || parent.at(key).is_null())
      return nullptr;
    const json& v = parent.at(key);
    if (!v.is_object()) {
      fail(where, "must be an object or null, got " + std::string{v.type_name()});
      return nullptr;
    }
    return &v;
  }
  std::string string(const json& parent, const char* key, const std::string& where, std::string fallback = {}) {
    if (!parent.contains(key) || parent.at(key).is_null())
      return fallback;
    const json& v = parent.at(key);
    if (!v.is_string()) {
      fail(where + "." + key, "must be a string, got " + std::string{v.type_name()});
      return fallback;
    }
    return v.get<std::string>();
  }
  bool boolean(const json& parent, const char* key, const std::string& where, bool fallback) {
    if (!parent.contains(key) || parent.at(key).is_null())
      return fallback;
    const json& v = parent.at(key);
    if (!v.is_boolean()) {
      fail(where + "." + key, "must be true or false, got " + std::string{v.type_name()});
      return fallback;
    }
    return v.get<bool>();
  }
  std::int32_t id(const json& v, const std::string& where) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > max_token_id) {
      fail(where, "must be a token id in 0.." + std::to_string(max_token_id) + ", got " + v.dump());
      return -1;
    }
    return static_cast<std::int32_t>(v.get<std::int64_t>());
  }

private:
  std::string source_;
  std::string error_;
};

} // namespace

// -- the tokenizer -------------------------------------------------------------

struct bpe_tokenizer::impl {
  std::unordered_map<std::string, std::int32_t> vocab;    ///< symbol string -> id
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::int32_t>> merges; ///< pair -> rank, id
  std::array<std::int32_t, 256> byte_id{};                ///< each byte's symbol
  bool ignore_merges = false;
  std::vector<pre_step> steps;
  added_vocabulary added;
  std::vector<unicode_form> normalizers; ///< applied in order
  std::unordered_map<std::string, std::int32_t> added_ids;
  std::vector<std::string> text_of;                       ///< id -> decoded bytes
  std::unordered_map<std::int32_t, std::string> special_of; ///< special added token id -> content
  std::vector<std::int32_t> prefix;
  std::vector<std::int32_t> suffix;

  /// The ids of one pre-tokenized piece (raw bytes).
  void encode_word(std::string_view bytes, std::vector<std::int32_t>& out) const {
    if (bytes.empty())
      return;
    if (ignore_merges) {
      if (auto it = vocab.find(to_symbols(bytes)); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    struct symbol {
      std::int32_t id;
      std::int32_t prev;
      std::int32_t next;
      bool alive;
    };
    std::vector<symbol> syms(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i)
      syms[i] = {byte_id[static_cast<unsigned char>(bytes[i])], static_cast<std::int32_t>(i) - 1,
                 i + 1 < bytes.size() ? static_cast<std::int32_t>(i + 1) : -1, true};
    struct candidate {
      std::uint32_t rank;
      std::int32_t pos;
      std::int32_t left;
      std::int32_t right;
      std::int32_t merged;
      bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
    const auto offer = [&](std::int32_t pos) {
      if (pos < 0)
        return;
      const std::int32_t next = syms[static_cast<std::size_t>(pos)].next;
      if (next < 0)
        return;
      const auto l = syms[static_cast<std::size_t>(pos)].id;
      const auto r = syms[static_cast<std::size_t>(next)].id;
      if (auto it = merges.find(pair_key(l, r)); it != merges.end())
        heap.push({it->second.first, pos, l, r, it->second.second});
    };
    for (std::size_t i = 0; i + 1 < syms.size(); ++i)
      offer(static_cast<std::int32_t>(i));
    while (!heap.empty()) {
      const candidate c = heap.top();
      heap.pop();
      auto& s = syms[static_cast<std::size_t>(c.pos)];
      if (!s.alive || s.id != c.left || s.next < 0 || syms[static_cast<std::size_t>(s.next)].id != c.right)
        continue; // stale: one side has merged since
      auto& r = syms[static_cast<std::size_t>(s.next)];
      r.alive = false;
      s.id = c.merged;
      s.next = r.next;
      if (r.next >= 0)
        syms[static_cast<std::size_t>(r.next)].prev = c.pos;
      offer(s.prev);
      offer(c.pos);
    }
    for (std::int32_t i = 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next)
      out.push_back(syms[static_cast<std::size_t>(i)].id);
  }

  /// Pre-tokenizes and encodes text that holds no added token.
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
    // Runs of well-formed UTF-8 go through the steps; a byte that is not
    // part of a character is a piece of its own.
    std::vector<std::string> pieces, next;
    const auto run = [&](std::string_view valid) {
      pieces.assign(1, std::string{valid});
      for (const auto& step : steps) {
        next.clear();
        if (const auto* sp = std::get_if<split_step>(&step)) {
          for (const auto& p : pieces)
            split_piece(*sp, p, next);
        } else {
          const auto& bl = std::get<byte_level_step>(step);
          for (auto& p : pieces) {
            if (bl.add_prefix_space && p.front() != ' ')
              p.insert(p.begin(), ' ');
            if (bl.re)
              split_piece(split_step{*bl.re, split_behavior::isolated, false}, p, next);
            else
              next.push_back(std::move(p));
          }
        }
        pieces.swap(next);
      }
      for (const auto& p : pieces)
        encode_word(p, out);
    };
    for_each_utf8_run(text, run, [&](unsigned char b) { out.push_back(byte_id[b]); });
  }

  /// The text through every normalizer.
  std::string normalize(std::string_view text) const {
    std::string s{text};
    for (const unicode_form f : normalizers)
      s = unicode_normalize(s, f);
    return s;
  }
};

bpe_tokenizer::bpe_tokenizer(std::unique_ptr<impl> p, std::int32_t eos_id)
  : impl_(std::move(p)), eos_id_(eos_id) {}

bpe_tokenizer::~bpe_tokenizer() = default;

std::vector<std::int32_t> bpe_tokenizer::encode(const std::string& text) const {
  const impl& m = *impl_;
  std::vector<std::int32_t> out = m.prefix;
  // As Hugging Face's tokenizers: the tokens that are not normalized are cut
  // out of the raw text; each piece between them is normalized, and the
  // normalized tokens are cut out of it; what is left is pre-tokenized.
  m.added.split(text, 0, out, [&](std::string_view piece) {
    if (m.normalizers.empty() && !m.added.any_normalized()) {
      m.encode_text(piece, out);
      return;
    }
    const std::string normalized = m.normalize(piece);
    if (m.added.any_normalized())
      m.added.split(normalized, 1, out, [&](std::string_view rest) { m.encode_text(rest, out); });
    else
      m.encode_text(normalized, out);
  });
  out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

std::string bpe_tokenizer::decode(std::int32_t token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= impl_->text_of.size())
    return {};
  return impl_->text_of[static_cast<std::size_t>(token)];
}

std::string bpe_tokenizer::special_text(std::int32_t token) const {
  const auto i = impl_->special_of.find(token);
  return i == impl_->special_of.end() ? std::string{} : i->second;
}

std::int32_t bpe_tokenizer::vocab_size() const {
  return static_cast<std::int32_t>(impl_->text_of.size());
}

const std::vector<std::int32_t>& bpe_tokenizer::prefix() const noexcept {
  return impl_->prefix;
}

const std::vector<std::int32_t>& bpe_tokenizer::suffix() const noexcept {
  return impl_->suffix;
}

std::int32_t bpe_tokenizer::find(std::string_view content) const {
  if (auto it = impl_->added_ids.find(std::string{content}); it != impl_->added_ids.end())
    return it->second;
  if (auto it = impl_->vocab.find(to_symbols(content)); it != impl_->vocab.end())
    return it->second;
  return -1;
}

// -- reading tokenizer.json ---------------------------------------------------

namespace {

void read_pre_step(reader& in, const json& step, const std::string& where, std::vector<pre_step>& out,
                   bool& has_byte_level) {
  if (!step.is_object()) {
    in.fail(where, "must be an object, got " + std::string{step.type_name()});
    return;
  }
  const std::string type = in.string(step, "type", where);
  if (has_byte_level && !in.failed()) {
    in.fail(where, "a " + type + " step after ByteLevel is not supported (ByteLevel must come last)");
    return;
  }
  if (type == "Sequence") {
    if (!step.contains("pretokenizers") || !step.at("pretokenizers").is_array()) {
      in.fail(where + ".pretokenizers", "must be a list");
      return;
    }
    const json& list = step.at("pretokenizers");
    for (std::size_t k = 0; k < list.size(); ++k)
      read_pre_step(in, list[k], where + ".pretokenizers[" + std::to_string(k) + "]", out, has_byte_level);
  } else if (type == "ByteLevel") {
    byte_level_step b;
    b.add_prefix_space = in.boolean(step, "add_prefix_space", where, false);
    if (in.boolean(step, "use_regex", where, true))
      b.re = std::get<regex>(regex::compile(gpt2_pattern, false));
    out.emplace_back(std::move(b));
    has_byte_level = true;
  } else if (type == "Split") {
    split_step s;
    const json* pattern = in.object(step, "pattern", where);
    if (pattern == nullptr) {
      in.fail(where + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
      return;
    }
    const bool literal = pattern->contains("String");
    const std::string text = in.string(*pattern, literal ? "String" : "Regex", where + ".pattern");
    if (!literal && !pattern->contains("Regex")) {
      in.fail(where + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
      return;
    }
    auto re = regex::compile(text, literal);
    if (auto* err = std::get_if<std::string>(&re)) {
      in.fail(where + ".pattern", *err);
      return;
    }
    s.re = std::get<regex>(std::move(re));
    const std::string behavior = in.string(step, "behavior", where, "Isolated");
    if (const auto b = behavior_named(behavior))
      s.behavior = *b;
    else
      in.fail(where + ".behavior", "is \"" + behavior +
                                     "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
    s.invert = in.boolean(step, "invert", where, false);
    out.emplace_back(std::move(s));
  } else if (type == "Digits") {
    const bool individual = in.boolean(step, "individual_digits", where, false);
    out.emplace_back(split_step{std::get<regex>(regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)", false)),
                                split_behavior::isolated, false});
  } else if (!in.failed()) {
    in.fail(where, "pre-tokenizer \"" + type + "\" is not supported (ByteLevel, Split, Digits, Sequence are)");
  }
}

void read_normalizer(reader& in, const json& step, const std::string& where, std::vector<unicode_form>& out) {
  if (!step.is_object()) {
    in.fail(where, "must be an object or null, got " + std::string{step.type_name()});
    return;
  }
  const std::string type = in.string(step, "type", where);
  if (type == "Sequence") {
    if (!step.contains("normalizers") || !step.at("normalizers").is_array()) {
      in.fail(where + ".normalizers", "must be a list");
      return;
    }
    const json& list = step.at("normalizers");
    for (std::size_t k = 0; k < list.size(); ++k)
      read_normalizer(in, list[k], where + ".normalizers[" + std::to_string(k) + "]", out);
  } else if (type == "NFC") {
    out.push_back(unicode_form::nfc);
  } else if (type == "NFD") {
    out.push_back(unicode_form::nfd);
  } else if (type == "NFKC") {
    out.push_back(unicode_form::nfkc);
  } else if (type == "NFKD") {
    out.push_back(unicode_form::nfkd);
  } else if (!in.failed()) {
    in.fail(where, "normalizer \"" + type + "\" is not supported (NFC, NFD, NFKC, NFKD, Sequence are)");
  }
}

void read_post_step(reader& in, const json& step, const std::string& where, bpe_tokenizer::impl& m,
                    bool& has_template) {
  if (!step.is_object()) {
    in.fail(where, "must be an object, got " + std::string{step.type_name()});
    return;
  }
  const std::string type = in.string(step, "type", where);
  if (type == "ByteLevel")
    return; // only offsets, which Troupe does not report
  if (type == "Sequence") {
    if (!step.contains("processors") || !step.at("processors").is_array()) {
      in.fail(where + ".processors", "must be a list");
      return;
    }
    const json& list = step.at("processors");
    for (std::size_t k = 0; k < list.size(); ++k)
      read_post_step(in, list[k], where + ".processors[" + std::to_string(k) + "]", m, has_template);
    return;
  }
  if (type != "TemplateProcessing") {
    if (!in.failed())
      in.fail(where, "post-processor \"" + type + "\" is not supported (TemplateProcessing, ByteLevel, Sequence are)");
    return;
  }
  if (has_template) {
    in.fail(where, "more than one TemplateProcessing");
    return;
  }
  has_template = true;
  if (!step.contains("single") || !step.at("single").is_array()) {
    in.fail(where + ".single", "must be a list");
    return;
  }
  const json* specials = in.object(step, "special_tokens", where);
  bool after = false;
  const json& single = step.at("single");
  for (std::size_t k = 0; k < single.size(); ++k) {
    const std::string at = where + ".single[" + std::to_string(k) + "]";
    const json& item = single[k];
    if (item.is_object() && item.contains("Sequence")) {
      if (after)
        in.fail(at, "a second sequence in a single-text template");
      after = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") || !item.at("SpecialToken").is_object()) {
      in.fail(at, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      return;
    }
    const std::string name = in.string(item.at("SpecialToken"), "id", at + ".SpecialToken");
    if (specials == nullptr || !specials->contains(name) || !specials->at(name).is_object() ||
        !specials->at(name).contains("ids") || !specials->at(name).at("ids").is_array()) {
      in.fail(at, "special token \"" + name + "\" has no ids in special_tokens");
      return;
    }
    for (const json& v : specials->at(name).at("ids")) {
      const std::int32_t id = in.id(v, where + ".special_tokens." + name);
      (after ? m.suffix : m.prefix).push_back(id);
    }
  }
  if (!after)
    in.fail(where + ".single", "has no {\"Sequence\": {\"id\": \"A\"}}");
}

} // namespace

std::variant<std::unique_ptr<bpe_tokenizer>, std::string>
bpe_tokenizer::parse(std::string_view json_text, const std::string& source, std::int32_t eos_id) {
  bool too_deep = false;
  const json doc = detail::parse_bounded(json_text, too_deep, false);
  if (doc.is_discarded())
    return source + ": not valid JSON";
  if (too_deep)
    return source + ": nested deeper than " + std::to_string(detail::max_json_depth) + " levels";
  if (!doc.is_object())
    return source + ": expected a JSON object at the top level, got " + std::string{doc.type_name()};

  reader in{source};
  auto m = std::make_unique<impl>();

  // model
  const json* model = in.object(doc, "model", "model");
  if (model == nullptr)
    return in.failed() ? in.error() : source + ": model: missing";
  if (const auto type = in.string(*model, "type", "model", "BPE"); type != "BPE")
    return source + ": model.type: \"" + type + "\" is not supported (only byte-level BPE is)";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!in.string(*model, key, "model").empty())
      in.fail(std::string{"model."} + key, "is not supported (byte-level BPE has none)");
  if (model->contains("dropout") && !model->at("dropout").is_null() &&
      !(model->at("dropout").is_number() && model->at("dropout").get<double>() == 0.0))
    in.fail("model.dropout", "is not supported at inference (must be null)");
  m->ignore_merges = in.boolean(*model, "ignore_merges", "model", false);
  if (in.failed())
    return in.error();

  std::int64_t max_id = -1;
  if (!model->contains("vocab") || !model->at("vocab").is_object())
    return source + ": model.vocab: must be an object of token to id";
  std::vector<std::string> token_of; // id -> symbol string, for merges
  for (const auto& [token, v] : model->at("vocab").items()) {
    const std::int32_t id = in.id(v, "model.vocab[\"" + token + "\"]");
    if (in.failed())
      return in.error();
    if (static_cast<std::size_t>(id) >= token_of.size())
      token_of.resize(static_cast<std::size_t>(id) + 1);
    if (!token_of[static_cast<std::size_t>(id)].empty())
      return source + ": model.vocab: id " + std::to_string(id) + " is given to \"" +
             token_of[static_cast<std::size_t>(id)] + "\" and \"" + token + "\"";
    if (token.empty())
      return source + ": model.vocab: an empty token";
    token_of[static_cast<std::size_t>(id)] = token;
    m->vocab.emplace(token, id);
    max_id = std::max<std::int64_t>(max_id, id);
  }
  for (std::size_t b = 0; b < 256; ++b) {
    auto it = m->vocab.find(alphabet().symbol[b]);
    if (it == m->vocab.end()) {
      std::ostringstream hex;
      hex << std::hex << b;
      return source + ": model.vocab: no symbol for byte 0x" + hex.str() + " (\"" + alphabet().symbol[b] +
             "\"): not a byte-level vocabulary";
    }
    m->byte_id[b] = it->second;
  }

  if (!model->contains("merges") || !model->at("merges").is_array())
    return source + ": model.merges: must be a list";
  const json& merges = model->at("merges");
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const std::string where = "model.merges[" + std::to_string(k) + "]";
    std::string a, b;
    const json& e = merges[k];
    if (e.is_string()) {
      const auto text = e.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        return source + ": " + where + ": \"" + text + "\" is not two tokens separated by one space";
      a = text.substr(0, space);
      b = text.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return source + ": " + where + ": must be \"a b\" or [\"a\", \"b\"]";
    }
    const auto ia = m->vocab.find(a), ib = m->vocab.find(b), iab = m->vocab.find(a + b);
    if (ia == m->vocab.end() || ib == m->vocab.end())
      return source + ": " + where + ": \"" + (ia == m->vocab.end() ? a : b) + "\" is not in the vocabulary";
    if (iab == m->vocab.end())
      return source + ": " + where + ": the merge makes \"" + a + b + "\", which is not in the vocabulary";
    // As Hugging Face builds its table, a later duplicate takes the rank.
    m->merges[pair_key(ia->second, ib->second)] = {static_cast<std::uint32_t>(k), iab->second};
  }

  // added tokens
  std::vector<added_token> added;
  if (doc.contains("added_tokens") && !doc.at("added_tokens").is_null()) {
    auto read = read_added_tokens(doc.at("added_tokens"), source);
    if (auto* err = std::get_if<std::string>(&read))
      return *err;
    added = std::move(std::get<std::vector<added_token>>(read));
    for (const auto& a : added) {
      m->added_ids.emplace(a.content, a.id);
      max_id = std::max<std::int64_t>(max_id, a.id);
    }
  }
  // normalizer
  if (doc.contains("normalizer") && !doc.at("normalizer").is_null())
    read_normalizer(in, doc.at("normalizer"), "normalizer", m->normalizers);
  if (in.failed())
    return in.error();

  // A normalized token is found in the normalized text, so by its content
  // normalized (Hugging Face's normalized trie).
  for (auto& a : added) {
    a.match = a.normalized ? m->normalize(a.content) : a.content;
    if (a.match.empty())
      return source + ": added token \"" + a.content + "\": normalizes to nothing";
  }
  m->added = added_vocabulary{std::move(added)};

  // pre-tokenizer
  bool has_byte_level = false;
  if (doc.contains("pre_tokenizer") && !doc.at("pre_tokenizer").is_null())
    read_pre_step(in, doc.at("pre_tokenizer"), "pre_tokenizer", m->steps, has_byte_level);
  if (in.failed())
    return in.error();
  if (!has_byte_level)
    return source + ": pre_tokenizer: has no ByteLevel step (only byte-level BPE is supported)";

  // post-processor
  bool has_template = false;
  if (doc.contains("post_processor") && !doc.at("post_processor").is_null())
    read_post_step(in, doc.at("post_processor"), "post_processor", *m, has_template);
  if (in.failed())
    return in.error();

  // decoder
  if (doc.contains("decoder") && !doc.at("decoder").is_null()) {
    const json& d = doc.at("decoder");
    bool byte_level = d.is_object() && d.value("type", "") == "ByteLevel";
    if (d.is_object() && d.value("type", "") == "Sequence" && d.contains("decoders") && d.at("decoders").is_array()) {
      byte_level = !d.at("decoders").empty();
      for (const json& s : d.at("decoders"))
        byte_level = byte_level && s.is_object() && s.value("type", "") == "ByteLevel";
    }
    if (!byte_level)
      return source + ": decoder: only ByteLevel is supported";
  } else {
    return source + ": decoder: missing (a byte-level tokenizer needs ByteLevel)";
  }

  // id -> text
  m->text_of.assign(static_cast<std::size_t>(max_id + 1), std::string{});
  for (std::size_t id = 0; id < token_of.size(); ++id)
    if (!token_of[id].empty())
      m->text_of[id] = from_symbols(token_of[id]);
  for (const auto& a : m->added.tokens()) {
    m->text_of[static_cast<std::size_t>(a.id)] = a.special ? std::string{} : a.content;
    if (a.special)
      m->special_of[a.id] = a.content;
  }
  for (const auto id : m->prefix)
    if (id > max_id)
      return source + ": post_processor: id " + std::to_string(id) + " is outside the vocabulary";
  for (const auto id : m->suffix)
    if (id > max_id)
      return source + ": post_processor: id " + std::to_string(id) + " is outside the vocabulary";
  if (eos_id > max_id)
    return source + ": eos id " + std::to_string(eos_id) + " is outside the vocabulary of " +
           std::to_string(max_id + 1);
  return std::unique_ptr<bpe_tokenizer>(new bpe_tokenizer(std::move(m), eos_id));
}

std::variant<std::unique_ptr<bpe_tokenizer>, std::string>
bpe_tokenizer::load(const std::string& path, std::int32_t eos_id) {
  std::ifstream f{path, std::ios::binary};
  if (!f)
    return path + ": cannot open";
  std::ostringstream text;
  text << f.rdbuf();
  if (!f.good() && !f.eof())
    return path + ": cannot read";
  return parse(text.str(), path, eos_id);
}

// -- training ------------------------------------------------------------------

bpe_trained train_bpe_json(std::string_view corpus, const bpe_training& o) {
  bpe_trained out;
  if (o.vocab_size < 256) {
    out.error = "vocabulary of " + std::to_string(o.vocab_size) + " is below the 256 byte symbols";
    return out;
  }
  auto re = regex::compile(o.pattern, false);
  if (auto* err = std::get_if<std::string>(&re)) {
    out.error = "pattern: " + *err;
    return out;
  }
  std::vector<std::string> added = o.special_tokens;
  added.insert(added.end(), o.added_tokens.begin(), o.added_tokens.end());
  for (std::size_t k = 0; k < added.size(); ++k) {
    if (added[k].empty()) {
      out.error = "an empty special token";
      return out;
    }
    if (std::find(added.begin(), added.begin() + static_cast<std::ptrdiff_t>(k), added[k]) !=
        added.begin() + static_cast<std::ptrdiff_t>(k)) {
      out.error = "special token \"" + added[k] + "\" given twice";
      return out;
    }
  }
  if (!o.bos_token.empty() &&
      std::find(o.special_tokens.begin(), o.special_tokens.end(), o.bos_token) == o.special_tokens.end()) {
    out.error = "bos token \"" + o.bos_token + "\" is not one of the special tokens";
    return out;
  }

  std::vector<unicode_form> forms;
  if (!o.normalizer.empty()) {
    reader in{"normalizer"};
    read_normalizer(in, json{{"type", o.normalizer}}, o.normalizer, forms);
    if (in.failed()) {
      out.error = in.error();
      return out;
    }
  }
  std::string normalized{corpus};
  for (const unicode_form f : forms)
    normalized = unicode_normalize(normalized, f);
  corpus = normalized;

  // The words of the corpus (its well-formed UTF-8), counted.
  std::map<std::string, std::uint64_t> counts;
  {
    std::vector<std::string> pieces;
    const split_step words{std::get<regex>(re), split_behavior::isolated, false};
    for_each_utf8_run(corpus, [&](std::string_view valid) { split_piece(words, std::string{valid}, pieces); },
                      [](unsigned char) {});
    for (auto& p : pieces)
      ++counts[p];
  }
  std::vector<std::vector<std::int32_t>> words;
  std::vector<std::uint64_t> weight;
  for (const auto& [w, c] : counts) {
    std::vector<std::int32_t> syms;
    for (const char ch : w)
      syms.push_back(static_cast<unsigned char>(ch));
    words.push_back(std::move(syms));
    weight.push_back(c);
  }

  std::vector<std::string> tokens(alphabet().symbol.begin(), alphabet().symbol.end());
  std::unordered_map<std::string, std::int32_t> ids;
  for (std::size_t b = 0; b < 256; ++b)
    ids.emplace(tokens[b], static_cast<std::int32_t>(b));
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  while (tokens.size() < o.vocab_size) {
    std::map<std::pair<std::int32_t, std::int32_t>, std::uint64_t> pairs;
    for (std::size_t w = 0; w < words.size(); ++w)
      for (std::size_t k = 0; k + 1 < words[w].size(); ++k)
        pairs[{words[w][k], words[w][k + 1]}] += weight[w];
    std::pair<std::int32_t, std::int32_t> best{-1, -1};
    std::uint64_t best_count = 1; // a pair seen once is not worth a token
    for (const auto& [p, c] : pairs)
      if (c > best_count)
        best = p, best_count = c;
    if (best.first < 0)
      break;
    const std::string joined = tokens[static_cast<std::size_t>(best.first)] + tokens[static_cast<std::size_t>(best.second)];
    auto [it, fresh] = ids.emplace(joined, static_cast<std::int32_t>(tokens.size()));
    if (fresh)
      tokens.push_back(joined);
    merges.push_back(best);
    for (auto& w : words) {
      std::vector<std::int32_t> next;
      next.reserve(w.size());
      for (std::size_t k = 0; k < w.size(); ++k) {
        if (k + 1 < w.size() && w[k] == best.first && w[k + 1] == best.second) {
          next.push_back(it->second);
          ++k;
        } else {
          next.push_back(w[k]);
        }
      }
      w.swap(next);
    }
  }

  json vocab = json::object();
  for (std::size_t id = 0; id < tokens.size(); ++id)
    vocab[tokens[id]] = id;
  json merge_list = json::array();
  for (const auto& [a, b] : merges)
    merge_list.push_back(tokens[static_cast<std::size_t>(a)] + " " + tokens[static_cast<std::size_t>(b)]);
  json added_list = json::array();
  for (std::size_t k = 0; k < added.size(); ++k)
    added_list.push_back({{"id", o.vocab_size + k},
                          {"content", added[k]},
                          {"single_word", false},
                          {"lstrip", false},
                          {"rstrip", false},
                          {"normalized", false},
                          {"special", k < o.special_tokens.size()}});
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  if (!o.bos_token.empty()) {
    const auto bos_index = std::find(o.special_tokens.begin(), o.special_tokens.end(), o.bos_token) - o.special_tokens.begin();
    const json bos_id = o.vocab_size + static_cast<std::size_t>(bos_index);
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", o.bos_token}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array({{{"SpecialToken", {{"id", o.bos_token}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", o.bos_token}, {"type_id", 1}}}},
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens", {{o.bos_token, {{"id", o.bos_token}, {"ids", json::array({bos_id})},
                                               {"tokens", json::array({o.bos_token})}}}}}};
  }
  const json doc = {
    {"version", "1.0"},
    {"truncation", nullptr},
    {"padding", nullptr},
    {"added_tokens", added_list},
    {"normalizer", o.normalizer.empty() ? json(nullptr) : json{{"type", o.normalizer}}},
    {"pre_tokenizer",
     {{"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", o.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
    {"post_processor", post},
    {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
    {"model",
     {{"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", nullptr},
      {"continuing_subword_prefix", nullptr},
      {"end_of_word_suffix", nullptr},
      {"fuse_unk", false},
      {"byte_fallback", false},
      {"ignore_merges", o.ignore_merges},
      {"vocab", vocab},
      {"merges", merge_list}}},
  };
  out.json = doc.dump(1, ' ', false, json::error_handler_t::replace);
  return out;
}

} // namespace troupe::gpu
