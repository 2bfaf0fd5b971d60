#include "ps_server/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "ps_server/thread_shard.h"

namespace tfps {

namespace {

// The layout in checkpoint.h. Fields are copied as they lie in memory: little-endian, like
// the wire protocol.
constexpr char kFileMagic[8] = {'T', 'F', 'P', 'S', 'C', 'K', 'P', 'T'};
constexpr char kEndMagic[4] = {'T', 'F', 'P', 'E'};

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  int32_t server_id;
  int32_t num_servers;
  int32_t thread;
  int32_t num_threads;
  uint64_t num_records;
};
struct RecordHeader {
  uint64_t key;
  uint32_t partition;
  uint8_t dtype;
  uint8_t optimizer;
  uint8_t num_slots;
  uint8_t reserved;
  uint64_t count;
  uint64_t updates;
};
struct Trailer {
  uint64_t body_bytes;
  uint32_t crc;
  char end_magic[4];
};
#pragma pack(pop)
static_assert(sizeof(FileHeader) == 40 && sizeof(RecordHeader) == 32 && sizeof(Trailer) == 16,
              "the checkpoint layout is fixed");

std::string Errno() { return std::strerror(errno); }

// Appends to a file, keeping the CRC and byte count of everything appended.
class Writer {
 public:
  explicit Writer(std::FILE* file) : file_(file) {}
  bool Put(const void* data, size_t size) {
    crc_ = Crc32(crc_, data, size);
    bytes_ += size;
    return size == 0 || std::fwrite(data, 1, size, file_) == size;
  }
  uint32_t crc() const { return crc_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::FILE* file_;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

// Reads a file of known size, refusing to read past its end, keeping the CRC.
class Reader {
 public:
  Reader(std::FILE* file, uint64_t size, const std::string& path)
      : file_(file), size_(size), path_(path) {}
  Status Get(void* out, uint64_t size, const std::string& what) {
    if (size > size_ - offset_) {
      return Corrupt("it is truncated: " + what + " at byte " + std::to_string(offset_) +
                     " needs " + std::to_string(size) + " bytes, the file has " +
                     std::to_string(size_));
    }
    if (size > 0 && std::fread(out, 1, size, file_) != size) {
      return Internal("cannot read checkpoint file " + path_ + ": " + Errno());
    }
    crc_ = Crc32(crc_, out, size);
    offset_ += size;
    return Status::Ok();
  }
  Status Corrupt(const std::string& why) const {
    return FailedPrecondition("checkpoint file " + path_ + " is corrupt: " + why +
                              "; restore a good copy or empty the directory to start afresh");
  }
  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }
  uint32_t crc() const { return crc_; }

 private:
  std::FILE* file_;
  const uint64_t size_;
  const std::string path_;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open directory " + dir + " to sync it: " + Errno());
  const bool ok = fsync(fd) == 0;
  const std::string why = ok ? "" : Errno();
  close(fd);
  if (!ok) return Internal("cannot sync directory " + dir + ": " + why);
  return Status::Ok();
}

// Checks one record's header; `room` is the number of bytes left for its data.
Status CheckRecord(const RecordHeader& r, uint64_t room, const Reader& reader) {
  const DType dtype = static_cast<DType>(r.dtype);
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return reader.Corrupt("a parameter has dtype code " + std::to_string(r.dtype) +
                          " (PS mode holds float32 and float64)");
  }
  if (r.optimizer > kMaxOptimizer) {
    return reader.Corrupt("unknown optimizer code " + std::to_string(r.optimizer));
  }
  const int slots = OptimizerSlotCount(static_cast<Optimizer>(r.optimizer));
  if (r.num_slots != slots) {
    return reader.Corrupt("a parameter updated with " +
                          std::string(OptimizerName(static_cast<Optimizer>(r.optimizer))) +
                          " has " + std::to_string(r.num_slots) + " slots, not " +
                          std::to_string(slots));
  }
  if (r.updates > kMaxCheckpointUpdates) {
    return reader.Corrupt("the parameter with key " + std::to_string(r.key) + ", partition " +
                          std::to_string(r.partition) + " has field 'updates' = " +
                          std::to_string(r.updates) + ", above the most a server counts (2^62 "
                          "= " + std::to_string(kMaxCheckpointUpdates) + ")");
  }
  if (r.count == 0 || r.count > kMaxElements ||
      r.count * DTypeSize(dtype) * (1 + uint64_t{r.num_slots}) > room) {
    return reader.Corrupt("a parameter of " + std::to_string(r.count) +
                          " elements does not fit in the " + std::to_string(room) +
                          " bytes left (truncated?)");
  }
  return Status::Ok();
}

Status ReadRecords(Reader& reader, const FileHeader& h, ShardParams* params) {
  for (uint64_t i = 0; i < h.num_records; ++i) {
    RecordHeader r;
    TFPS_RETURN_IF_ERROR(reader.Get(&r, sizeof(r), "record " + std::to_string(i)));
    const uint64_t left = reader.remaining();
    const uint64_t room = left < sizeof(Trailer) ? 0 : left - sizeof(Trailer);
    TFPS_RETURN_IF_ERROR(CheckRecord(r, room, reader));
    const ParamId id(r.key, r.partition);
    if (!params->empty() && !(params->rbegin()->first < id)) {
      return reader.Corrupt("record " + std::to_string(i) + " is out of order or repeated");
    }
    // A file read by the wrong thread would answer for keys no worker sends it.
    if (ThreadOfPartition(r.key, r.partition, h.num_threads) != h.thread) {
      return reader.Corrupt("record " + std::to_string(i) + " does not belong to thread " +
                            std::to_string(h.thread));
    }
    ShardParam p;
    p.dtype = static_cast<DType>(r.dtype);
    p.count = r.count;
    p.optimizer = static_cast<Optimizer>(r.optimizer);
    p.updates = r.updates;
    const uint64_t bytes = r.count * DTypeSize(p.dtype);
    p.value.resize(bytes);
    TFPS_RETURN_IF_ERROR(reader.Get(p.value.data(), bytes, "a value"));
    p.slots.resize(r.num_slots);
    for (auto& slot : p.slots) {
      slot.resize(bytes);
      TFPS_RETURN_IF_ERROR(reader.Get(slot.data(), bytes, "a slot"));
    }
    params->emplace_hint(params->end(), id, std::move(p));
  }
  return Status::Ok();
}

Status ReadOpenFile(std::FILE* file, uint64_t size, const std::string& path, ShardInfo* info,
                    ShardParams* params) {
  Reader reader(file, size, path);
  if (size < sizeof(FileHeader) + sizeof(Trailer)) {
    return reader.Corrupt("it is truncated: " + std::to_string(size) + " bytes");
  }
  FileHeader h;
  TFPS_RETURN_IF_ERROR(reader.Get(&h, sizeof(h), "the header"));
  if (std::memcmp(h.magic, kFileMagic, sizeof(kFileMagic)) != 0) {
    return FailedPrecondition(path + " is not a tf_ps_ops checkpoint (bad magic)");
  }
  if (h.version != kCheckpointVersion) {
    return FailedPrecondition("checkpoint file " + path + " has format version " +
                              std::to_string(h.version) + "; this ps_server reads version " +
                              std::to_string(kCheckpointVersion));
  }
  if (h.header_bytes != sizeof(FileHeader) || h.server_id < 0 || h.num_servers <= h.server_id ||
      h.num_threads <= 0 || h.thread < 0 || h.thread >= h.num_threads ||
      h.num_records > (size - sizeof(FileHeader)) / sizeof(RecordHeader)) {
    return reader.Corrupt("the header's fields are out of range");
  }
  ShardParams loaded;
  TFPS_RETURN_IF_ERROR(ReadRecords(reader, h, &loaded));
  const uint32_t crc = reader.crc();
  const uint64_t body = reader.offset();
  if (reader.remaining() != sizeof(Trailer)) {
    return reader.Corrupt(std::to_string(reader.remaining()) + " bytes follow the last record, " +
                          "expected the " + std::to_string(sizeof(Trailer)) + "-byte trailer");
  }
  Trailer t;
  TFPS_RETURN_IF_ERROR(reader.Get(&t, sizeof(t), "the trailer"));
  if (std::memcmp(t.end_magic, kEndMagic, sizeof(kEndMagic)) != 0 || t.body_bytes != body) {
    return reader.Corrupt("the trailer is damaged");
  }
  if (t.crc != crc) {
    return reader.Corrupt("CRC-32 mismatch (stored " + std::to_string(t.crc) + ", computed " +
                          std::to_string(crc) + ")");
  }
  info->server_id = h.server_id;
  info->num_servers = h.num_servers;
  info->thread = h.thread;
  info->num_threads = h.num_threads;
  *params = std::move(loaded);
  return Status::Ok();
}

// "shard-<digits>-<digits>.ckpt" -> (server, thread); false for any other name.
bool ParseFileName(const std::string& name, int* server, int* thread) {
  const std::string prefix = "shard-", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string middle =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t dash = middle.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == middle.size() ||
      middle.size() > 20) {
    return false;
  }
  for (size_t i = 0; i < middle.size(); ++i) {
    if (i != dash && (middle[i] < '0' || middle[i] > '9')) return false;
  }
  *server = std::stoi(middle.substr(0, dash));
  *thread = std::stoi(middle.substr(dash + 1));
  return true;
}

std::string Join(const std::set<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t size) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string CheckpointFileName(int server_id, int thread) {
  return "shard-" + std::to_string(server_id) + "-" + std::to_string(thread) + ".ckpt";
}

Status WriteCheckpoint(const std::string& path, const ShardInfo& info, const ShardParams& params,
                       const std::function<void()>& progress) {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wbe");
  if (file == nullptr) return Internal("cannot create checkpoint file " + tmp + ": " + Errno());
  Writer w(file);
  FileHeader h;
  std::memcpy(h.magic, kFileMagic, sizeof(kFileMagic));
  h.version = kCheckpointVersion;
  h.header_bytes = sizeof(FileHeader);
  h.server_id = info.server_id;
  h.num_servers = info.num_servers;
  h.thread = info.thread;
  h.num_threads = info.num_threads;
  h.num_records = params.size();
  bool ok = w.Put(&h, sizeof(h));
  for (const auto& entry : params) {
    const ShardParam& p = entry.second;
    RecordHeader r;
    std::memset(&r, 0, sizeof(r));
    r.key = entry.first.first;
    r.partition = entry.first.second;
    r.dtype = static_cast<uint8_t>(p.dtype);
    r.optimizer = static_cast<uint8_t>(p.optimizer);
    r.num_slots = static_cast<uint8_t>(p.slots.size());
    r.count = p.count;
    r.updates = p.updates;
    ok = ok && w.Put(&r, sizeof(r)) && w.Put(p.value.data(), p.value.size());
    for (const auto& slot : p.slots) ok = ok && w.Put(slot.data(), slot.size());
    if (progress) progress();
  }
  Trailer t;
  t.body_bytes = w.bytes();
  t.crc = w.crc();
  std::memcpy(t.end_magic, kEndMagic, sizeof(kEndMagic));
  ok = ok && std::fwrite(&t, sizeof(t), 1, file) == 1 && std::fflush(file) == 0 &&
       fsync(fileno(file)) == 0;
  std::string why = ok ? "" : Errno();
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    why = Errno();
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return Internal("cannot write checkpoint file " + tmp + ": " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    why = Errno();
    std::remove(tmp.c_str());
    return Internal("cannot rename " + tmp + " to " + path + ": " + why);
  }
  return SyncDir(DirOf(path));
}

Status ReadCheckpoint(const std::string& path, ShardInfo* info, ShardParams* params) {
  std::FILE* file = std::fopen(path.c_str(), "rbe");
  if (file == nullptr) {
    return FailedPrecondition("cannot open checkpoint file " + path + ": " + Errno());
  }
  struct stat st;
  Status s = fstat(fileno(file), &st) == 0
                 ? ReadOpenFile(file, static_cast<uint64_t>(st.st_size), path, info, params)
                 : Internal("cannot stat checkpoint file " + path + ": " + Errno());
  std::fclose(file);
  return s;
}

Status EnsureCheckpointDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
  }
  const std::string why = Errno();
  return FailedPrecondition("TFPS_CHECKPOINT_DIR=" + dir + " is not a directory and cannot be "
                            "created: " + why + "; point it at a writable directory (only its "
                            "last level is created)");
}

Status ListCheckpoints(const std::string& dir, std::vector<std::pair<int, int>>* found) {
  found->clear();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return FailedPrecondition("cannot list TFPS_CHECKPOINT_DIR=" + dir + ": " + Errno());
  }
  while (const dirent* entry = readdir(d)) {
    int server = 0, thread = 0;
    if (ParseFileName(entry->d_name, &server, &thread)) found->emplace_back(server, thread);
  }
  closedir(d);
  return Status::Ok();
}

Status LoadShard(const std::string& dir, const std::vector<std::pair<int, int>>& existing,
                 const ShardInfo& want, std::vector<ShardParams>* per_thread) {
  per_thread->clear();
  std::set<int> mine, others;
  for (const auto& st : existing) {
    if (st.first == want.server_id) mine.insert(st.second);
    else others.insert(st.first);
  }
  const std::string layout = "; a restart needs the number of servers (" +
                             std::to_string(want.num_servers) + " now) and TFPS_SERVER_THREADS (" +
                             std::to_string(want.num_threads) + " now) of the job that wrote "
                             "them, or an empty directory to start afresh";
  if (mine.empty()) {
    if (others.empty()) return Status::Ok();
    // Server ids follow registration order: with one directory per host, a restarted
    // server may get another id than the one whose files lie here.
    return FailedPrecondition(dir + " holds checkpoints of server(s) " + Join(others) +
                              " but none of server " + std::to_string(want.server_id) +
                              " (server ids follow registration order: give every server "
                              "the same, shared directory)" + layout);
  }
  if (static_cast<int>(mine.size()) != want.num_threads || *mine.rbegin() >= want.num_threads) {
    return FailedPrecondition(dir + " holds checkpoints of server " +
                              std::to_string(want.server_id) + " for thread(s) " + Join(mine) +
                              layout);
  }
  std::vector<ShardParams> loaded(want.num_threads);
  for (int t = 0; t < want.num_threads; ++t) {
    const std::string path = dir + "/" + CheckpointFileName(want.server_id, t);
    ShardInfo info;
    TFPS_RETURN_IF_ERROR(ReadCheckpoint(path, &info, &loaded[t]));
    if (info.server_id != want.server_id || info.thread != t ||
        info.num_servers != want.num_servers || info.num_threads != want.num_threads) {
      return FailedPrecondition(path + " was written by server " + std::to_string(info.server_id) +
                                " of " + std::to_string(info.num_servers) + ", thread " +
                                std::to_string(info.thread) + " of " +
                                std::to_string(info.num_threads) + layout);
    }
  }
  *per_thread = std::move(loaded);
  return Status::Ok();
}

}  // namespace tfps
