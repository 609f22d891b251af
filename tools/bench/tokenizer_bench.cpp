// troupe-tokenizer-bench: what turning a prompt into token ids costs the
// intake, for the byte-level BPE tokenizer (tokenizer.json) at two
// vocabulary sizes learnt from troupe-mkmodel's corpus, with Llama 3's
// pre-tokenizer, and for a SentencePiece model of the same corpus when
// TROUPE_SP_MODEL names one (troupe-mkmodel --vocab N writes it); and what
// Qwen2's NFC normalizer adds, on the corpus and on the corpus with every
// "e" written as "e" + U+0301 (which NFC composes). Each iteration encodes
// the whole corpus (22 KB of English prose); the counters are bytes and
// tokens per second.
// Usage: [TROUPE_SP_MODEL=DIR/tokenizer.model] troupe-tokenizer-bench [google-benchmark flags]
#include "gpu/bpe_tokenizer.hpp"
#include "gpu/sp_tokenizer.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#ifndef TROUPE_MKMODEL_CORPUS
#define TROUPE_MKMODEL_CORPUS "tools/mkmodel/corpus.txt"
#endif

namespace {

using namespace troupe::gpu;

const std::string& corpus() {
  static const std::string text = [] {
    std::ifstream f{TROUPE_MKMODEL_CORPUS, std::ios::binary};
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }();
  return text;
}

/// The corpus with each "e" followed by U+0301 COMBINING ACUTE ACCENT.
const std::string& accented() {
  static const std::string text = [] {
    std::string s;
    for (const char c : corpus()) {
      s += c;
      if (c == 'e')
        s += "\xcc\x81";
    }
    return s;
  }();
  return text;
}

std::unique_ptr<bpe_tokenizer> parsed(const bpe_training& o) {
  auto r = bpe_tokenizer::parse(train_bpe_json(corpus(), o).json, "trained", -1);
  return std::move(std::get<std::unique_ptr<bpe_tokenizer>>(r));
}

std::unique_ptr<bpe_tokenizer> trained(std::uint32_t vocab, bool ignore_merges) {
  bpe_training o;
  o.vocab_size = vocab;
  o.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
  o.bos_token = "<|begin_of_text|>";
  o.ignore_merges = ignore_merges;
  return parsed(o);
}

/// Qwen2's set-up (its pre-tokenizer, no BOS), with or without its NFC normalizer.
std::unique_ptr<bpe_tokenizer> qwen2_like(bool nfc) {
  bpe_training o;
  o.vocab_size = 4096;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  o.pattern = std::string{qwen2_split_pattern};
  o.ignore_merges = false;
  o.normalizer = nfc ? "NFC" : "";
  return parsed(o);
}

void encode_all(benchmark::State& state, const tokenizer& t, const std::string& text = corpus()) {
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["tokens_per_s"] =
    benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

void bm_bpe_encode(benchmark::State& state) {
  static std::unique_ptr<bpe_tokenizer> small = trained(1024, true), large = trained(4096, true),
                                        merged = trained(4096, false);
  const auto& t = state.range(0) == 1024 ? *small : state.range(1) != 0 ? *large : *merged;
  encode_all(state, t);
}
BENCHMARK(bm_bpe_encode)->ArgNames({"vocab", "ignore_merges"})->Args({1024, 1})->Args({4096, 1})->Args({4096, 0});

void bm_bpe_normalizer(benchmark::State& state) {
  static std::unique_ptr<bpe_tokenizer> plain = qwen2_like(false), nfc = qwen2_like(true);
  encode_all(state, state.range(0) != 0 ? *nfc : *plain, state.range(1) != 0 ? accented() : corpus());
}
BENCHMARK(bm_bpe_normalizer)->ArgNames({"nfc", "accented"})->ArgsProduct({{0, 1}, {0, 1}});

void bm_sentencepiece_encode(benchmark::State& state) {
  static auto t = [] {
    auto r = sp_tokenizer::load(std::getenv("TROUPE_SP_MODEL"), 1, 2);
    if (auto* err = std::get_if<std::string>(&r)) {
      std::cerr << *err << "\n";
      std::exit(1);
    }
    return std::move(std::get<std::unique_ptr<sp_tokenizer>>(r));
  }();
  encode_all(state, *t);
}

} // namespace

int main(int argc, char** argv) {
  if (const char* sp = std::getenv("TROUPE_SP_MODEL"); sp != nullptr && *sp != '\0')
    benchmark::RegisterBenchmark("bm_sentencepiece_encode", bm_sentencepiece_encode);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
