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

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // What keeps the bytes alive: handed to whoever reads them later (ZeroMQ, when sending).
  const std::shared_ptr<void>& owner() const { return owner_; }
  std::string ToString() const { return std::string(data_, size_); }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_BUFFER_H_
