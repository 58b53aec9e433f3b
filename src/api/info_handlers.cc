// /tokenize, /detokenize, /v1/models, /metrics and /reset_prefix_cache.
#include "absl/strings/str_cat.h"
#include "api/codec_util.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "common/logging.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

void ApiServer::Impl::HandleTokenize(const http::HttpRequest& req, RecordingWriter& w) {
  absl::StatusOr<OJson> parsed = codec_util::ParseObjectBody(req.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  const OJson& body = *parsed;
  const Tokenizer& tok = *s->tokenizer_;
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    absl::StatusOr<ChatCompletionRequest> chat = ParseChatCompletionRequest(req.body);
    if (!chat.ok()) return SendError(w, chat.status());
    if (!s->family_) {
      return SendError(w, absl::FailedPreconditionError(s->chat_unavailable_));
    }
    protocol::EncodeOptions options;
    options.family = *s->family_;
    options.thinking = chat->thinking.value_or(true);
    absl::StatusOr<protocol::EncodedPrompt> encoded =
        protocol::EncodePrompt(chat->conversation, options);
    if (!encoded.ok()) return SendError(w, encoded.status());
    absl::StatusOr<std::vector<int32_t>> r = protocol::PromptToIds(*encoded, tok);
    if (!r.ok()) return SendError(w, absl::InternalError(std::string(r.status().message())));
    ids = *std::move(r);
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) {
      return SendError(
          w, WithParam(absl::InvalidArgumentError("'prompt' must be a string"), "prompt"));
    }
    bool add_special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end() && !a->is_null()) {
      if (!a->is_boolean()) {
        return SendError(
            w, WithParam(absl::InvalidArgumentError("'add_special_tokens' must be a boolean"),
                         "add_special_tokens"));
      }
      add_special = a->get<bool>();
    }
    if (add_special && tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    std::vector<int32_t> text = tok.EncodeText(it->get<std::string>());
    ids.insert(ids.end(), text.begin(), text.end());
  }
  SendJson(w, 200, {{"count", ids.size()}, {"max_model_len", MaxModelLen()}, {"tokens", ids}});
}

void ApiServer::Impl::HandleDetokenize(const http::HttpRequest& req, RecordingWriter& w) {
  absl::StatusOr<OJson> parsed = codec_util::ParseObjectBody(req.body);
  if (!parsed.ok()) return SendError(w, parsed.status());
  const OJson& body = *parsed;
  auto it = body.find("tokens");
  absl::Status bad = WithParam(
      absl::InvalidArgumentError("'tokens' must be an array of token ids in the vocabulary"),
      "tokens");
  if (it == body.end() || !it->is_array()) return SendError(w, bad);
  std::vector<int32_t> ids;
  const int64_t vocab = s->tokenizer_->vocab_size();
  for (const OJson& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      return SendError(w, bad);
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  SendJson(w, 200, {{"prompt", s->tokenizer_->Decode(ids)}});
}

void ApiServer::Impl::HandleModels(const http::HttpRequest& req, RecordingWriter& w) {
  const std::string name =
      s->options_.served_model_name.empty() ? "deepinfer" : s->options_.served_model_name;
  const int64_t created = UnixSeconds();
  auto card = [&](const std::string& id) {
    // vLLM lists every served name as its own card; `root` is the model they all serve.
    return OJson{{"id", id},           {"object", "model"},
                 {"created", created}, {"owned_by", "deepinfer"},
                 {"root", name},       {"max_model_len", MaxModelLen()}};
  };
  if (req.path == "/v1/models") {
    OJson data = OJson::array({card(name)});
    for (const std::string& alias : s->options_.served_model_aliases) data.push_back(card(alias));
    SendJson(w, 200, {{"object", "list"}, {"data", std::move(data)}});
    return;
  }
  std::string wanted = req.path.substr(std::string("/v1/models/").size());
  if (absl::Status st = CheckModel(wanted); !st.ok() || wanted.empty()) {
    return SendError(w, st.ok() ? absl::NotFoundError("model id missing") : st);
  }
  SendJson(w, 200, card(wanted.empty() || s->options_.served_model_name.empty() ? name : wanted));
}

void ApiServer::Impl::HandleMetrics(RecordingWriter& w) {
  engine_metrics->Update(s->backend_->Stats());
  w.Send(200, http::MetricsRegistry::kContentType, s->metrics_.RenderText(), {});
}

void ApiServer::Impl::HandleResetPrefixCache(RecordingWriter& w) {
  const engine::EngineStats before = s->backend_->Stats();
  s->backend_->ResetPrefixCache();
  const engine::EngineStats after = s->backend_->Stats();
  LOG(INFO) << "prefix cache reset: " << before.prefix_cache_blocks << " cached blocks and "
            << before.snapshots << " snapshots before, " << after.prefix_cache_blocks
            << " blocks (held by running requests) and " << after.snapshots << " snapshots after";
  SendJson(w, 200, {{"status", "ok"}});
}

}  // namespace deepinfer::api
