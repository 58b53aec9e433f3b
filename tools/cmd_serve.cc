// `deepinfer serve`: the all-in-one OpenAI-compatible server (ARCHITECTURE.md §1, §3).
//
//   deepinfer serve --model DIR [--host 127.0.0.1] [--port 8000] [--served-model-name NAME...]
//                   [--api-key KEY] [--allowed-origins ORIGIN...] [--kv-cache-memory 1G]
//                   [--max-model-len N] [--max-num-seqs 64] ... (`deepinfer serve --help`)
//
// DEEPINFER_HF_MODEL_DIR is used when --model is absent. Loads the model and tokenizer, starts
// the engine and the HTTP server, prints "listening on http://HOST:PORT" once ready, and shuts
// down gracefully on SIGINT/SIGTERM: stops accepting, lets in-flight requests finish until
// --shutdown-timeout, aborts the rest, and exits 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "api/openai_server.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/cpu_features.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/engine.h"
#include "http/server.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/kv_tier_flags.h"

namespace deepinfer::cli {
namespace {

int Fail(const absl::Status& s) { return PrintCommandError("serve", s, 1); }

absl::StatusOr<int> PositiveInt(const FlagSet& flags, const char* name) {
  ASSIGN_OR_RETURN(int64_t v, flags.GetInt(name));
  if (v <= 0 || v > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a positive integer"));
  }
  return static_cast<int>(v);
}

}  // namespace

int RunServe(int argc, char** argv) {
  FlagSet flags("serve");
  flags.AddString("model", "", "Hugging Face model directory (default: $DEEPINFER_HF_MODEL_DIR)");
  flags.AddString("host", "127.0.0.1", "address to listen on");
  flags.AddString("port", "8000", "TCP port (0 = pick a free one)");
  flags.AddList("served-model-name", "",
                "model ids clients may use, e.g. `--served-model-name main alias` (vLLM: the "
                "first is reported in responses and metrics; default: the directory name)");
  flags.AddString("api-key", "",
                  "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on /v1/* routes");
  flags.AddList("allowed-origins", "",
                "CORS: origins browsers may call from ('*' = any; a JSON list or "
                "comma-separated); none = no CORS headers (vLLM allows '*' by default)");
  flags.AddList("allowed-methods", "*", "CORS: methods a preflight may ask for");
  flags.AddList("allowed-headers", "*", "CORS: request headers a preflight may ask for");
  flags.AddBool("allow-credentials", false, "CORS: allow credentialed requests (cookies)");
  flags.AddString("kv-cache-memory", "1G", "bytes for the KV cache (e.g. 512M, 4G)");
  flags.AddString("max-model-len", "0",
                  "context length (prompt + completion) per request; 0 = the model's");
  flags.AddString("max-num-seqs", "64", "maximum sequences running at once");
  flags.AddString("max-num-batched-tokens", "2048", "token budget per engine step");
  flags.AddString("max-waiting-requests", "4096",
                  "requests queued beyond this get HTTP 429 (engine overloaded)");
  flags.AddString("max-body-bytes", "33554432", "largest request body accepted (bigger: 413)");
  flags.AddString("max-connections", "1024", "open connections accepted at once (more: 503)");
  flags.AddString("request-timeout", "30",
                  "seconds a connection gets to send its request headers, and a request body may "
                  "stall (then 408; an idle new connection is closed)");
  flags.AddString("shutdown-timeout", "10", "seconds in-flight requests get on SIGINT/SIGTERM");
  flags.AddBool("async-scheduling", true, "overlap engine planning with the forward");
  AddPrefixCacheFlags(flags);
  AddDecodingFlags(flags);
  AddKvTierFlags(flags);
  if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  std::string model_dir = flags.GetString("model");
  if (model_dir.empty()) model_dir = Env().hf_model_dir;
  if (model_dir.empty()) {
    std::fprintf(stderr, "deepinfer serve: --model (or DEEPINFER_HF_MODEL_DIR) is required\n\n%s",
                 flags.Usage().c_str());
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> served_names = flags.GetList("served-model-name");
  if (!served_names.ok()) return PrintCommandError("serve", served_names.status(), 2);
  std::string served_name = served_names->empty() ? "" : served_names->front();
  if (served_name.empty()) {
    std::string trimmed = model_dir;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
    served_name = trimmed.substr(trimmed.find_last_of('/') + 1);
  }

  engine::EngineConfig engine_config;
  http::HttpServerConfig http_config;
  int64_t shutdown_timeout_s = 10;
  int64_t max_model_len_flag = 0;
  {
    absl::StatusOr<int64_t> kv =
        ParseByteSize("kv-cache-memory", flags.GetString("kv-cache-memory"));
    absl::StatusOr<int> seqs = PositiveInt(flags, "max-num-seqs");
    absl::StatusOr<int> batched = PositiveInt(flags, "max-num-batched-tokens");
    absl::StatusOr<int> waiting = PositiveInt(flags, "max-waiting-requests");
    absl::StatusOr<int> body = PositiveInt(flags, "max-body-bytes");
    absl::StatusOr<int> conns = PositiveInt(flags, "max-connections");
    absl::StatusOr<int> request_timeout = PositiveInt(flags, "request-timeout");
    absl::StatusOr<int64_t> port = flags.GetInt("port");
    absl::StatusOr<int64_t> timeout = flags.GetInt("shutdown-timeout");
    absl::StatusOr<int64_t> max_model_len = flags.GetInt("max-model-len");
    if (max_model_len.ok() && *max_model_len < 0) {
      max_model_len = absl::InvalidArgumentError("--max-model-len must be >= 0");
    }
    const absl::Status prefix = ApplyPrefixCacheFlags(flags, &engine_config);
    const absl::Status decoding = ApplyDecodingFlags(flags, &engine_config);
    absl::StatusOr<std::vector<std::string>> origins = flags.GetList("allowed-origins");
    absl::StatusOr<std::vector<std::string>> methods = flags.GetList("allowed-methods");
    absl::StatusOr<std::vector<std::string>> headers = flags.GetList("allowed-headers");
    for (const absl::Status& s :
         {kv.status(), seqs.status(), batched.status(), waiting.status(), body.status(),
          conns.status(), request_timeout.status(), port.status(), timeout.status(),
          max_model_len.status(), prefix, decoding, origins.status(), methods.status(), headers.status()}) {
      if (!s.ok()) return PrintCommandError("serve", s, 2);
    }
    http_config.cors.allowed_origins = *origins;
    http_config.cors.allowed_methods = *methods;
    http_config.cors.allowed_headers = *headers;
    http_config.cors.allow_credentials = flags.GetBool("allow-credentials");
    engine_config.kv_memory_bytes = *kv;
    engine_config.max_num_seqs = *seqs;
    engine_config.max_num_batched_tokens = *batched;
    engine_config.max_waiting_requests = *waiting;
    engine_config.async_scheduling = flags.GetBool("async-scheduling");
    http_config.host = flags.GetString("host");
    http_config.port = static_cast<int>(*port);
    http_config.max_body_bytes = *body;
    http_config.max_connections = *conns;
    http_config.request_timeout_s = *request_timeout;
    http_config.error_body = &api::ApiServer::TransportErrorBody;
    shutdown_timeout_s = std::max<int64_t>(0, *timeout);
    max_model_len_flag = *max_model_len;
  }

  // Block SIGINT/SIGTERM in every thread (they inherit the mask); the main thread waits for them
  // with sigwait below, so no handler runs in an arbitrary thread. SIGPIPE: a client that
  // vanished must not kill the server (writes report EPIPE instead).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (std::error_code ec; !std::filesystem::is_directory(model_dir, ec)) {
    return Fail(absl::NotFoundError(
        absl::StrCat("model directory ", model_dir, " does not exist or is not a directory")));
  }
  for (const char* file : {"config.json", "tokenizer.json"}) {
    if (std::error_code ec; !std::filesystem::exists(std::filesystem::path(model_dir) / file, ec)) {
      return Fail(absl::NotFoundError(
          absl::StrCat(model_dir, " is not a model directory: it has no ", file,
                       " (--model takes a Hugging Face model directory)")));
    }
  }
  Stopwatch load_watch;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromDirectory(model_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  absl::StatusOr<std::unique_ptr<model::CausalLM>> model = model::LoadModel(model_dir);
  if (!model.ok()) return Fail(model.status());
  const model::ModelInfo info = (*model)->info();
  LOG(INFO) << "loaded " << info.architecture << " from " << model_dir << " ("
            << info.num_parameters << " parameters, context " << info.max_context << ") in "
            << load_watch.ElapsedSeconds() << " s; CPU kernels: " << IsaName(kernels::KernelIsa());
  // The KV tiers (L1 host shared memory, L2 store) outlive the engine that uses them.
  absl::StatusOr<std::unique_ptr<KvTierSetup>> tiers = SetUpKvTiers(flags, (*model)->kv_layout());
  if (!tiers.ok()) return Fail(tiers.status());
  engine_config.tiers = (*tiers)->options;
  if (!(*tiers)->description.empty()) LOG(INFO) << "KV tiers: " << (*tiers)->description;
  absl::StatusOr<std::unique_ptr<engine::Engine>> engine =
      engine::Engine::Create(*std::move(model), engine_config);
  if (!engine.ok()) return Fail(engine.status());

  api::ApiServerOptions api_options;
  api_options.served_model_name = served_name;
  if (served_names->size() > 1) {
    api_options.served_model_aliases.assign(served_names->begin() + 1, served_names->end());
  }
  api_options.api_key = flags.GetString("api-key");
  api_options.max_model_len = max_model_len_flag;
  // vLLM's --generation-config auto: the model's generation_config.json fills omitted fields.
  absl::StatusOr<api::SamplingDefaults> generation = api::ReadGenerationConfig(model_dir);
  if (!generation.ok()) return Fail(generation.status());
  if (!generation->empty()) {
    LOG(INFO) << "sampling defaults from generation_config.json: " << generation->Describe();
  }
  api_options.sampling_defaults = *generation;
  api::ApiServer api_server(engine->get(), tokenizer->get(), api_options);
  if (!api_server.chat_unavailable_reason().empty()) {
    LOG(WARNING) << api_server.chat_unavailable_reason();
  }
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server = http::HttpServer::Start(
      http_config, [&api_server](const http::HttpRequest& req, http::ResponseWriter& w) {
        api_server.Handle(req, w);
      });
  if (!server.ok()) return Fail(server.status());
  const engine::EngineStats stats = (*engine)->Stats();
  LOG(INFO) << "serving model '" << served_name << "' with " << stats.kv_blocks_total
            << " KV blocks (" << stats.kv_blocks_total * model::kBlockTokens << " tokens)";
  std::fprintf(stdout, "deepinfer serve: listening on http://%s:%d (model '%s')\n",
               http_config.host.c_str(), (*server)->port(), served_name.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  LOG(INFO) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": shutting down (up to "
            << shutdown_timeout_s << " s for in-flight requests)";
  api_server.SetShuttingDown();
  // In-flight handlers finish within the deadline; after it their sockets are shut down, the
  // handlers see the client gone and abort their engine requests.
  (*server)->Shutdown(shutdown_timeout_s * 1000);
  if (const int stuck = (*server)->open_connections(); stuck > 0) {
    // A request thread busy in work that never looks at its socket (e.g. a huge JSON body being
    // parsed) must not hold the process past its deadline: exit without unwinding the objects
    // that thread may still use.
    LOG(WARNING) << "exiting with " << stuck << " request thread(s) still running";
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(0);
  }
  (*engine)->Shutdown(0);
  LOG(INFO) << "shut down cleanly";
  return 0;
}

}  // namespace deepinfer::cli
