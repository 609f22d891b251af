#include "messages/lark_grammar.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

namespace troupe::openai {

namespace {

/// What is wrong, and on which line.
struct refused : std::runtime_error {
  refused(int line, const std::string& what) : std::runtime_error("line " + std::to_string(line) + ": " + what) {}
};

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// -- Lark's common terminals, as GBNF ------------------------------------------------

/// Each body names others by their own names; they are written as
/// `common-NAME` rules (a name no Lark grammar can take).
struct common_terminal {
  std::string_view name;
  std::string_view body;
};
constexpr std::array<common_terminal, 22> common{{
  {"DIGIT", "[0-9]"},
  {"HEXDIGIT", "[a-fA-F0-9]"},
  {"INT", "[0-9]+"},
  {"SIGNED_INT", "[+\\-]? INT"},
  {"DECIMAL", "INT \".\" INT? | \".\" INT"},
  {"_EXP", "[eE] SIGNED_INT"},
  {"FLOAT", "INT _EXP | DECIMAL _EXP?"},
  {"SIGNED_FLOAT", "[+\\-]? FLOAT"},
  {"NUMBER", "FLOAT | INT"},
  {"SIGNED_NUMBER", "[+\\-]? NUMBER"},
  {"LCASE_LETTER", "[a-z]"},
  {"UCASE_LETTER", "[A-Z]"},
  {"LETTER", "[a-zA-Z]"},
  {"WORD", "[a-zA-Z]+"},
  {"CNAME", "[_a-zA-Z] [_a-zA-Z0-9]*"},
  {"ESCAPED_STRING", "\"\\\"\" ([^\"\\\\\\n] | \"\\\\\" [^\\n])* \"\\\"\""},
  {"WS_INLINE", "[ \\t]+"},
  {"WS", "[ \\t\\x0C\\r\\n]+"},
  {"CR", "\"\\r\""},
  {"LF", "\"\\n\""},
  {"NEWLINE", "(\"\\r\"? \"\\n\")+"},
  {"SH_COMMENT", "\"#\" [^\\n]*"},
}};

const common_terminal* common_named(std::string_view name) {
  for (const auto& c : common)
    if (c.name == name)
      return &c;
  return nullptr;
}

// -- tokens ----------------------------------------------------------------------------

enum class kind { name, string, regex, number, directive, punct, newline, end };

struct token {
  kind k;
  std::string text; ///< a name, a string's or expression's body, a number, a directive's name, the punctuation
  std::string flags; ///< a string's or expression's flags
  int line;
};

std::vector<token> lex(std::string_view s) {
  std::vector<token> out;
  int line = 1;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '\n') {
      out.push_back({kind::newline, "", "", line++});
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n')
        ++i;
    } else if (c == '"' || c == '/') {
      // A string, or an expression: to the closing mark not escaped (an
      // expression's classes may hold it unescaped).
      std::size_t j = i + 1;
      bool in_class = false;
      for (; j < s.size() && (s[j] != c || in_class); ++j) {
        if (s[j] == '\n')
          throw refused(line, std::string(c == '"' ? "a string" : "an expression") + " runs past the end of its line");
        if (s[j] == '\\')
          ++j;
        else if (c == '/' && s[j] == '[')
          in_class = true;
        else if (c == '/' && s[j] == ']')
          in_class = false;
      }
      if (j >= s.size())
        throw refused(line, std::string(c == '"' ? "a string" : "an expression") + " is not closed");
      token t{c == '"' ? kind::string : kind::regex, std::string(s.substr(i + 1, j - i - 1)), "", line};
      i = j + 1;
      while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i])) != 0)
        t.flags += s[i++];
      out.push_back(std::move(t));
    } else if (name_start(c)) {
      std::size_t j = i;
      while (j < s.size() && name_char(s[j]))
        ++j;
      out.push_back({kind::name, std::string(s.substr(i, j - i)), "", line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      std::size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])) != 0)
        ++j;
      out.push_back({kind::number, std::string(s.substr(i, j - i)), "", line});
      i = j;
    } else if (c == '%') {
      std::size_t j = i + 1;
      while (j < s.size() && name_char(s[j]))
        ++j;
      out.push_back({kind::directive, std::string(s.substr(i + 1, j - i - 1)), "", line});
      i = j;
    } else if (s.substr(i, 2) == ".." || s.substr(i, 2) == "->") {
      out.push_back({kind::punct, std::string(s.substr(i, 2)), "", line});
      i += 2;
    } else if (std::string_view(":|()[]*+?~!.,{}").find(c) != std::string_view::npos) {
      out.push_back({kind::punct, std::string(1, c), "", line});
      ++i;
    } else {
      throw refused(line, "unexpected character '" + std::string(1, c) + "'");
    }
  }
  out.push_back({kind::end, "", "", line});
  return out;
}

// -- expressions -----------------------------------------------------------------------

/// One character of a literal as GBNF writes it in a string.
std::string literal_char(std::string_view ch) {
  if (ch == "\"")
    return "\\\"";
  if (ch == "\\")
    return "\\\\";
  if (ch == "\n")
    return "\\n";
  if (ch == "\r")
    return "\\r";
  if (ch == "\t")
    return "\\t";
  if (ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x20) {
    static constexpr char hex[] = "0123456789ABCDEF";
    return std::string("\\x") + hex[static_cast<unsigned char>(ch[0]) >> 4] + hex[ch[0] & 15];
  }
  return std::string(ch);
}

/// The bytes of the UTF-8 character at `i`.
std::size_t char_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

constexpr std::string_view blank_class = " \\t\\n\\r\\x0B\\x0C";

/// A regular expression (Python's, as Lark writes terminals) as a GBNF
/// group.
std::string regex_to_gbnf(std::string_view re, std::string_view flags, int line) {
  bool dotall = false;
  for (const char f : flags) {
    if (f == 's')
      dotall = true;
    else if (f != 'm' && f != 'u')
      throw refused(line, std::string("the expression flag '") + f + "' is not served (s and m are)");
  }
  std::string out = "(";
  auto put = [&](const std::string& atom) {
    if (out.size() > 1 && out.back() != '(' && out.back() != '|')
      out += ' ';
    out += atom;
  };
  // An empty alternative or group (`a|`, `()`) as the empty string.
  auto close_empty = [&] {
    if (out.back() == '|' || out.back() == '(')
      out += out.back() == '|' ? " \"\"" : "\"\"";
  };
  for (std::size_t i = 0; i < re.size();) {
    const char c = re[i];
    if (c == '\\') {
      if (i + 1 >= re.size())
        throw refused(line, "an expression ends with '\\'");
      const char e = re[i + 1];
      i += 2;
      switch (e) {
      case 'd': put("[0-9]"); break;
      case 'D': put("[^0-9]"); break;
      case 'w': put("[a-zA-Z0-9_]"); break;
      case 'W': put("[^a-zA-Z0-9_]"); break;
      case 's': put("[" + std::string(blank_class) + "]"); break;
      case 'S': put("[^" + std::string(blank_class) + "]"); break;
      case 'n': put("\"\\n\""); break;
      case 't': put("\"\\t\""); break;
      case 'r': put("\"\\r\""); break;
      case 'f': put("\"\\x0C\""); break;
      case 'v': put("\"\\x0B\""); break;
      case 'x':
      case 'u': {
        const std::size_t n = e == 'x' ? 2 : 4;
        if (i + n > re.size())
          throw refused(line, std::string("an expression's \\") + e + " wants " + std::to_string(n) + " hex digits");
        put("\"\\" + std::string(1, e) + std::string(re.substr(i, n)) + "\"");
        i += n;
        break;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(e)) != 0)
          throw refused(line, std::string("the expression escape \\") + e
                                + " is not served (anchors, word boundaries and back references are not)");
        put("\"" + literal_char(std::string_view(&e, 1)) + "\"");
      }
    } else if (c == '[') {
      // A class: as GBNF writes one, its shorthand classes spelled out.
      std::string cls = "[";
      std::size_t j = i + 1;
      if (j < re.size() && re[j] == '^')
        cls += re[j++];
      if (j < re.size() && re[j] == ']') {
        cls += "\\]";
        ++j;
      }
      for (; j < re.size() && re[j] != ']'; ++j) {
        if (re[j] == '\\' && j + 1 < re.size()) {
          const char e = re[++j];
          if (e == 'd')
            cls += "0-9";
          else if (e == 'w')
            cls += "a-zA-Z0-9_";
          else if (e == 's')
            cls += blank_class;
          else if (e == 'D' || e == 'W' || e == 'S' || e == 'b' || std::isdigit(static_cast<unsigned char>(e)) != 0)
            throw refused(line, std::string("\\") + e + " inside a class is not served");
          else if (std::string_view("nrt\\]-^xuU\"'[").find(e) != std::string_view::npos)
            cls += std::string("\\") + e;
          else if (e == 'f')
            cls += "\\x0C";
          else if (e == 'v')
            cls += "\\x0B";
          else
            cls += e;
        } else if (re[j] == '[') {
          cls += "\\[";
        } else {
          cls += re[j];
        }
      }
      if (j >= re.size())
        throw refused(line, "a class in an expression is not closed");
      put(cls + "]");
      i = j + 1;
    } else if (c == '(') {
      if (re.substr(i, 3) == "(?:") {
        i += 3;
      } else if (re.substr(i, 4) == "(?P<") {
        const auto close = re.find('>', i);
        if (close == std::string_view::npos)
          throw refused(line, "a named group in an expression is not closed");
        i = close + 1;
      } else if (re.substr(i, 2) == "(?") {
        throw refused(line, "lookarounds and inline flags in expressions are not served");
      } else {
        ++i;
      }
      put("(");
    } else if (c == ')') {
      close_empty();
      out += ')';
      ++i;
    } else if (c == '|') {
      out += " |";
      ++i;
    } else if (c == '*' || c == '+' || c == '?') {
      out += c;
      ++i;
      if (i < re.size() && (re[i] == '?' || re[i] == '+'))
        ++i; // lazy or possessive: the same language
    } else if (c == '{') {
      const auto close = re.find('}', i);
      const auto inner = close == std::string_view::npos ? std::string_view() : re.substr(i + 1, close - i - 1);
      const bool bound = !inner.empty() && std::all_of(inner.begin(), inner.end(), [](char d) {
        return std::isdigit(static_cast<unsigned char>(d)) != 0 || d == ',';
      }) && inner != "," && inner.find(',') == inner.rfind(',');
      if (bound) {
        out += "{" + std::string(inner[0] == ',' ? "0" : "") + std::string(inner) + "}"; // Python's {,n}: {0,n}
        i = close + 1;
        if (i < re.size() && (re[i] == '?' || re[i] == '+'))
          ++i;
      } else {
        put("\"{\"");
        ++i;
      }
    } else if (c == '.') {
      put(dotall ? "." : "[^\\n]");
      ++i;
    } else if (c == '^' || c == '$') {
      throw refused(line, "anchors in expressions are not served (a terminal matches where it stands)");
    } else {
      const auto n = char_length(re, i);
      put("\"" + literal_char(re.substr(i, n)) + "\"");
      i += n;
    }
  }
  close_empty();
  return out + ")";
}

/// A string's characters (Python's escapes left as they are: GBNF reads
/// the same ones), each of any case with the `i` flag.
std::string string_to_gbnf(const std::string& body, std::string_view flags, int line) {
  if (flags.empty())
    return "\"" + body + "\"";
  if (flags != "i")
    throw refused(line, "the string flag '" + std::string(flags) + "' is not served (i is)");
  std::string out = "(";
  for (std::size_t i = 0; i < body.size();) {
    std::size_t n = body[i] == '\\' && i + 1 < body.size() ? 2 : char_length(body, i);
    if (body[i] == '\\' && i + 1 < body.size() && (body[i + 1] == 'x' || body[i + 1] == 'u'))
      n = std::min(body.size() - i, std::size_t{body[i + 1] == 'x' ? 4u : 6u});
    const auto ch = body.substr(i, n);
    const auto b = static_cast<unsigned char>(ch[0]);
    out += out.size() > 1 ? " " : "";
    if (n == 1 && std::isalpha(b) != 0)
      out += std::string("[") + static_cast<char>(std::tolower(b)) + static_cast<char>(std::toupper(b)) + "]";
    else
      out += "\"" + ch + "\"";
    i += n;
  }
  return out + (out.size() > 1 ? ")" : "\"\")");
}

/// A Lark name as a GBNF rule's: `start` is `root`; a Lark rule named root
/// takes a name Lark cannot write.
std::string rule_name(std::string_view lark) {
  if (lark == "start")
    return "root";
  if (lark == "root")
    return "root-lark";
  return std::string(lark);
}

// -- definitions -----------------------------------------------------------------------

class reader {
public:
  explicit reader(std::vector<token> t) : t_(std::move(t)) {}

  std::string gbnf() {
    while (peek().k != kind::end) {
      if (peek().k == kind::newline) {
        ++at_;
        continue;
      }
      if (peek().k == kind::directive)
        directive();
      else
        definition();
    }
    if (!defined_.contains("start"))
      throw refused(t_.back().line, "no rule named start (a Lark grammar's start rule)");
    for (const auto& [name, line] : used_)
      if (!defined_.contains(name))
        throw refused(line, name + " is used but not defined (nor imported)");
    // Lark's common terminals, and those they use, where imported.
    std::set<std::string> commons;
    std::vector<std::string> todo(imported_commons_.begin(), imported_commons_.end());
    while (!todo.empty()) {
      const auto name = todo.back();
      todo.pop_back();
      if (!commons.insert(name).second)
        continue;
      for (const auto& c : common)
        if (c.name != name && uses(common_named(name)->body, c.name))
          todo.push_back(std::string(c.name));
    }
    for (const auto& name : commons) {
      std::string body(common_named(name)->body);
      for (const auto& c : common)
        body = renamed(body, c.name);
      out_ += "common-" + name + " ::= " + body + "\n";
    }
    return out_;
  }

private:
  const token& peek(std::size_t ahead = 0) const { return t_[std::min(at_ + ahead, t_.size() - 1)]; }
  token next() { return t_[std::min(at_++, t_.size() - 1)]; }
  bool punct(std::string_view p, std::size_t ahead = 0) const {
    return peek(ahead).k == kind::punct && peek(ahead).text == p;
  }
  void expect(std::string_view p) {
    if (!punct(p))
      throw refused(peek().line, "'" + std::string(p) + "' expected" + (peek().text.empty() ? "" : ", got '" + peek().text + "'"));
    ++at_;
  }

  /// Whether GBNF `body` names `name` (as a whole word).
  static bool uses(std::string_view body, std::string_view name) {
    for (auto at = body.find(name); at != std::string_view::npos; at = body.find(name, at + 1)) {
      const bool before = at == 0 || !name_char(body[at - 1]);
      const bool after = at + name.size() >= body.size() || !name_char(body[at + name.size()]);
      if (before && after)
        return true;
    }
    return false;
  }
  /// `body` with `name` (a common terminal's) written common-NAME.
  static std::string renamed(std::string body, std::string_view name) {
    for (auto at = body.find(name); at != std::string::npos; at = body.find(name, at + 1)) {
      const bool before = at == 0 || (!name_char(body[at - 1]) && body[at - 1] != '-');
      const bool after = at + name.size() >= body.size() || !name_char(body[at + name.size()]);
      if (before && after && (at == 0 || body[at - 1] != '"')) {
        body.insert(at, "common-");
        at += 7;
      }
    }
    return body;
  }

  void define(const std::string& name, int line) {
    if (!defined_.insert(name).second)
      throw refused(line, name + " is defined twice");
  }

  void directive() {
    const auto d = next();
    if (d.text == "ignore") {
      // Read past: the output holds none of it between the tokens.
      while (peek().k != kind::newline && peek().k != kind::end)
        ++at_;
      return;
    }
    if (d.text != "import")
      throw refused(d.line, "%" + d.text + " is not served (%import common.NAME and %ignore are)");
    const auto from = next();
    if (from.k != kind::name || from.text != "common")
      throw refused(d.line, "only Lark's common terminals can be imported (%import common.NAME)");
    std::vector<std::pair<std::string, std::string>> names; // (common name, name here)
    if (punct(".")) {
      ++at_;
      const auto n = next();
      std::string as = n.text;
      if (punct("->")) {
        ++at_;
        as = next().text;
      }
      names.emplace_back(n.text, as);
    } else if (punct("(")) {
      ++at_;
      while (!punct(")")) {
        const auto n = next();
        if (n.k != kind::name)
          throw refused(d.line, "a name expected in the import's list");
        names.emplace_back(n.text, n.text);
        if (punct(","))
          ++at_;
        else if (!punct(")"))
          throw refused(d.line, "',' or ')' expected in the import's list");
      }
      ++at_;
    } else {
      throw refused(d.line, "%import common.NAME or %import common (A, B) expected");
    }
    for (const auto& [name, as] : names) {
      if (common_named(name) == nullptr)
        throw refused(d.line, "common." + name + " is not one of the common terminals served");
      define(as, d.line);
      imported_commons_.insert(name);
      out_ += rule_name(as) + " ::= common-" + name + "\n";
    }
  }

  void definition() {
    const int line = peek().line;
    if (punct("?") || punct("!"))
      ++at_;
    const auto n = next();
    if (n.k != kind::name)
      throw refused(line, "a rule or terminal definition (name: ...) expected");
    if (punct("{"))
      throw refused(line, "templates (" + n.text + "{...}) are not served");
    if (punct(".") && peek(1).k == kind::number)
      at_ += 2; // a priority
    expect(":");
    define(n.text, line);
    out_ += rule_name(n.text) + " ::= " + expansions() + "\n";
    if (peek().k != kind::newline && peek().k != kind::end)
      throw refused(peek().line, "unexpected '" + peek().text + "'");
  }

  /// Alternatives, on this line and on the next ones that begin with '|'.
  std::string expansions(int depth = 0) {
    std::string out = alternative(depth);
    for (;;) {
      std::size_t k = 0;
      while (peek(k).k == kind::newline)
        ++k;
      if (!punct("|", k))
        return out;
      at_ += k + 1;
      out += " | " + alternative(depth);
    }
  }

  std::string alternative(int depth) {
    std::string out;
    for (;;) {
      if (depth > 0)
        while (peek().k == kind::newline)
          ++at_;
      const auto& t = peek();
      if (t.k == kind::end || t.k == kind::newline || punct("|") || punct(")") || punct("]"))
        break;
      if (punct("->")) {
        ++at_;
        if (next().k != kind::name)
          throw refused(t.line, "an alias name expected after '->'");
        continue;
      }
      if (!out.empty())
        out += ' ';
      out += item(depth);
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string item(int depth) {
    std::string atom = atom_of(depth);
    for (;;) {
      if (punct("*") || punct("+") || punct("?")) {
        atom += next().text;
      } else if (punct("~")) {
        const int line = next().line;
        const auto lo = next();
        if (lo.k != kind::number)
          throw refused(line, "a count expected after '~'");
        if (punct("..")) {
          ++at_;
          const auto hi = next();
          if (hi.k != kind::number)
            throw refused(line, "a count expected after '..'");
          atom = "(" + atom + "){" + lo.text + "," + hi.text + "}";
        } else {
          atom = "(" + atom + "){" + lo.text + "}";
        }
      } else {
        return atom;
      }
    }
  }

  std::string atom_of(int depth) {
    const auto t = next();
    switch (t.k) {
    case kind::string:
      if (punct("..")) {
        ++at_;
        const auto hi = next();
        const auto one = [](const std::string& c) {
          if (c.empty())
            return false;
          if (c[0] != '\\')
            return char_length(c, 0) == c.size();
          return c.size() == 2 || (c[1] == 'x' && c.size() == 4) || (c[1] == 'u' && c.size() == 6);
        };
        if (hi.k != kind::string || !one(t.text) || !one(hi.text))
          throw refused(t.line, "a range is two strings of one character (\"a\"..\"z\")");
        // (A class's own marks escaped: "^".."z" is no negated class.)
        const auto end = [](const std::string& c) {
          return c.size() == 1 && std::string_view("^]-[").find(c[0]) != std::string_view::npos ? "\\" + c : c;
        };
        return "[" + end(t.text) + "-" + end(hi.text) + "]";
      }
      return string_to_gbnf(t.text, t.flags, t.line);
    case kind::regex:
      return regex_to_gbnf(t.text, t.flags, t.line);
    case kind::name:
      if (punct("{"))
        throw refused(t.line, "templates (" + t.text + "{...}) are not served");
      used_.emplace(t.text, t.line);
      return rule_name(t.text);
    case kind::punct:
      if (t.text == "(" || t.text == "[") {
        if (depth >= 64)
          throw refused(t.line, "groups nested more than 64 deep");
        const auto inner = expansions(depth + 1);
        while (peek().k == kind::newline)
          ++at_;
        expect(t.text == "(" ? ")" : "]");
        return "(" + inner + (t.text == "(" ? ")" : ")?");
      }
      [[fallthrough]];
    default:
      throw refused(t.line, t.text.empty() ? "an item expected" : "unexpected '" + t.text + "'");
    }
  }

  std::vector<token> t_;
  std::size_t at_ = 0;
  std::string out_;
  std::set<std::string> defined_;
  std::map<std::string, int> used_;
  std::set<std::string> imported_commons_;
};

} // namespace

bool is_lark(std::string_view text) {
  if (text.find("::=") != std::string_view::npos)
    return false;
  // A line that defines: [?!]name[.N]: (not inside a string: lines begin so)
  for (std::size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    if (end == std::string_view::npos)
      end = text.size();
    auto line = text.substr(at, end - at);
    at = end + 1;
    std::size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    if (i < line.size() && (line[i] == '?' || line[i] == '!'))
      ++i;
    if (i >= line.size() || !name_start(line[i]))
      continue;
    while (i < line.size() && name_char(line[i]))
      ++i;
    if (i + 1 < line.size() && line[i] == '.' && std::isdigit(static_cast<unsigned char>(line[i + 1])) != 0)
      for (++i; i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) != 0;)
        ++i;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    if (i < line.size() && line[i] == ':')
      return true;
  }
  return false;
}

std::variant<std::string, std::string> lark_to_gbnf(std::string_view text) {
  try {
    return std::variant<std::string, std::string>(std::in_place_index<0>, reader(lex(text)).gbnf());
  } catch (const refused& e) {
    return std::variant<std::string, std::string>(std::in_place_index<1>, e.what());
  }
}

} // namespace troupe::openai
