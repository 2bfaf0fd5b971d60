// Shared memory with the workers on this server's host (TFPS_SHM_SERVER): their dense
// partitions come and go through a segment per (worker, key, partition) instead of
// loopback TCP; only heads cross the socket (kPushPullShm / kPushPullReplyShm).
//
// A worker asks for it in its hello (payload "shm"); the server answers with a fresh
// random token and a probe ("shm=<32 hex> probe=<32 hex>"): it has created /tfps-q<token>
// holding the probe's nonce, and the worker uses shared memory only when it can open that
// segment and reads the nonce there (containers with host networking share the address,
// not /dev/shm). Whoever comes first unlinks the probe: the worker after reading it, the
// server at the first shared-memory push, on bye or loss of the peer, and at exit. From
// then on the server opens only /tfps-p<token>-<key>-<partition>
// for that connection: a name the server derives itself, so a peer can never make it open
// a segment of its choosing. The worker creates the segment (0600, O_EXCL); the server
// maps it on the first push, checks owner, mode and size, unlinks it, and keeps the
// mapping. The push is summed straight out of the segment (a borrowed Buffer, buffer.h,
// that keeps the mapping alive: a worker that dies or reconnects frees nothing the
// summation threads still read), and the summation thread that answers writes the sum into
// the same bytes (ShmAnswers) before the I/O thread sends the head alone. The worker
// writes the next push there only after that head came. The table is the I/O thread's.
#ifndef TFPS_PS_SERVER_SHM_PEERS_H_
#define TFPS_PS_SERVER_SHM_PEERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "ps_server/buffer.h"
#include "ps_server/outgoing.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/transport/shm_segment.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class ShmPeers {
 public:
  explicit ShmPeers(bool enabled) : enabled_(enabled) {}
  ~ShmPeers();  // unlinks the probes no worker opened
  ShmPeers(const ShmPeers&) = delete;
  ShmPeers& operator=(const ShmPeers&) = delete;

  // The hello reply's payload for `identity`'s hello payload: "shm=<token> probe=<nonce>"
  // when it asked, shared memory is on and the probe could be created, else empty.
  std::string OnHello(const std::string& identity, const std::string& hello_payload);
  // A kPushPullShm: its payload, borrowed from the worker's segment (no copy), and the
  // segment the answer goes into.
  Status Receive(const std::string& identity, const Header& h, Buffer* payload,
                 std::shared_ptr<ShmSegment>* segment);
  void Forget(const std::string& identity);  // bye or gone: unmaps its segments

 private:
  using Part = std::pair<uint64_t, uint32_t>;  // key, partition
  struct Peer {
    std::string token;
    std::unique_ptr<ShmSegment> probe;  // until the first shared-memory push
    std::map<Part, std::shared_ptr<ShmSegment>> segments;
  };
  static void DropProbe(Peer* peer);
  const bool enabled_;
  std::map<std::string, Peer> peers_;
};

// A summation thread's shared-memory pushes not yet answered: each answer for one of
// them is written into its segment, and the reply becomes a kPushPullReplyShm head alone.
class ShmAnswers {
 public:
  void Expect(const std::string& identity, const Header& push,
              std::shared_ptr<ShmSegment> segment);
  // Rewrites the replies that answer expected pushes (errors go out as they are).
  void Fill(std::vector<Outgoing>* replies);
  void Forget(const std::string& identity);  // a lost worker: nothing of it is due

 private:
  using Due = std::tuple<std::string, uint64_t, uint32_t, uint64_t>;  // who, key, part, step
  std::map<Due, std::shared_ptr<ShmSegment>> due_;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_SHM_PEERS_H_
