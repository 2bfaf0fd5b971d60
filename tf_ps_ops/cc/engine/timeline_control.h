// Starting and stopping the engine's timeline at run time (Horovod's start_timeline /
// stop_timeline): the calling thread hands the change to the engine thread, which owns the
// timeline (timeline.h), and waits for it. TFPS_TIMELINE starts one at init instead.
#ifndef TFPS_CC_ENGINE_TIMELINE_CONTROL_H_
#define TFPS_CC_ENGINE_TIMELINE_CONTROL_H_

#include <functional>
#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

// Records from now on into `path` ("%r" becomes the rank). A timeline already recording is
// written to its file first. `mark_cycles`: an instant "CYCLE_START" event each time the
// engine thread takes new requests (Horovod's cycle markers).
Status StartTimeline(const std::string& path, bool mark_cycles);
// Writes the recording timeline's file and stops recording; nothing to do if none is.
Status StopTimeline();

class Timeline;  // timeline.h
// Engine::Init's side: how the two reach the running engine thread. `post` hands it a task
// and says whether the engine took it (false: stopping or gone).
using TimelinePoster = std::function<bool(std::function<void(Timeline&, int rank)>)>;
void SetTimelinePoster(TimelinePoster post);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_TIMELINE_CONTROL_H_
