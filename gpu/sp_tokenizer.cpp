#include "gpu/sp_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <set>
#include <string_view>

namespace troupe::gpu {

namespace {

constexpr std::string_view space_marker = "\xE2\x96\x81"; // U+2581 LOWER ONE EIGHTH BLOCK

// "<0xAB>" -> 0xAB, or -1 when `piece` is not of that form.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
    return -1;
  int value = 0;
  for (const char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9')
      value |= c - '0';
    else if (c >= 'A' && c <= 'F')
      value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      value |= c - 'a' + 10;
    else
      return -1;
  }
  return value;
}

std::string replace_markers(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  std::size_t i = 0;
  while (i < piece.size()) {
    if (piece.substr(i, space_marker.size()) == space_marker) {
      out.push_back(' ');
      i += space_marker.size();
    } else {
      out.push_back(piece[i]);
      ++i;
    }
  }
  return out;
}

} // namespace

sp_tokenizer::sp_tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> p,
                           std::int32_t bos_id, std::int32_t eos_id, std::vector<added_token> added,
                           prefix_scheme prefix)
  : sp_(std::move(p)), bos_id_(bos_id), eos_id_(eos_id), prefix_(prefix) {
  const int n = sp_->GetPieceSize();
  pieces_.resize(static_cast<std::size_t>(n));
  // Control and unknown pieces join the added tokens: written in a text
  // (Llama 2's "</s><s>" between turns), each is the token itself, as
  // Hugging Face's Llama tokenizers read it (its tokenizer.json lists them
  // among its added tokens; a listed one is taken as listed).
  std::set<std::string> listed;
  for (const auto& a : added)
    listed.insert(a.content);
  for (int id = 0; id < n; ++id) {
    if (sp_->IsControl(id) || sp_->IsUnknown(id)) {
      if (const std::string& piece = sp_->IdToPiece(id); !piece.empty() && !listed.count(piece))
        added.push_back({.content = piece, .match = {}, .id = id, .special = true});
      continue;
    }
    if (sp_->IsUnused(id))
      continue;
    const std::string& piece = sp_->IdToPiece(id);
    if (sp_->IsByte(id)) {
      if (const int b = byte_piece_value(piece); b >= 0)
        pieces_[static_cast<std::size_t>(id)] = std::string(1, static_cast<char>(b));
      continue;
    }
    pieces_[static_cast<std::size_t>(id)] = replace_markers(piece);
  }
  // Added tokens: matched in the raw text, their ids past the pieces or
  // standing for one (Hugging Face's added vocabulary wins).
  for (auto& a : added) {
    const auto id = static_cast<std::size_t>(a.id);
    if (id >= pieces_.size())
      pieces_.resize(id + 1);
    pieces_[id] = a.special ? std::string{} : a.content;
    if (a.special)
      special_of_[a.id] = a.content;
    a.match = a.content;
    a.normalized = false;
  }
  added_ = added_vocabulary{std::move(added)};
  // A model that adds no dummy prefix has none to leave out.
  std::vector<std::string> probe;
  if (!sp_->Encode("a", &probe).ok() || probe.empty() || probe.front().rfind(space_marker, 0) != 0)
    prefix_ = prefix_scheme::always;
  if (prefix_ != prefix_scheme::always) {
    lead_ = sp_->unk_id() >= 0 ? sp_->IdToPiece(sp_->unk_id()) : std::string{};
    if (lead_.empty())
      lead_ = "<unk>";
    std::vector<int> lead;
    if (sp_->Encode(lead_, &lead).ok())
      lead_pieces_ = lead.size();
  }
}

sp_tokenizer::~sp_tokenizer() = default;

std::variant<std::unique_ptr<sp_tokenizer>, std::string>
sp_tokenizer::load(const std::string& model_path, std::int32_t bos_id, std::int32_t eos_id,
                   std::vector<added_token> added, prefix_scheme prefix) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (const auto status = sp->Load(model_path); !status.ok())
    return model_path + ": cannot load SentencePiece model: " + status.ToString();
  int n = sp->GetPieceSize();
  if (n <= 0)
    return model_path + ": SentencePiece model has no pieces";
  for (const auto& a : added)
    n = std::max(n, a.id + 1);
  if (bos_id >= n)
    return model_path + ": bos id " + std::to_string(bos_id) + " outside the vocabulary of " +
           std::to_string(n);
  if (eos_id >= n)
    return model_path + ": eos id " + std::to_string(eos_id) + " outside the vocabulary of " +
           std::to_string(n);
  return std::unique_ptr<sp_tokenizer>(
    new sp_tokenizer(std::move(sp), bos_id, eos_id, std::move(added), prefix));
}

void sp_tokenizer::encode_chunk(std::string_view chunk, bool prefixed, std::vector<std::int32_t>& ids) const {
  std::vector<int> pieces;
  if (chunk.empty())
    return;
  if (prefixed) {
    if (sp_->Encode(chunk, &pieces).ok()) // Encode only fails on an unloaded model, which load() rules out
      ids.insert(ids.end(), pieces.begin(), pieces.end());
    return;
  }
  std::string led = lead_;
  led.append(chunk);
  if (sp_->Encode(led, &pieces).ok() && pieces.size() >= lead_pieces_)
    ids.insert(ids.end(), pieces.begin() + static_cast<std::ptrdiff_t>(lead_pieces_), pieces.end());
}

std::vector<std::int32_t> sp_tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  if (bos_id_ >= 0)
    ids.push_back(bos_id_);
  // The text between special tokens' texts is encoded piece by piece, each
  // with the model's dummy prefix (as Meta's reference encodes each turn,
  // and Hugging Face's legacy Llama tokenizers each chunk), or only the
  // piece at the text's start (prefix_scheme first), or none.
  const auto chunk = [&](std::string_view piece) {
    const bool at_start = piece.data() == text.data();
    encode_chunk(piece, prefix_ == prefix_scheme::always || (prefix_ == prefix_scheme::first && at_start), ids);
  };
  added_.split(text, 0, ids, chunk);
  return ids;
}

std::string sp_tokenizer::decode(std::int32_t token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size())
    return {};
  return pieces_[static_cast<std::size_t>(token)];
}

std::string sp_tokenizer::special_text(std::int32_t token) const {
  const auto i = special_of_.find(token);
  return i == special_of_.end() ? std::string{} : i->second;
}

std::int32_t sp_tokenizer::vocab_size() const {
  return static_cast<std::int32_t>(pieces_.size());
}

} // namespace troupe::gpu
