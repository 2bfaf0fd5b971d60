#include "tf_ps_ops/cc/engine/timeline.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void Timeline::Open(const std::string& path, int rank) {
  path_ = path;
  const size_t mark = path_.find("%r");
  if (mark != std::string::npos) path_.replace(mark, 2, std::to_string(rank));
  rank_ = rank;
  origin_ = Clock::now();
  origin_wall_us_ = WallMicros();
  events_.clear();
}

void Timeline::Record(const std::string& tensor, const char* stage, Clock::time_point begin,
                      Clock::time_point end, uint64_t bytes) {
  if (!enabled()) return;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  events_.push_back(Event{tensor, stage, duration_cast<microseconds>(begin - origin_).count(),
                          duration_cast<microseconds>(end - begin).count(), bytes});
}

Timeline::Clock::time_point Timeline::FromWallMicros(double us) const {
  return origin_ + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double, std::micro>(us - origin_wall_us_));
}

void Timeline::Close() {
  path_.clear();
  events_.clear();
  mark_cycles_ = false;
}

void Timeline::MarkCycle() {
  if (!enabled() || !mark_cycles_) return;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  events_.push_back(Event{"", "CYCLE_START",
                          duration_cast<microseconds>(Clock::now() - origin_).count(), -1, 0});
}

Status Timeline::Write() {
  if (!enabled()) return Status::Ok();
  // One row (tid) per tensor, in order of first appearance, named after the tensor.
  std::map<std::string, int> lanes;
  for (const Event& e : events_) {
    if (e.duration_us >= 0) lanes.emplace(e.tensor, static_cast<int>(lanes.size()));
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    out << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank_
        << ", \"args\": {\"name\": \"worker " << rank_ << "\"}}";
    for (const auto& lane : lanes) {
      out << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank_
          << ", \"tid\": " << lane.second << ", \"args\": {\"name\": " << JsonString(lane.first)
          << "}}";
    }
    for (const Event& e : events_) {
      if (e.duration_us < 0) {  // a cycle mark: process-wide instant event
        out << ",\n{\"name\": \"" << e.stage << "\", \"cat\": \"tfps\", \"ph\": \"i\", "
            << "\"s\": \"p\", \"pid\": " << rank_ << ", \"tid\": 0, \"ts\": " << e.begin_us
            << "}";
        continue;
      }
      out << ",\n{\"name\": \"" << e.stage << "\", \"cat\": \"tfps\", \"ph\": \"X\", \"pid\": "
          << rank_ << ", \"tid\": " << lanes[e.tensor] << ", \"ts\": " << e.begin_us
          << ", \"dur\": " << e.duration_us << ", \"args\": {\"tensor\": "
          << JsonString(e.tensor) << ", \"bytes\": " << e.bytes << "}}";
    }
    out << "\n]}\n";
    if (!out.good()) return Internal("cannot write the timeline " + tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Internal("cannot rename the timeline to " + path_);
  }
  return Status::Ok();
}

}  // namespace tfps
