#include "tf_ps_ops/cc/cluster/notice.h"

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

namespace {

std::string Bounded(const std::string& text) {
  if (text.size() <= kMaxNoticeBytes) return text;
  return text.substr(0, kMaxNoticeBytes) + "... (cut)";
}

Header NoticeHeader(Code code) {
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kMemberNotice);
  h.status = static_cast<uint32_t>(code);
  return h;
}

}  // namespace

Status SendNotice(zmq::socket_t& scheduler, const Status& status, const std::string& warning) {
  return SendText(scheduler, "", NoticeHeader(status.code()),
                  Bounded(status.ok() ? warning : status.message()));
}

Status RelayNotice(zmq::socket_t& router, const std::string& identity, Code code,
                   const NoticeAbout& about, const std::string& text) {
  const std::string line = std::string("about=") +
                           (about.role == Role::kServer ? "server:" : "worker:") +
                           std::to_string(about.index) + "\n";
  return SendText(router, identity, NoticeHeader(code), line + Bounded(text));
}

namespace {

// "about=worker:2\n" at the start of `text`: strips it into *about. Strict: digits only.
void TakeAbout(std::string* text, NoticeAbout* about) {
  const size_t end = text->find('\n');
  if (text->rfind("about=", 0) != 0 || end == std::string::npos) return;
  const std::string line = text->substr(6, end - 6);
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return;
  const std::string role = line.substr(0, colon), digits = line.substr(colon + 1);
  if ((role != "worker" && role != "server") || digits.empty() || digits.size() > 7 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return;
  }
  about->role = role == "server" ? Role::kServer : Role::kWorker;
  about->index = std::stoi(digits);
  text->erase(0, end + 1);
}

}  // namespace

bool ReadNotice(const std::vector<zmq::message_t>& frames, Code* code, NoticeAbout* about,
                std::string* text) {
  if (frames.empty() || frames.size() > 2) return false;
  Head head;
  const size_t payload = frames.size() == 2 ? frames[1].size() : 0;
  if (!DecodeHead(frames[0].data(), frames[0].size(), payload, &head).ok() ||
      head.header.type != static_cast<uint16_t>(MsgType::kMemberNotice)) {
    return false;
  }
  switch (static_cast<Code>(head.header.status)) {
    case Code::kOk: case Code::kInvalidArgument: case Code::kDeadlineExceeded:
    case Code::kAlreadyExists: case Code::kFailedPrecondition: case Code::kAborted:
    case Code::kInternal: case Code::kUnavailable:
      *code = static_cast<Code>(head.header.status);
      break;
    default:  // a failure all the same
      *code = Code::kAborted;
  }
  std::string raw = frames.size() == 2 ? frames[1].to_string() : "";
  *about = NoticeAbout();
  TakeAbout(&raw, about);
  *text = EscapeForLog(raw, kMaxNoticeBytes + 16);
  return true;
}

bool ReadNotices(zmq::socket_t& scheduler, bool answer_pings, const NoticeHandler& on_failure,
                 const std::function<std::string(const std::string&)>& annotate) {
  std::vector<zmq::message_t> frames;
  while (RecvFrames(scheduler, &frames)) {
    if (AnswerPing(scheduler, frames, answer_pings)) continue;
    Code code = Code::kOk;
    NoticeAbout about;
    std::string text;
    if (!ReadNotice(frames, &code, &about, &text)) continue;
    if (code == Code::kOk) {
      TFPS_LOG(Warning) << (annotate ? annotate(text) : text);
      continue;
    }
    if (!on_failure(code, about, text)) return false;
  }
  return true;
}

Status SendPing(zmq::socket_t& router, const std::string& identity, uint64_t sequence) {
  Head head;
  head.header.type = static_cast<uint16_t>(MsgType::kPing);
  head.header.step = sequence;
  return SendMessage(router, identity, head, zmq::message_t());
}

bool AnswerPing(zmq::socket_t& scheduler, const std::vector<zmq::message_t>& frames,
                bool answer) {
  if (frames.empty() || frames.size() > 2) return false;
  Head head;
  const size_t payload = frames.size() == 2 ? frames[1].size() : 0;
  if (!DecodeHead(frames[0].data(), frames[0].size(), payload, &head).ok() ||
      head.header.type != static_cast<uint16_t>(MsgType::kPing)) {
    return false;
  }
  if (!answer) return true;
  Head pong;
  pong.header.type = static_cast<uint16_t>(MsgType::kPong);
  pong.header.step = head.header.step;
  (void)SendMessage(scheduler, "", pong, zmq::message_t());  // a lost answer: pinged again
  return true;
}

bool IsPong(const Header& header) {
  return header.type == static_cast<uint16_t>(MsgType::kPong);
}

std::string JobFailedMessage(const std::string& notice) {
  return "the job cannot go on: " + notice + " (the scheduler told every member)";
}

}  // namespace tfps
