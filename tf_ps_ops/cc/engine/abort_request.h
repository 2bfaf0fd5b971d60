// The push that aborts a round (kFlagAbortRound): `reason` travels as its uint8 bytes in one
// partition, and the servers answer it with the error they give every worker of that round.
// PsAbortCollective, the core binding's abort_collective and the hierarchical leader's abort
// for its host all send this.
#ifndef TFPS_ENGINE_ABORT_REQUEST_H_
#define TFPS_ENGINE_ABORT_REQUEST_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "tf_ps_ops/cc/engine/engine.h"

namespace tfps {

// `done` sees the servers' answer: an error is the expected end.
inline PushPullRequest AbortRoundRequest(std::string name, std::string reason,
                                         std::function<void(const Status&)> done) {
  auto text = std::make_shared<std::string>(std::move(reason));
  auto answer = std::make_shared<std::string>(text->size(), '\0');
  PushPullRequest request;
  request.name = std::move(name);
  request.dtype = DType::kUInt8;
  request.dims = {static_cast<int64_t>(text->size())};
  request.count = text->size();
  request.input = text->data();
  request.output = answer->data();
  request.input_holder = text;
  request.flags = kFlagAbortRound;
  request.done = [answer, done = std::move(done)](const Status& s) { done(s); };
  return request;
}

}  // namespace tfps

#endif  // TFPS_ENGINE_ABORT_REQUEST_H_
