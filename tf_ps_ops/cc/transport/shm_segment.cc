#include "tf_ps_ops/cc/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <set>

namespace tfps {

namespace {

// Names this process created and has not unlinked: unlinked at exit too, so that a
// process that exits without shutting tf_ps_ops down (sys.exit after an error) leaves
// nothing in /dev/shm. (A SIGKILL runs nothing: the peers' unlinking covers that.)
std::mutex& ExitMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<std::string>& ExitNames() {
  static auto* names = new std::set<std::string>;
  return *names;
}
void UnlinkAtExit() {
  std::lock_guard<std::mutex> lock(ExitMutex());
  for (const std::string& name : ExitNames()) shm_unlink(name.c_str());
  ExitNames().clear();
}
void RememberForExit(const std::string& name) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(UnlinkAtExit); });
  std::lock_guard<std::mutex> lock(ExitMutex());
  ExitNames().insert(name);
}
void ForgetForExit(const std::string& name) {
  std::lock_guard<std::mutex> lock(ExitMutex());
  ExitNames().erase(name);
}

Status Errno(const std::string& what, const std::string& name) {
  return Internal(what + " shared memory " + name + ": " + std::strerror(errno));
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, size_);
}

Status ShmSegment::Create(const std::string& name, uint64_t bytes, uint32_t dtype,
                          int local_rank, ShmSegment** out, const char* purpose,
                          const char* off) {
  *out = nullptr;
  const size_t size = kShmDataOffset + bytes;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Errno("cannot create", name).WithPrefix(
        std::string(purpose) + " (" + off + " turns it off): ");
  }
  // Reserve the pages now: a tmpfs that runs out later kills the process with SIGBUS on a
  // write (Docker gives containers 64 MB of /dev/shm unless --shm-size says more).
  int err = ftruncate(fd, static_cast<off_t>(size)) != 0 ? errno : 0;
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return FailedPrecondition("cannot reserve " + std::to_string(size) + " bytes of shared "
                             "memory for " + purpose + " (" + name + "): " +
                             std::strerror(err) + ". Is /dev/shm too small (df /dev/shm; "
                             "Docker: --shm-size)? " + off + " turns it off");
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    Status s = Errno("cannot map", name);
    shm_unlink(name.c_str());
    return s;
  }
  RememberForExit(name);
  auto* h = new (base) ShmHeader();
  h->bytes = bytes;
  h->dtype = dtype;
  h->pid = static_cast<int32_t>(getpid());
  h->local_rank = local_rank;
  h->attached.store(0);
  h->ready_step.store(0);
  h->ack_step.store(0);
  h->result_step.store(0);
  h->result_code.store(0);
  h->superseded.store(0);
  h->aborted_step.store(0);
  h->shape_digest.store(0);
  h->error[0] = '\0';
  h->magic.store(kShmMagic, std::memory_order_release);
  *out = new ShmSegment(name, base, size);
  return Status::Ok();
}

Status ShmSegment::Open(const std::string& name, uint64_t bytes, ShmSegment** out) {
  *out = nullptr;
  const bool any_size = bytes == kShmAnySize;
  size_t size = any_size ? 0 : kShmDataOffset + bytes;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno == ENOENT ? Status::Ok() : Errno("cannot open", name);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = Errno("cannot stat", name);
    close(fd);
    return s;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    return FailedPrecondition("shared memory " + name + " belongs to another user or others "
                              "may access it: refusing to use it");
  }
  const size_t actual = static_cast<size_t>(st.st_size);
  if (actual < sizeof(ShmHeader)) {  // still being set up by its creator
    close(fd);
    return Status::Ok();
  }
  void* base = mmap(nullptr, actual, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("cannot map", name);
  const auto* h = static_cast<const ShmHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != kShmMagic) {  // not filled in yet
    munmap(base, actual);
    return Status::Ok();
  }
  if (any_size && actual >= kShmDataOffset && h->bytes == actual - kShmDataOffset) {
    bytes = h->bytes;
    size = kShmDataOffset + bytes;
  }
  if (actual != size || h->bytes != bytes) {
    const uint64_t theirs = h->bytes;
    munmap(base, actual);
    return InvalidArgument("its tensor has " + std::to_string(theirs) + " bytes, this "
                           "worker's " + std::to_string(bytes) + ": do the local workers "
                           "disagree on the tensor's shape or dtype?");
  }
  *out = new ShmSegment(name, base, size);
  return Status::Ok();
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
  ForgetForExit(name_);
}

void UnlinkShm(const std::string& name) { shm_unlink(name.c_str()); }

Status NewShmToken(std::string* token) {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return Internal(std::string("cannot draw a random shared-memory token: ") +
                    std::strerror(errno));
  }
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
  *token = hex;
  return Status::Ok();
}

bool IsShmToken(const std::string& text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool AcceptShmOffer(const std::string& offer, std::string* token, std::string* why) {
  why->clear();
  if (offer.rfind("shm=", 0) != 0 || offer.size() < 4 + 32 || !IsShmToken(offer.substr(4, 32))) {
    return false;
  }
  const std::string offered = offer.substr(4, 32);
  const std::string rest = offer.substr(4 + 32);
  if (rest.empty()) {  // a server without the probe
    *token = offered;
    return true;
  }
  const std::string kProbe = " probe=";
  if (rest.size() != kProbe.size() + 32 || rest.compare(0, kProbe.size(), kProbe) != 0 ||
      !IsShmToken(rest.substr(kProbe.size()))) {
    *why = "its offer is malformed";
    return false;
  }
  const std::string nonce = rest.substr(kProbe.size());
  const std::string name = ShmProbeName(offered);
  ShmSegment* probe = nullptr;
  Status s = ShmSegment::Open(name, kShmProbeBytes, &probe);
  if (!s.ok()) {
    *why = "its probe " + name + " cannot be used: " + s.message();
    return false;
  }
  if (probe == nullptr) {
    *why = "its probe " + name + " is not in this process's /dev/shm (a container with host "
           "networking, or a private /dev/shm: the server shares the address, not the "
           "memory)";
    return false;
  }
  const bool same = std::memcmp(probe->data(), nonce.data(), kShmProbeBytes) == 0;
  probe->Unlink();
  delete probe;
  if (!same) {
    *why = "its probe " + name + " holds another nonce (another /dev/shm with that name?)";
    return false;
  }
  *token = offered;
  return true;
}

}  // namespace tfps
