// Shared memory with the workers on this server's host (TFPS_SHM_SERVER): their dense
// partitions come and go through a segment per (worker, key, partition) instead of
// loopback TCP; only heads cross the socket (kPushPullShm / kPushPullReplyShm).
//
// A worker asks for it in its hello (payload "shm"); the server answers with a fresh
// random token ("shm=<32 hex>") and from then on opens only /tfps-p<token>-<key>-<partition>
// for that connection: a name the server derives itself, so a peer can never make it open
// a segment of its choosing. The worker creates the segment (0600, O_EXCL); the server
// maps it on the first push, checks owner, mode and size, unlinks it, and keeps the
// mapping: it copies each push out at once (so a round never holds a worker's memory) and
// writes the answer into the same bytes. Owned by the I/O thread.
#ifndef TFPS_PS_SERVER_SHM_PEERS_H_
#define TFPS_PS_SERVER_SHM_PEERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <zmq.hpp>

#include "ps_server/buffer.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/transport/shm_segment.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class ShmPeers {
 public:
  explicit ShmPeers(bool enabled) : enabled_(enabled) {}

  // The hello reply's payload for `identity`'s hello payload: "shm=<token>" when it asked
  // and shared memory is on, else empty.
  std::string OnHello(const std::string& identity, const std::string& hello_payload);
  // A kPushPullShm: its payload copied out of the worker's segment into *payload (the
  // push then goes on as a kPushPull); the answer will go back the same way.
  Status Receive(const std::string& identity, const Header& h, zmq::message_t* payload);
  // An outgoing message for `identity`: if it answers a shared-memory push, writes the
  // payload into the segment, makes the head a kPushPullReplyShm and returns true (send
  // the head alone). Errors about such a push go out as they are.
  bool Answer(const std::string& identity, std::string* head, const Buffer& payload);
  void Forget(const std::string& identity);  // bye or gone: unmaps its segments

 private:
  using Part = std::pair<uint64_t, uint32_t>;                 // key, partition
  using Due = std::tuple<uint64_t, uint32_t, uint64_t>;       // key, partition, step
  struct Peer {
    std::string token;
    std::map<Part, std::unique_ptr<ShmSegment>> segments;
    std::set<Due> due;  // pushes received through shared memory, not yet answered
  };
  const bool enabled_;
  std::map<std::string, Peer> peers_;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_SHM_PEERS_H_
