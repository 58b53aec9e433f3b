// The engine as the API layer uses it (ARCHITECTURE.md §3): the five calls the route handlers
// make. LocalEngineBackend forwards to an in-process engine::Engine; the cluster stage puts a
// remote backend (a prefill / decode service reached over the network) behind the same
// interface, so the handlers do not change.
//
// Thread-safety: every method may be called from any HTTP worker thread at once.
#ifndef DEEPINFER_API_ENGINE_BACKEND_H_
#define DEEPINFER_API_ENGINE_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "model/model.h"

namespace deepinfer::api {

class EngineBackend {
 public:
  virtual ~EngineBackend() = default;

  // Starts a generation request; its outputs arrive on the returned stream. Errors (as
  // engine::Engine::Submit): InvalidArgument (bad parameters), FailedPrecondition (not
  // accepting), ResourceExhausted (queue full), AlreadyExists (duplicate id).
  virtual absl::StatusOr<std::shared_ptr<engine::RequestStream>> Submit(
      engine::GenerateRequest request) = 0;
  // Ends a live request at any point (its samples finish with FinishReason::kAbort); unknown or
  // finished ids are ignored.
  virtual void Abort(const std::string& request_id) = 0;
  // A snapshot of the counters and gauges /metrics and the capacity checks read.
  virtual engine::EngineStats Stats() const = 0;
  // The served model's shape (context length, vocabulary, EOS ids, model type).
  virtual const model::ModelInfo& model_info() const = 0;
  // Empties the prefix cache (blocks held by running requests stay theirs); returns when done.
  virtual void ResetPrefixCache() = 0;
};

// The in-process engine. `engine` is not owned and must outlive the backend.
class LocalEngineBackend final : public EngineBackend {
 public:
  explicit LocalEngineBackend(engine::Engine* engine) : engine_(engine) {}

  absl::StatusOr<std::shared_ptr<engine::RequestStream>> Submit(
      engine::GenerateRequest request) override {
    return engine_->Submit(std::move(request));
  }
  void Abort(const std::string& request_id) override { engine_->Abort(request_id); }
  engine::EngineStats Stats() const override { return engine_->Stats(); }
  const model::ModelInfo& model_info() const override { return engine_->model_info(); }
  void ResetPrefixCache() override { engine_->ResetPrefixCache(); }

 private:
  engine::Engine* engine_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_ENGINE_BACKEND_H_
