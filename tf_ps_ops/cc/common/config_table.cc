// The table of the C++ side's environment variables (config.h): each one's name, type,
// default and doc, from which LoadConfig (config.cc) reads them and docs/env.md is
// generated.
#include "tf_ps_ops/cc/common/config.h"

namespace tfps {

const std::vector<ConfigEntry>& ConfigTable() {
  static const std::vector<ConfigEntry> table = {
      {"TFPS_TIMEOUT", "float", "120",
       "Seconds a wait on a member that has not proven alive yet may last: the rendezvous, "
       "connecting to the servers and peers, the hello, an elastic worker waiting for its "
       "place. Waits on members that are alive (a push_pull, a server waiting for a worker's "
       "push, join()) are bounded by TFPS_STALL_SHUTDOWN instead; a dead or stopped member "
       "fails them at once (docs/errors.md). At least 0.1; values above 2592000 (30 days) "
       "are used as 2592000, with a warning."},
      {"TFPS_STALL_WARNING", "float", "60",
       "While a collective waits on ranks that are alive but have not submitted it, every "
       "member logs a 'stall warning' every this many seconds, naming the tensor, the ranks "
       "that submitted it, the ranks missing and how long it has waited. 0: no warnings."},
      {"TFPS_STALL_SHUTDOWN", "float", "0",
       "Seconds such a stalled wait may last before it fails (and the job ends) with an error "
       "naming the tensor and the missing ranks. 0 (the default): never; a job is ended for a "
       "dead or stopped member, not for a slow one."},
      {"TFPS_HEARTBEAT_TIMEOUT", "float", "30",
       "Seconds without traffic or heartbeat after which a connection counts as dead (a host "
       "that vanished without closing its sockets); worker-to-worker connections carry no "
       "heartbeats, the scheduler's notice names a vanished worker to its peers. Also how long a member's serving thread "
       "(a worker's engine thread, a server's I/O thread) may leave the scheduler's pings "
       "unanswered, twice this plus 1 s, before it is named hung to everyone (application "
       "heartbeats, pinged every quarter of it). A server answers only while each of its "
       "summation threads progressed within this. At least 1; values above 6553.5 (the largest ZeroMQ can carry) are "
       "used as 6553.5, with a warning."},
      {"TFPS_PARTITION_BYTES", "int", "1048576",
       "Tensors are split into partitions of at most this many bytes; partitions are spread "
       "over the servers so one large tensor uses every server's link."},
      {"TFPS_SERVER_THREADS", "int", "2",
       "Summation threads per ps_server (keys are sharded over them)."},
      {"TFPS_IO_THREADS", "int", "0",
       "ZeroMQ I/O threads per worker and per ps_server: the threads that copy, frame and "
       "(with TFPS_AUTH_KEY_FILE) encrypt everything the process sends and receives. A "
       "worker pins its socket to each server and to each peer to these threads in turn, so "
       "its connections spread over them; a server (without a fixed --port) listens on one "
       "port per thread and worker r connects to port r mod their number. 1 to 64; 0 (the default): min(4, max(1, cores / 4)), one per four "
       "cores, at most four: the cores stay the training's and the summation threads', and "
       "one thread moves about 3 GB of plain TCP per CPU-second; more help a keyed job, whose "
       "encryption costs each end about a CPU-second per GB. The scheduler keeps one."},
      {"TFPS_LOG_LEVEL", "string", "info", "debug, info, warning or error."},
      {"TFPS_LOG_TIMESTAMP", "int", "1",
       "1: every log line of the engine and ps_server starts with the UTC time, e.g. "
       "`2026-12-01 20:15:03.123456 [tfps worker 1] INFO: ...`; 0: without it (tfps-run "
       "--log-without-timestamp)."},
      {"TFPS_CHECKPOINT_DIR", "string", "",
       "ps_server: a directory (shared by all servers) where each summation thread writes its "
       "part of the server's PS-mode parameters and slots, and from which a server restores "
       "them at start. Empty: no server checkpoints. A restart needs the same number of "
       "servers and TFPS_SERVER_THREADS (docs/ps_mode.md, Checkpoints)."},
      {"TFPS_CHECKPOINT_EVERY", "int", "100",
       "ps_server: a summation thread writes its file each time all the parameters it has "
       "updated reach the same update count, a multiple of this (in BSP: every this many "
       "steps). 0: never (the directory is only restored from)."},
      {"TFPS_SCHEDULING_CREDIT", "int", "0",
       "Bytes of partitions a worker keeps in flight to the servers; the rest wait in "
       "priority order (layers nearer the input first). A partition counts until its "
       "server acknowledges receipt (not until the sum), so workers that start tensors in "
       "different orders cannot wait on each other. 0: no limit, send everything at once."},
      {"TFPS_FUSION_BYTES", "int", "262144",
       "Small partitions ready at the same time for the same server travel as one message "
       "(a batch) of up to this many payload bytes, and a server answers a worker's ready "
       "replies the same way; partitions larger than this travel alone. 0: no batches."},
      {"TFPS_CYCLE_US", "int", "0",
       "Microseconds a worker's fusion batch may wait for more small partitions for its "
       "server before it leaves (Horovod's cycle time): tensors that a step starts one "
       "after another then travel together, at a cost of at most this much latency each. "
       "A full batch leaves at once. 0: a batch leaves in the engine's turn that began it "
       "(only what was queued together travels together). At most 100000."},
      {"TFPS_MAX_MESSAGE_BYTES", "int", "268435456",
       "Largest message part (frame) any role accepts or announces, in bytes: a peer that "
       "sends a larger frame is disconnected before it is buffered, and a header whose "
       "element count stands for more (also a push that carries no data) is refused before "
       "anything is allocated. TFPS_PARTITION_BYTES and TFPS_FUSION_BYTES may not exceed it; "
       "an allgather's tensor (per worker) must fit in it."},
      {"TFPS_PEER_QUEUE_BYTES", "int", "1073741824",
       "Bytes of worker-to-worker data (allgather, alltoall, SFB, neighbour exchanges) a "
       "worker keeps queued for peers that have not read what it sent before, all peers "
       "together. Beyond it the worker starts no new peer collective until peers read; a "
       "peer that reads none of it for TFPS_TIMEOUT fails the collectives that wait on it "
       "with an error naming it. At least 65536."},
      {"TFPS_SERVER_PUSH_BYTES", "int", "0",
       "ps_server: bytes a server holds for its workers: pushes not answered yet (queued for "
       "its summation threads, or waiting in a round for the other workers; a push counts "
       "the larger of its payload and the reply it stands for) and replies not yet taken by "
       "their worker's connection. Beyond it, a push "
       "from a worker that holds at least its share (this / workers) fails at once with an "
       "error naming the worker and the tensor; the others' pushes are still taken, so a "
       "server holds at most about twice this. Shared-memory pushes do not count. At least "
       "TFPS_MAX_MESSAGE_BYTES. 0 (the default): a quarter of the machine's memory, at "
       "least 2 GiB."},
      {"TFPS_AUTH_KEY_FILE", "string", "",
       "A file holding the job's CURVE secret key (40 Z85 characters; `ps_server --gen-key "
       "FILE` writes one). With it every connection of every role is encrypted and "
       "authenticated (ZeroMQ CURVE + ZAP): a peer without the same key gets nothing and "
       "changes nothing (docs/security.md). Empty: no authentication, plain TCP."},
      {"TFPS_BIND", "string", "*",
       "The address every role binds its listening socket to: * (every IPv4 interface), an "
       "IPv4 address such as 127.0.0.1 (loopback only), an IPv6 address (::1 or [::1] for "
       "loopback, :: for every interface, IPv4 too), or an interface name. A role that binds "
       "anything but loopback without TFPS_AUTH_KEY_FILE refuses to start (anyone who "
       "reaches the port could join), unless TFPS_INSECURE=1."},
      {"TFPS_INSECURE", "int", "0",
       "1: a role may bind beyond loopback without TFPS_AUTH_KEY_FILE (plain TCP, a warning; "
       "for a trusted network or a measurement). 0: it refuses to start "
       "(`ps_server --insecure`, `tfps-run --insecure` set it)."},
      {"TFPS_METRICS_PORT", "int", "",
       "The TCP port where this process answers HTTP GET /metrics with its counters in the "
       "Prometheus text format (docs/metrics.md), bound to TFPS_BIND under the same rule as "
       "the other sockets (beyond loopback only with the job's key or TFPS_INSECURE=1). 0: a "
       "free port, logged. Unset: no metrics port. `tfps-run --metrics-port BASE` gives each "
       "process it starts BASE plus an offset."},
      {"TFPS_TIMELINE", "string", "",
       "Path of a Chrome-trace JSON timeline each worker writes at shutdown (%r becomes the "
       "rank): every tensor's queued / scheduled / push / server / pull / written stages "
       "(push ends when the server has the worker's last partition, server when the sum or "
       "update is ready; clocks of different hosts are assumed in sync), and a peer "
       "collective's allgather / alltoall / neighbour exchange (until the latest peer's part "
       "arrived) and written."},
      {"TFPS_COMPRESSION", "string", "none",
       "Job default codec of push_pull for float32 tensors that ask for none themselves "
       "(Compression.none): none, fp16, bf16, int8, onebit, topk:R or randomk:R (R: the "
       "fraction kept, in [1/65536, 1]). Workers encode each partition, servers sum in float32 and "
       "re-encode the sum (docs/compression.md). Also the codec of PS-mode gradient pushes "
       "(PsApplyXXX, tf_ps_ops.optimizers), whose parameters come back uncompressed. Read by the "
       "workers; must agree between them."},
      {"TFPS_ERROR_FEEDBACK", "int", "1",
       "1: onebit, topk and randomk keep what each push_pull did not send (per tensor and "
       "partition, on the worker; per partition on the server for the sum) and add it to the "
       "next call. 0: no memory (the plain, biased codec)."},
      {"TFPS_CONSISTENCY", "string", "bsp",
       "The job's consistency model (docs/consistency.md): bsp (a push_pull or PS update of "
       "step t is answered once every worker pushed step t), ssp:S (once the slowest worker "
       "pushed step t-S; S from 0 to 1000000, ssp:0 is bsp) or asp (at once). Read by the "
       "workers, which must agree (the rendezvous refuses a worker that differs); the servers "
       "take it from the scheduler. Also `tf_ps_ops.init(consistency=...)`."},
      {"TFPS_CONSISTENCY_TRACE", "string", "",
       "ps_server, for tests and debugging: a directory where every summation thread appends "
       "one line per answer it releases under ssp/asp (reads-S-T.txt: rank, key, partition, "
       "step, the slowest worker's clock, pushes summed). Empty: no trace."},
      {"TFPS_HIERARCHICAL", "int", "1",
       "1: workers on the same host (local_size > 1) sum dense float32/float64/int32/int64 "
       "push_pulls locally through shared memory first; only local rank 0 talks to the "
       "servers and hands the sum back (docs/hierarchical.md; measured faster in every "
       "configuration, benchmarks/RESULTS.md). Must agree on every worker. 0: every worker "
       "pushes its own gradient (the flat path)."},
      {"TFPS_SHM_SERVER", "int", "1",
       "1: a worker and the ps_server on its own host exchange dense uncompressed partitions "
       "through shared memory (a sealed memfd per partition, named in /dev/shm after a random "
       "token the server hands out) instead of loopback TCP; only the 64-byte heads cross "
       "the socket (docs/hierarchical.md). Read by workers and servers. Used only after the "
       "server's probe segment proved both share /dev/shm; a partition whose segment cannot "
       "be reserved (memory limit) or that the server refuses takes the socket. 0: loopback "
       "TCP."},
      {"TFPS_NCCL_LIBRARY", "string", "",
       "CUDA builds: the path of libnccl.so.2 that sums the GPU tensors of one host's workers "
       "in hierarchical aggregation (docs/gpu.md). Empty: the dynamic linker's search path, "
       "then the nvidia-nccl-cu12/-cu13 wheel next to tf_ps_ops. When any local worker cannot "
       "open it (or sees no GPU), GPU tensors are summed through shared memory, logged once."},
  };
  return table;
}

}  // namespace tfps
