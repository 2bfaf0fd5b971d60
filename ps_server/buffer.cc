#include "ps_server/buffer.h"

#include <cstring>

namespace tfps {

Buffer Buffer::Allocate(size_t size) {
  std::shared_ptr<char[]> bytes(new char[size > 0 ? size : 1]);
  Buffer b;
  b.data_ = bytes.get();
  b.size_ = size;
  b.owner_ = std::move(bytes);
  return b;
}

Buffer Buffer::Zeros(size_t size) {
  Buffer b = Allocate(size);
  std::memset(b.data_, 0, size);
  return b;
}

Buffer Buffer::CopyOf(const void* data, size_t size) {
  Buffer b = Allocate(size);
  if (size > 0) std::memcpy(b.data_, data, size);
  return b;
}

Buffer Buffer::Adopt(void* data, size_t size, std::shared_ptr<void> owner) {
  Buffer b;
  b.data_ = static_cast<char*>(data);
  b.size_ = size;
  b.owner_ = std::move(owner);
  return b;
}

Buffer Buffer::Borrow(const void* data, size_t size, std::shared_ptr<void> owner) {
  Buffer b = Adopt(const_cast<void*>(data), size, std::move(owner));
  b.borrowed_ = true;
  return b;
}

}  // namespace tfps
