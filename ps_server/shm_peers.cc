#include "ps_server/shm_peers.h"

#include <cstdio>
#include <cstddef>
#include <cstring>
#include <iterator>

namespace tfps {

ShmPeers::~ShmPeers() {
  for (auto& kv : peers_) DropProbe(&kv.second);
}

void ShmPeers::DropProbe(Peer* peer) {
  if (!peer->probe) return;
  peer->probe->Unlink();  // ENOENT is fine: the worker read it and unlinked it
  peer->probe.reset();
}

std::string ShmPeers::OnHello(const std::string& identity, const std::string& hello_payload) {
  if (!enabled_ || hello_payload != "shm") return "";
  Peer& peer = peers_[identity];
  DropProbe(&peer);
  peer.segments.clear();  // a new connection of the same rank: nothing carries over
  std::string nonce;
  ShmSegment* probe = nullptr;
  if (!NewShmToken(&peer.token).ok() || !NewShmToken(&nonce).ok() ||
      !ShmSegment::Create(ShmProbeName(peer.token), kShmProbeBytes, 0, -1, &probe,
                          "the probe of TFPS_SHM_SERVER", "TFPS_SHM_SERVER=0").ok()) {
    peers_.erase(identity);  // the socket then (a full /dev/shm, say)
    return "";
  }
  peer.probe.reset(probe);
  std::memcpy(probe->data(), nonce.data(), kShmProbeBytes);
  return "shm=" + peer.token + " probe=" + nonce;
}

Status ShmPeers::Receive(const std::string& identity, const Header& h, Buffer* payload,
                         std::shared_ptr<ShmSegment>* segment_out) {
  auto it = peers_.find(identity);
  if (it == peers_.end()) {
    return FailedPrecondition("a shared-memory push without a shared-memory hello "
                              "(TFPS_SHM_SERVER must agree between workers and servers)");
  }
  Peer& peer = it->second;
  DropProbe(&peer);
  const uint64_t bytes = h.count * DTypeSize(static_cast<DType>(h.dtype));
  std::shared_ptr<ShmSegment>& segment = peer.segments[Part(h.key, h.partition)];
  if (!segment) {
    char key_hex[17];
    std::snprintf(key_hex, sizeof(key_hex), "%016llx", static_cast<unsigned long long>(h.key));
    const std::string name = "/tfps-p" + peer.token + "-" + key_hex + "-" +
                             std::to_string(h.partition);
    ShmSegment* opened = nullptr;
    Status s = ShmSegment::Open(name, bytes, &opened);
    if (!s.ok() || opened == nullptr) {
      peer.segments.erase(Part(h.key, h.partition));
      TFPS_RETURN_IF_ERROR(s);
      return InvalidArgument("no shared memory " + name + " for this push");
    }
    segment.reset(opened);
    segment->Unlink();  // the worker and this server have it: no one else may
  }
  // What this server mapped, not the header's word for it: the worker can rewrite that.
  if (segment->capacity() != bytes) {
    return InvalidArgument("the shared memory of partition " + std::to_string(h.partition) +
                           " holds " + std::to_string(segment->capacity()) +
                           " bytes, the push says " + std::to_string(bytes));
  }
  *payload = Buffer::Borrow(segment->data(), bytes, segment);
  *segment_out = segment;
  return Status::Ok();
}

void ShmPeers::Forget(const std::string& identity) {
  auto it = peers_.find(identity);
  if (it == peers_.end()) return;
  DropProbe(&it->second);
  peers_.erase(it);
}

}  // namespace tfps

namespace tfps {

void ShmAnswers::Expect(const std::string& identity, const Header& push,
                        std::shared_ptr<ShmSegment> segment) {
  due_[Due(identity, push.key, push.partition, push.step)] = std::move(segment);
}

void ShmAnswers::Fill(std::vector<Outgoing>* replies) {
  if (due_.empty()) return;
  for (Outgoing& o : *replies) {
    if (o.head.size() < sizeof(Header)) continue;
    Header h;
    std::memcpy(&h, o.head.data(), sizeof(Header));
    auto it = due_.find(Due(o.identity, h.key, h.partition, h.step));
    if (it == due_.end()) continue;
    std::shared_ptr<ShmSegment> segment = std::move(it->second);
    due_.erase(it);
    if (h.type != static_cast<uint16_t>(MsgType::kPushPullReply) ||
        segment->capacity() != o.payload.size()) {
      continue;  // an error (or, cannot happen, a size the worker would refuse): as it is
    }
    if (o.payload.size() > 0 && o.payload.data() != segment->data()) {
      std::memcpy(segment->data(), o.payload.data(), o.payload.size());
    }
    const auto type = static_cast<uint16_t>(MsgType::kPushPullReplyShm);
    std::memcpy(&o.head[offsetof(Header, type)], &type, sizeof(type));
    o.payload = Buffer();  // the head goes alone
  }
}

void ShmAnswers::Forget(const std::string& identity) {
  for (auto it = due_.begin(); it != due_.end();) {
    it = std::get<0>(it->first) == identity ? due_.erase(it) : std::next(it);
  }
}

}  // namespace tfps
