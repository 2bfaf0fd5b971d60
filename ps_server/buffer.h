// Bytes shared by reference count, so the server moves payloads between its threads and to
// several workers without copying them: a push's payload is adopted as ZeroMQ received it
// (and may become a round's sum), and one reply buffer goes to every worker of a round.
// Whoever holds the last reference frees the bytes, on whichever thread that is. Written
// only while one thread holds it (a summation thread, before the reply is posted).
#ifndef TFPS_PS_SERVER_BUFFER_H_
#define TFPS_PS_SERVER_BUFFER_H_

#include <cstddef>
#include <memory>
#include <string>

namespace tfps {

class Buffer {
 public:
  Buffer() = default;

  // `size` bytes of its own, uninitialised (Zeros: set to zero).
  static Buffer Allocate(size_t size);
  static Buffer Zeros(size_t size);
  static Buffer CopyOf(const void* data, size_t size);
  // Bytes that `owner` keeps alive (a received ZeroMQ message, say), not copied.
  static Buffer Adopt(void* data, size_t size, std::shared_ptr<void> owner);
  // Bytes of someone else's that may be read but never written (a colocated worker's
  // shared memory, TFPS_SHM_SERVER): a round sums them into memory of its own.
  static Buffer Borrow(const void* data, size_t size, std::shared_ptr<void> owner);

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // What keeps the bytes alive: handed to whoever reads them later (ZeroMQ, when sending).
  const std::shared_ptr<void>& owner() const { return owner_; }
  bool borrowed() const { return borrowed_; }
  std::string ToString() const { return std::string(data_, size_); }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
  bool borrowed_ = false;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_BUFFER_H_
