#include "ps_server/shm_peers.h"

#include <cstdio>
#include <cstring>

namespace tfps {

std::string ShmPeers::OnHello(const std::string& identity, const std::string& hello_payload) {
  if (!enabled_ || hello_payload != "shm") return "";
  Peer& peer = peers_[identity];
  peer.segments.clear();  // a new connection of the same rank: nothing carries over
  peer.due.clear();
  if (!NewShmToken(&peer.token).ok()) {
    peers_.erase(identity);
    return "";
  }
  return "shm=" + peer.token;
}

Status ShmPeers::Receive(const std::string& identity, const Header& h, zmq::message_t* payload) {
  auto it = peers_.find(identity);
  if (it == peers_.end()) {
    return FailedPrecondition("a shared-memory push without a shared-memory hello "
                              "(TFPS_SHM_SERVER must agree between workers and servers)");
  }
  Peer& peer = it->second;
  const uint64_t bytes = h.count * DTypeSize(static_cast<DType>(h.dtype));
  std::unique_ptr<ShmSegment>& segment = peer.segments[Part(h.key, h.partition)];
  if (!segment) {
    char key_hex[17];
    std::snprintf(key_hex, sizeof(key_hex), "%016llx", static_cast<unsigned long long>(h.key));
    const std::string name = "/tfps-p" + peer.token + "-" + key_hex + "-" +
                             std::to_string(h.partition);
    ShmSegment* opened = nullptr;
    TFPS_RETURN_IF_ERROR(ShmSegment::Open(name, bytes, &opened));
    if (opened == nullptr) {
      peer.segments.erase(Part(h.key, h.partition));
      return InvalidArgument("no shared memory " + name + " for this push");
    }
    segment.reset(opened);
    segment->Unlink();  // the worker and this server have it: no one else may
  }
  if (segment->header()->bytes != bytes) {
    return InvalidArgument("the shared memory of partition " + std::to_string(h.partition) +
                           " holds " + std::to_string(segment->header()->bytes) +
                           " bytes, the push says " + std::to_string(bytes));
  }
  zmq::message_t copy(bytes);
  if (bytes > 0) std::memcpy(copy.data(), segment->data(), bytes);
  *payload = std::move(copy);
  peer.due.insert(Due(h.key, h.partition, h.step));
  return Status::Ok();
}

bool ShmPeers::Answer(const std::string& identity, std::string* head, const Buffer& payload) {
  if (peers_.empty() || head->size() < sizeof(Header)) return false;
  auto it = peers_.find(identity);
  if (it == peers_.end()) return false;
  Header h;
  std::memcpy(&h, head->data(), sizeof(Header));
  Peer& peer = it->second;
  auto due = peer.due.find(Due(h.key, h.partition, h.step));
  if (due == peer.due.end()) return false;
  peer.due.erase(due);
  if (h.type != static_cast<uint16_t>(MsgType::kPushPullReply)) return false;  // an error
  auto segment = peer.segments.find(Part(h.key, h.partition));
  if (segment == peer.segments.end() || segment->second->header()->bytes != payload.size()) {
    return false;  // cannot happen; the worker gets it over the socket then, and refuses
  }
  if (payload.size() > 0) std::memcpy(segment->second->data(), payload.data(), payload.size());
  const auto type = static_cast<uint16_t>(MsgType::kPushPullReplyShm);
  std::memcpy(&(*head)[offsetof(Header, type)], &type, sizeof(type));
  return true;
}

void ShmPeers::Forget(const std::string& identity) { peers_.erase(identity); }

}  // namespace tfps
