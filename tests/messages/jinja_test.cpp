// The chat template interpreter (messages/jinja) against Jinja2 itself, set
// up as transformers sets it up (tests/oracle/jinja_reference.py): the same
// text, or an error where Jinja2 fails, for snippets of each construct and
// for templates in the shapes model families ship, over random
// conversations with tools, calls and awkward text. Then what only Troupe
// does: refusals at read time naming the line, and limits on a render.
#include "messages/jinja.hpp"

#include "tests/messages/chat_templates.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#ifndef TROUPE_JINJA_ORACLE_SCRIPT
#define TROUPE_JINJA_ORACLE_SCRIPT "tests/oracle/jinja_reference.py"
#endif

namespace troupe::jinja {
namespace {

using ojson = nlohmann::ordered_json;

struct render_case {
  std::string name;
  std::string tpl;
  ojson vars;
  double now = 1'700'000'000;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s)
    q += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return q + "'";
}

/// Jinja2's answers: {"text"} or {"error"} for each case.
std::vector<ojson> oracle(const std::vector<render_case>& cases) {
  // The oracle is a dependency (python3-jinja2, tools/install-deps.sh): fail, never skip.
  EXPECT_EQ(std::system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null"), 0)
    << "/usr/bin/python3 cannot import jinja2; run tools/install-deps.sh (python3-jinja2)";
  const auto dir = std::filesystem::temp_directory_path();
  const auto in = (dir / ("jinja_cases_" + std::to_string(::getpid()) + ".json")).string();
  const auto out = (dir / ("jinja_answers_" + std::to_string(::getpid()) + ".json")).string();
  ojson all = ojson::array();
  for (const auto& c : cases)
    all.push_back({{"template", c.tpl}, {"vars", c.vars}, {"now", c.now}});
  std::ofstream(in) << all.dump();
  const auto cmd = "/usr/bin/python3 " + shell_quote(TROUPE_JINJA_ORACLE_SCRIPT) + " " + shell_quote(in) + " > " +
                   shell_quote(out);
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << cmd;
    return {};
  }
  std::ifstream f(out);
  auto answers = ojson::parse(f).get<std::vector<ojson>>();
  std::filesystem::remove(in);
  std::filesystem::remove(out);
  return answers;
}

/// Each case rendered here and by Jinja2: the same text, or both fail.
void agree(const std::vector<render_case>& cases) {
  const auto answers = oracle(cases);
  ASSERT_EQ(answers.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::string got;
    std::string failed;
    try {
      got = program(c.tpl).render(c.vars, {}, c.now);
    } catch (const error& e) {
      failed = e.what();
    }
    const auto& want = answers[i];
    if (want.contains("error")) {
      EXPECT_FALSE(failed.empty()) << c.name << ": Jinja2 failed (" << want["error"].get<std::string>()
                                   << ") but this rendered " << ojson(got).dump() << "\ntemplate: " << c.tpl
                                   << "\nvars: " << c.vars.dump();
    } else {
      EXPECT_TRUE(failed.empty()) << c.name << ": failed (" << failed << ") where Jinja2 rendered "
                                  << want["text"].dump() << "\ntemplate: " << c.tpl << "\nvars: " << c.vars.dump();
      if (failed.empty()) {
        EXPECT_EQ(got, want["text"].get<std::string>())
          << c.name << "\ntemplate: " << c.tpl << "\nvars: " << c.vars.dump();
      }
    }
  }
}

TEST(jinja, each_construct_renders_as_jinja2_does) {
  const ojson v = ojson::parse(R"({
    "s": "  Héllo, wörld 中文 ✓  ", "e": "", "n": 7, "neg": -7, "f": 2.5, "big": 12345678901234567,
    "tiny": 0.0001, "t": true, "no": false, "z": null,
    "xs": [3, 1, 2], "words": ["b", "a", "c"], "empty": [],
    "d": {"b": 1, "a": [1, 2, {"k": "v"}], "items": "shadow", "ü": "é\n\"q\"\t\\"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo"}, {"role": "user", "content": "bye"}]
  })");
  const std::vector<std::pair<std::string, std::string>> snippets{
    // text, output and whitespace control
    {"text", "plain text\nwith lines\n"},
    {"output", "[{{ s }}|{{ n }}|{{ f }}|{{ t }}|{{ z }}|{{ missing }}|{{ big }}|{{ tiny }}]"},
    {"reprs", "{{ xs }} {{ words }} {{ d }} {{ [1.0, none, true, 'it''s'] }} {{ [\"it's\"] }}"},
    {"minus strips", "a  \n  {{- n -}}  \n  b {%- if t -%}\n  c  {%- endif -%}  d"},
    {"trim_blocks", "a\n{% if t %}\nyes\n{% endif %}\nb\n"},
    {"lstrip_blocks", "a\n    {% if t %}\n    yes\n    {% endif %}\n  {{ n }}\n"},
    {"lstrip mid-line", "x  {% if t %}y{% endif %}  z\n"},
    {"plus keeps", "a\n    {%+ if t +%}\nyes\n{% endif %}"},
    {"comments", "a\n  {# note #}\nb {#- strip -#}  c\n{# multi\nline #}d"},
    {"raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!"},
    {"crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc"},
    // literals and operators
    {"arithmetic", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} "
                   "{{ 1.5 + 1 }} {{ n - 10 }} {{ -n }} {{ 10 / 4 * 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 }}"},
    {"strings", "{{ 'a' + \"b\" }} {{ 'x' * 3 }} {{ n ~ 'x' ~ t ~ z }} {{ 'a\\tb\\n' }} {{ '\\u00e9\\x41' }}"},
    {"compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ t == 1 }} {{ xs == [3, 1, 2] }} "
                "{{ z == none }} {{ missing == missing }} {{ 'a' != 'a' }} {{ [1, 2] < [1, 3] }}"},
    {"in", "{{ 'ell' in 'hello' }} {{ 2 in xs }} {{ 'b' in d }} {{ 'q' not in d }} {{ 5 not in xs }}"},
    {"logic", "{{ t and n }} {{ no or 'x' }} {{ not t }} {{ z or e or 'last' }} {{ not no and t }} {{ empty or 0 }}"},
    {"conditional", "{{ 'y' if t else 'n' }} {{ 'y' if no else 'n' }} [{{ 'y' if no }}] {{ 1 if no else 2 if t else 3 }}"},
    {"precedence", "{{ 'a' ~ 1 + 2 }} {{ not 1 == 2 }} {{ -2 ** 2 }} {{ s | trim + '!' }} {{ -xs|length }}"},
    {"dict literal", "{{ {'a': 1, 'b': [2]} }} {{ {'a': 1}['a'] }} {{ {'k': 'v'}|tojson }}"},
    {"list ops", "{{ xs + words }} {{ [0] * 3 }} {{ (1, 2) }} {{ xs[0] }} {{ xs[-1] }} {{ xs[5] }}"},
    // subscripts and attributes
    {"slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-2:] }} "
               "{{ s[2:6] }} {{ s[::-1] }} {{ s[-3] }} {{ 'abc'[1] }} {{ xs[2:0:-1] }}"},
    {"attributes", "{{ d.b }} {{ d['b'] }} {{ d.a[2].k }} {{ d.items is callable }} {{ d['items'] }} {{ d.missing }} "
                   "{{ msgs[1].role }} {{ msgs[0]['content'] }}"},
    {"undefined attr fails", "{{ missing.attr }}"},
    {"undefined item fails", "{{ msgs[9]['role'] }}"},
    {"undefined math fails", "{{ missing + 1 }}"},
    {"int plus str fails", "{{ 1 + 'a' }}"},
    {"division by zero fails", "{{ 1 / 0 }}"},
    // statements
    {"if chain", "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %}"},
    {"for loop vars", "{% for x in words %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                      "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ x }};{% endfor %}"},
    {"for prev next", "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}"},
    {"for else", "{% for x in empty %}no{% else %}empty{% endfor %}{% for x in xs %}{{ x }}{% else %}no{% endfor %}"},
    {"for filter", "{% for m in msgs if m.role != 'system' %}{{ loop.index }}{{ m.content }}{{ loop.last }} "
                   "{% endfor %}"},
    {"for unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}"
                   "{% endfor %}"},
    {"for dict keys", "{% for k in d %}{{ k }},{% endfor %}"},
    {"for string", "{% for c in 'héé' %}[{{ c }}]{% endfor %}"},
    {"break continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}"
                       "{% endif %}{{ x }}{% endfor %}"},
    {"nested loops", "{% for a in range(3) %}{% for b in range(a) %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}"
                     "{{ loop.index }}|{% endfor %}"},
    {"set scoping", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"},
    {"set in if leaks", "{% if t %}{% set y = 'in' %}{% endif %}{{ y }}"},
    {"namespace", "{% set ns = namespace(c=0, found=false) %}{% for x in xs %}{% set ns.c = ns.c + x %}{% if x == 1 %}"
                  "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.c }} {{ ns.found }}"},
    {"set block", "{% set body %}\n  hello {{ n }}\n{% endset %}[{{ body }}]"},
    {"set tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}"},
    {"macro", "{% macro tag(name, x='dflt') -%}\n<{{ name }}>{{ x }}</{{ name }}>\n{%- endmacro %}"
              "{{ tag('a') }}{{ tag('b', 'v') }}{{ tag(x='k', name='c') }}"},
    {"macro sees globals", "{% macro m() %}{{ n }}{{ s|length }}{% endmacro %}{{ m() }}"},
    {"macro scope", "{% set top = 'T' %}{% macro m(a) %}[{{ a }}{{ x }}{{ top }}{{ later }}{% set top = 'in' %}{{ top }}]"
                    "{% endmacro %}{% set later = 'L' %}{% for x in [1, 2] %}{% set top = 'loop' %}{{ m(x) }}{% endfor %}"
                    "{{ top }}{% macro outer() %}{{ m('o') }}{% endmacro %}{{ outer() }}"},
    {"raise", "before{{ raise_exception('no way: ' ~ n) }}"},
    {"range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}"},
    {"strftime", "{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }}"},
    // filters
    {"trim", "[{{ s|trim }}] [{{ '\\u00a0x\\u3000'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ e|trim }}] [{{ n|trim }}]"},
    {"length", "{{ s|length }} {{ xs|length }} {{ d|length }} {{ missing|length }} {{ xs|count }}"},
    {"tojson", "{{ d|tojson }} {{ msgs[1]|tojson }} {{ s|tojson }} {{ [1.5, 1e-7, none, true]|tojson }} {{ n|tojson }}"},
    {"tojson indent", "{{ d|tojson(indent=2) }}\n{{ empty|tojson(indent=4) }}{{ {}|tojson(indent=2) }}{{ [[]]|tojson(indent=1) }}"},
    {"tojson options", "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=[',', ':']) }} {{ s|tojson(true) }} "
                       "{{ '😀'|tojson(ensure_ascii=true) }}"},
    {"tojson undefined fails", "{{ missing|tojson }}"},
    {"case", "{{ 'abc DEF'|upper }} {{ 'abc DEF'|lower }} {{ 'hello wORLD'|title }} {{ 'hello WORLD'|capitalize }} "
             "{{ 'élan ÉCOLE ÿ Ā ā Ĺ ĺ Ж ж Σ σ ς 中a'|upper }} {{ 'ÉCOLE Ж Σ Ÿ Ĺ'|lower }} {{ \"don't stop-me (now) x\"|title }} "
             "{{ \"don't stop-me 中a éa\".title() }} {{ 'éCOLE'|capitalize }} {{ 'éCOLE'.capitalize() }}"},
    {"default", "{{ missing|default('d') }} {{ z|default('d') }} {{ e|default('d', true) }} {{ n|d(0) }} "
                "{{ missing|default }}"},
    {"string int float", "{{ xs|string }} {{ '42'|int + 1 }} {{ '4.5'|float }} {{ 'x'|int }} {{ 3.9|int }} {{ n|float }}"},
    {"join", "{{ words|join(', ') }} {{ xs|join }} {{ msgs|join('/', attribute='role') }}"},
    {"first last reverse", "{{ xs|first }} {{ xs|last }} {{ xs|reverse|list }} {{ 'abc'|reverse }} {{ empty|first }}"},
    {"replace", "{{ s|replace('l', 'L') }} {{ 'aaa'|replace('a', 'b', 2) }}"},
    {"items filter", "{% for k, v in d|items %}{{ k }};{% endfor %}"},
    {"selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} "
                   "{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }} "
                   "{{ msgs|selectattr('role', '==', 'system')|first }}"},
    {"select", "{{ [0, 1, 2, none, '']|select|list }} {{ range(10)|select('odd')|list }} "
               "{{ range(10)|reject('divisibleby', 3)|list }}"},
    {"map filter", "{{ words|map('upper')|join }} {{ msgs|map(attribute='missing', default='-')|join }}"},
    {"sort unique", "{{ xs|sort }} {{ words|sort(reverse=true) }} {{ [1, 2, 1, 3, 2]|unique|list }} "
                    "{{ msgs|sort(attribute='content')|map(attribute='content')|join }}"},
    {"indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}"},
    {"escape abs sum", "{{ '<a href=\"x\">&</a>'|e }} {{ neg|abs }} {{ xs|sum }} {{ xs|min }} {{ xs|max }} "
                       "{{ d|dictsort }} {{ 'a b  c'|wordcount }}"},
    // tests
    {"tests", "{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ z is none }} "
              "{{ s is string }} {{ n is number }} {{ n is integer }} {{ f is float }} {{ t is boolean }} "
              "{{ d is mapping }} {{ xs is iterable }} {{ s is iterable }} {{ xs is sequence }} {{ n is odd }} "
              "{{ n is even }} {{ 9 is divisibleby 3 }} {{ n is not none }} {{ t is true }} {{ no is false }} "
              "{{ 'ab' is lower }} {{ n is eq 7 }} {{ n is ne(7) }} {{ 2 is in xs }} {{ raise_exception is callable }} "
              "{{ n is gt 3 }} {{ n is le(3) }} {{ xs is sameas xs }}"},
    // methods
    {"string methods", "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] "
                       "{{ s.strip().upper() }} {{ 'Ab'.lower() }} {{ 'ab cd'.title() }} {{ 'ab'.capitalize() }} "
                       "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'bc')) }} {{ 'a,b,,c'.split(',') }} "
                       "{{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'aXbXc'.replace('X', '-') }} "
                       "{{ 'héllo'.find('l') }} {{ 'banana'.count('an') }} {{ '-'.join(words) }} {{ '12'.isdigit() }} "
                       "{{ 'x</think>\\n\\nanswer'.split('</think>')[-1].lstrip('\\n') }}"},
    {"dict methods", "{{ d.keys()|list }} {{ d.values()|length }} {{ d.get('b') }} {{ d.get('q', 'dflt') }} "
                     "{{ d.get('q') }}"},
    {"mutation refused", "{{ xs.append(4) }}"},
    {"unknown method fails", "{{ s.nosuchmethod() }}"},
  };
  std::vector<render_case> cases;
  for (const auto& [name, tpl] : snippets)
    cases.push_back({name, tpl, v});
  agree(cases);
}

/// A random conversation: a system message or not, user and assistant
/// turns (sometimes out of order, to reach the templates' refusals),
/// assistant calls with tool results, texts with blanks, quotes, braces
/// and non-ASCII; tools offered or not.
ojson random_vars(std::mt19937& rng, bool with_tools) {
  static const std::vector<std::string> texts{
    "Hello", "  padded  ", "line one\nline two", "quotes \" and ' here", "{{ not a tag }} {% neither %}",
    "Ünïcödé 中文 😀", "tab\there", "", "trailing newline\n", "\\back\\slash", "<tool_response>\nx\n</tool_response>",
    "thinking</think>\n\nanswer", "[INST] fake [/INST]", "  \n  "};
  const auto pick = [&](const std::vector<std::string>& xs) { return xs[rng() % xs.size()]; };
  ojson messages = ojson::array();
  if (rng() % 2 == 0)
    messages.push_back({{"role", "system"}, {"content", pick(texts)}});
  const int turns = 1 + static_cast<int>(rng() % 4);
  int call_no = 0;
  for (int t = 0; t < turns; ++t) {
    messages.push_back({{"role", rng() % 12 == 0 ? "assistant" : "user"}, {"content", pick(texts)}});
    if (t + 1 == turns && rng() % 2 == 0)
      break;
    if (with_tools && rng() % 3 == 0) {
      ojson calls = ojson::array();
      const int n = 1 + static_cast<int>(rng() % 2);
      for (int k = 0; k < n; ++k) {
        char id[16];
        std::snprintf(id, sizeof id, "call%05d", call_no++);
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", rng() % 2 ? "get_weather" : "search"},
                                       {"arguments", {{"city", pick(texts)}, {"days", static_cast<int>(rng() % 7)},
                                                      {"metric", rng() % 2 == 0}, {"ratio", 0.25}}}}}});
      }
      messages.push_back({{"role", "assistant"}, {"content", rng() % 2 ? ojson(nullptr) : ojson(pick(texts))},
                          {"tool_calls", calls}});
      for (const auto& c : calls)
        messages.push_back({{"role", "tool"}, {"tool_call_id", c["id"]}, {"content", pick(texts)}});
      if (rng() % 2)
        messages.push_back({{"role", "assistant"}, {"content", pick(texts)}});
    } else {
      messages.push_back({{"role", "assistant"}, {"content", pick(texts)}});
    }
  }
  ojson vars = {{"messages", messages},
                {"bos_token", "<s>"},
                {"eos_token", "</s>"},
                {"add_generation_prompt", rng() % 2 == 0}};
  if (with_tools) {
    vars["tools"] = ojson::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "née"},
          "days": {"type": "integer"}, "units": {"type": "string", "enum": ["C", "F", "K\u00e9"]},
          "hours": {"type": "array", "items": {"type": "number"}}, "grid": {"type": "array", "items": {"type": "array",
          "items": {"type": "boolean"}}}, "opts": {"type": "object", "properties": {"a": {"type": "boolean"}}},
          "raw": {}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "search", "description": "Search \"the web\"",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}, "return": {"type": "string"}}}
    ])");
  } else if (rng() % 2 == 0) {
    vars["tools"] = nullptr;
  }
  return vars;
}

TEST(jinja, model_family_templates_render_as_jinja2_does_over_random_chats) {
  std::mt19937 rng(20261128);
  std::vector<render_case> cases;
  for (const auto& [name, tpl] : test_templates::all)
    for (int i = 0; i < 60; ++i)
      cases.push_back({std::string(name) + " #" + std::to_string(i), std::string(tpl), random_vars(rng, i % 2 == 1),
                       1'700'000'000.0 + 86'400.0 * i});
  agree(cases);
  // The cases reach both outcomes: renders (of every template) and the
  // templates' own refusals.
  std::size_t rendered = 0;
  std::map<std::string, int> rendered_by;
  for (const auto& c : cases) {
    try {
      program(c.tpl).render(c.vars, {}, c.now);
      ++rendered;
      ++rendered_by[c.name.substr(0, c.name.find(' '))];
    } catch (const error&) {
    }
  }
  EXPECT_GT(rendered, cases.size() / 2);
  EXPECT_LT(rendered, cases.size());
  for (const auto& [name, tpl] : test_templates::all)
    EXPECT_GT(rendered_by[std::string(name)], 10) << name << " rendered too few of its chats";
}

std::string read_error(std::string_view tpl) {
  try {
    program p(tpl);
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read: " << tpl;
  return {};
}

std::string render_error(std::string_view tpl, const ojson& vars = ojson::object(), const limits& lim = {}) {
  try {
    program(tpl).render(vars, lim);
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "rendered: " << tpl;
  return {};
}

TEST(jinja, templates_that_cannot_be_read_are_refused_naming_the_line) {
  EXPECT_EQ(read_error("a\nb {% if x %}"), "chat template line 2: the template ends before {% elif or else or endif %}");
  EXPECT_NE(read_error("{{ x ").find("line 1: an expression ({{ ... }}) is not closed"), std::string::npos);
  EXPECT_NE(read_error("\n\n{% frobnicate %}").find("line 3: unknown or unsupported tag 'frobnicate'"), std::string::npos);
  EXPECT_NE(read_error("{{ x|nosuchfilter }}").find("unknown filter 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(read_error("{{ x is nosuchtest }}").find("unknown test 'nosuchtest'"), std::string::npos);
  EXPECT_NE(read_error("{% for x in xs recursive %}{% endfor %}").find("recursive"), std::string::npos);
  EXPECT_NE(read_error("{{ 'abc }}").find("a string is not closed"), std::string::npos);
  EXPECT_NE(read_error("{# open").find("comment"), std::string::npos);
  EXPECT_NE(read_error("{% endif %}").find("unknown or unsupported tag 'endif'"), std::string::npos);
  EXPECT_NE(read_error("{{ a ]] }}").find("unexpected ']'"), std::string::npos);
  EXPECT_NE(read_error("{{ f(a=1, 2) }}").find("positional argument follows a keyword"), std::string::npos);
  EXPECT_NE(read_error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nests deeper than 256"),
            std::string::npos);
  EXPECT_NE(read_error([] {
              std::string t;
              for (int i = 0; i < 300; ++i)
                t += "{% if x %}";
              return t;
            }()).find("nests deeper than 256"),
            std::string::npos);
  EXPECT_TRUE(read_error("{{ 1e999999 }}").starts_with("chat template: ")) << "a literal out of range";
}

TEST(jinja, renders_fail_with_what_went_wrong) {
  EXPECT_EQ(render_error("{{ raise_exception('roles must alternate') }}"),
            "chat template line 1: the chat template refused the request: roles must alternate");
  EXPECT_EQ(render_error("x\n{{ messages[0].role }}", {{"messages", ojson::array()}}),
            "chat template line 2: list object has no element 0");
  EXPECT_NE(render_error("{{ 1 + 'a' }}").find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos);
  EXPECT_NE(render_error("{% set x.y = 1 %}").find("non-namespace"), std::string::npos);
  EXPECT_NE(render_error("{{ [1].append(2) }}").find("'list object' has no attribute 'append'"), std::string::npos);
  for (const char* overflow : {"{{ 4 ** 99 }}", "{{ 9223372036854775807 + 1 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
                               "{{ -(-9223372036854775807 - 1) }}", "{{ 3037000500 * 3037000500 }}"})
    EXPECT_NE(render_error(overflow).find("integer overflow"), std::string::npos) << overflow;
  EXPECT_EQ(program("{{ 1 ** 99999999999999 }} {{ 2 ** 62 }} {{ [1, 2, 3][::9223372036854775807] }}").render(ojson::object()),
            "1 4611686018427387904 [1]");
  EXPECT_NE(render_error("{{ messages[1.5:] }}", {{"messages", {1, 2}}}).find("an integer is needed here, got float"),
            std::string::npos);
  ojson deep = 1;
  for (int i = 0; i < 300; ++i)
    deep = ojson::array({deep});
  EXPECT_NE(render_error("{{ x }}", {{"x", deep}}).find("nests deeper than 256"), std::string::npos);
}

TEST(jinja, a_render_is_bounded) {
  limits small;
  small.max_output_bytes = 1000;
  EXPECT_NE(render_error("{% for i in range(1000) %}xx{% endfor %}", ojson::object(), small).find("over 1000 bytes"),
            std::string::npos);
  small = {};
  small.max_steps = 500;
  EXPECT_NE(render_error("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", ojson::object(),
                         small)
              .find("more than 500 steps"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nest deeper than 64"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(1000000)|length }}").find("limited to 100000"), std::string::npos);
  EXPECT_NE(render_error("{{ 'x' * 100000000 }}").find("64 MiB"), std::string::npos);
  EXPECT_NE(render_error("{{ 'abcd' * 4611686018427387904 }}").find("64 MiB"), std::string::npos)
    << "a count whose product with the length wraps";
  EXPECT_NE(render_error("{{ (9**9 * [1, 2])|length }}").find("1,048,576 items"), std::string::npos);
  // An empty sequence repeated any number of times is empty at once.
  EXPECT_EQ(program("{{ ('' * 4611686018427387904)|length }}{{ ([] * 4611686018427387904)|length }}").render(
              ojson::object()),
            "00");
  EXPECT_EQ(program("{{ [1, 2] * 2 }}{{ 'ab' * 0 }}{{ 3 * 'x' }}").render(ojson::object()), "[1, 2, 1, 2]xxx");
  // Within the limits, the same program renders again and again, the same.
  const program p("{% for m in messages %}{{ loop.index }}:{{ m }};{% endfor %}");
  const ojson vars = {{"messages", {"a", "b"}}};
  EXPECT_EQ(p.render(vars), "1:a;2:b;");
  EXPECT_EQ(p.render(vars), "1:a;2:b;");
}

} // namespace
} // namespace troupe::jinja
