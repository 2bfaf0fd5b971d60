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
  CloseFd();
}

void ShmSegment::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

namespace {

constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW;
constexpr size_t kMaxPointer = 128;  // "tfps-memfd <pid> <fd> <inode>\n" fits

}  // namespace

Status ShmSegment::Create(const std::string& name, uint64_t bytes, uint32_t dtype,
                          int local_rank, ShmSegment** out, const char* purpose,
                          const char* off) {
  *out = nullptr;
  const size_t size = kShmDataOffset + bytes;
  const std::string prefix = std::string(purpose) + " (" + off + " turns it off): ";
  // The name first (O_EXCL: the name is this process's), empty until the memfd is ready.
  const int name_fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (name_fd < 0) return Errno("cannot create", name).WithPrefix(prefix);
  const int fd = memfd_create(("tfps" + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    Status s = Errno("cannot create a memfd for", name).WithPrefix(prefix);
    close(name_fd);
    shm_unlink(name.c_str());
    return s;
  }
  auto fail = [&](Status s) {
    close(fd);
    close(name_fd);
    shm_unlink(name.c_str());
    return s;
  };
  // Reserve the pages now: memory that runs out later kills the process with SIGBUS on a
  // write (a memfd counts against the memory limit of the process's cgroup).
  int err = ftruncate(fd, static_cast<off_t>(size)) != 0 ? errno : 0;
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err != 0) {
    return fail(FailedPrecondition(
        "cannot reserve " + std::to_string(size) + " bytes of shared memory for " + purpose +
        " (" + name + "): " + std::strerror(err) + ". Is memory short (a container's memory "
        "limit, ulimit -f)? " + off + " turns it off"));
  }
  // Sealed before anyone else can reach it: from here on no one can change its size.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail(Errno("cannot seal", name).WithPrefix(prefix));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(Errno("cannot map", name));
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
  struct stat st;
  if (fstat(fd, &st) != 0) {
    munmap(base, size);
    return fail(Errno("cannot stat", name));
  }
  char pointer[kMaxPointer];
  const int n = std::snprintf(pointer, sizeof(pointer), "tfps-memfd %d %d %llu\n",
                              static_cast<int>(getpid()), fd,
                              static_cast<unsigned long long>(st.st_ino));
  if (pwrite(name_fd, pointer, static_cast<size_t>(n), 0) != n) {
    Status s = Errno("cannot write", name);
    munmap(base, size);
    return fail(s);
  }
  close(name_fd);
  RememberForExit(name);
  *out = new ShmSegment(name, base, size, fd);
  return Status::Ok();
}

namespace {

// Where a segment's name says its sealed memory is: Create writes
// "tfps-memfd <pid> <fd> <inode>\n" into the name once the memfd is ready.
struct MemfdPointer {
  int pid = 0;
  int fd_number = -1;
  unsigned long long inode = 0;
  std::string path;  // /proc/<pid>/fd/<fd>
};

// The text the segment's name holds: empty when there is no such name (yet). Refuses a
// name of another user's, one others may access, and one too large to be a pointer.
Status ReadPointerText(const std::string& name, std::string* text) {
  text->clear();
  const int name_fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (name_fd < 0) return errno == ENOENT ? Status::Ok() : Errno("cannot open", name);
  struct stat st;
  if (fstat(name_fd, &st) != 0) {
    Status s = Errno("cannot stat", name);
    close(name_fd);
    return s;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(name_fd);
    return FailedPrecondition("shared memory " + name + " belongs to another user or others "
                              "may access it: refusing to use it");
  }
  char pointer[kMaxPointer + 1];
  const ssize_t got = st.st_size > static_cast<off_t>(kMaxPointer)
                          ? 0 : pread(name_fd, pointer, kMaxPointer, 0);
  close(name_fd);
  if (st.st_size > static_cast<off_t>(kMaxPointer)) {
    return FailedPrecondition("shared memory " + name + " holds " +
                              std::to_string(st.st_size) + " bytes itself, not a sealed "
                              "segment (a tf_ps_ops from before sealed segments on this "
                              "host?): refusing it, since its owner could shrink it under "
                              "this process's mapping");
  }
  if (got > 0) text->assign(pointer, static_cast<size_t>(got));
  return Status::Ok();
}

// The pointer the segment's name holds. *ready stays false (and the status OK) while there
// is no such name or its creator is still writing the pointer.
Status ReadMemfdPointer(const std::string& name, MemfdPointer* out, bool* ready) {
  *ready = false;
  std::string text;
  TFPS_RETURN_IF_ERROR(ReadPointerText(name, &text));
  if (text.empty() || text.back() != '\n') return Status::Ok();  // still being set up
  char end = 0;
  if (std::sscanf(text.c_str(), "tfps-memfd %d %d %llu%c", &out->pid, &out->fd_number,
                  &out->inode, &end) != 4 ||
      end != '\n' || out->pid <= 0 || out->fd_number < 0) {
    return FailedPrecondition("shared memory " + name + " does not say where its sealed "
                              "memory is: refusing it");
  }
  out->path = "/proc/" + std::to_string(out->pid) + "/fd/" + std::to_string(out->fd_number);
  *ready = true;
  return Status::Ok();
}

// Opens the memory the pointer names, for reading and writing, into *fd.
Status OpenPointedMemory(const std::string& name, const MemfdPointer& pointer, int* fd) {
  const std::string& path = pointer.path;
  // The pointer is the peer's word: look before opening. O_PATH opens nothing (a device,
  // a FIFO or a socket another process holds there is never opened for real); only a
  // regular file with the inode the pointer names is then reopened for reading and writing.
  const int pinned = open(path.c_str(), O_PATH | O_CLOEXEC);
  *fd = -1;
  if (pinned >= 0) {
    struct stat pst;
    if (fstat(pinned, &pst) != 0 || !S_ISREG(pst.st_mode) ||
        static_cast<unsigned long long>(pst.st_ino) != pointer.inode) {
      close(pinned);
      return FailedPrecondition("shared memory " + name + " (" + path + ") is not the memory "
                                "its name points to (not a regular file, or another inode: "
                                "another process by that PID?): refusing it");
    }
    *fd = open(("/proc/self/fd/" + std::to_string(pinned)).c_str(),
               O_RDWR | O_CLOEXEC | O_NONBLOCK);
    const int saved = errno;
    close(pinned);
    errno = saved;
  }
  if (*fd < 0) {
    return FailedPrecondition("cannot open the memory of shared memory " + name + " through " +
                              path + " (" + std::strerror(errno) + "): did its creator exit, "
                              "or does it run as another user or in another PID namespace "
                              "(processes that share memory must see each other in /proc: "
                              "containers need a shared PID namespace, e.g. docker --pid=host)?");
  }
  return Status::Ok();
}

// Checks the opened memory is the one pointed to, this user's, sealed against shrinking and
// growing and large enough for a header; sets *actual to its size. Closes fd when it
// refuses it.
Status CheckPointedMemory(const std::string& name, const MemfdPointer& pointer, int fd,
                          size_t* actual) {
  auto refuse = [&](const std::string& why) {
    close(fd);
    return FailedPrecondition("shared memory " + name + " (" + pointer.path + ") " + why +
                              ": refusing it");
  };
  struct stat mst;
  if (fstat(fd, &mst) != 0) return refuse(std::string("cannot be inspected: ") + std::strerror(errno));
  if (static_cast<unsigned long long>(mst.st_ino) != pointer.inode) {
    return refuse("is not the memory its name points to (another process by that PID?)");
  }
  if (mst.st_uid != geteuid()) return refuse("belongs to another user");
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kSeals) != kSeals) {
    return refuse("is not sealed against shrinking and growing (F_SEAL_SHRINK, F_SEAL_GROW): "
                  "its creator could shrink it under this process's mapping and kill it "
                  "with SIGBUS");
  }
  *actual = static_cast<size_t>(mst.st_size);
  if (*actual < sizeof(ShmHeader)) return refuse("is smaller than its header");
  return Status::Ok();
}

}  // namespace

Status ShmSegment::Open(const std::string& name, uint64_t bytes, ShmSegment** out) {
  *out = nullptr;
  const bool any_size = bytes == kShmAnySize;
  size_t size = any_size ? 0 : kShmDataOffset + bytes;
  MemfdPointer pointer;
  bool ready = false;
  TFPS_RETURN_IF_ERROR(ReadMemfdPointer(name, &pointer, &ready));
  if (!ready) return Status::Ok();
  int fd = -1;
  TFPS_RETURN_IF_ERROR(OpenPointedMemory(name, pointer, &fd));
  size_t actual = 0;
  TFPS_RETURN_IF_ERROR(CheckPointedMemory(name, pointer, fd, &actual));
  void* base = mmap(nullptr, actual, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("cannot map", name);
  const auto* h = static_cast<const ShmHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != kShmMagic) {  // cannot happen: set first
    munmap(base, actual);
    return FailedPrecondition("shared memory " + name + " has no header: refusing it");
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
  *out = new ShmSegment(name, base, size, -1);
  return Status::Ok();
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
  ForgetForExit(name_);
  CloseFd();  // with the name gone no one can find the memfd
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
