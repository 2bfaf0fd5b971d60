// topk and randomk: k of n values travel. Both write their kept elements in ascending
// index order, so decoding streams through the output once.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_internal.h"

namespace tfps {

namespace {

uint64_t Mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The k-th largest of keys[0, n) (1 <= k <= n), by radix selection: a histogram of the top
// 11 bits finds the bucket holding it, then the next 11 and the last 10 bits among that
// bucket's keys only. Two passes over all keys instead of nth_element's data-dependent
// swaps (several times faster on a partition of 128 K floats).
uint32_t KthLargest(const uint32_t* keys, uint64_t n, uint64_t k) {
  std::vector<uint32_t> candidates;
  uint32_t prefix = 0, prefix_mask = 0;
  const int shifts[3] = {21, 10, 0};
  const uint32_t widths[3] = {2048, 2048, 1024};
  for (int level = 0; level < 3; ++level) {
    const int shift = shifts[level];
    const uint32_t buckets = widths[level];
    std::vector<uint64_t> histogram(buckets, 0);
    const uint32_t* src = level == 0 ? keys : candidates.data();
    const uint64_t len = level == 0 ? n : candidates.size();
    for (uint64_t i = 0; i < len; ++i) ++histogram[(src[i] >> shift) & (buckets - 1)];
    uint32_t bucket = buckets - 1;
    while (histogram[bucket] < k) k -= histogram[bucket--];  // the k-th is in `bucket`
    prefix |= bucket << shift;
    prefix_mask |= (buckets - 1) << shift;
    if (level == 2) break;
    std::vector<uint32_t> next;
    next.reserve(histogram[bucket]);
    for (uint64_t i = 0; i < len; ++i) {
      if ((src[i] & prefix_mask) == prefix) next.push_back(src[i]);
    }
    candidates.swap(next);
  }
  return prefix;
}

}  // namespace

uint64_t RandomKSeed(uint64_t key, uint32_t partition, uint64_t step) {
  return Mix64(key ^ Mix64((uint64_t{partition} << 40) ^ step));
}

namespace codec_internal {

// The k indices randomk keeps, ascending: Floyd's sampling (k draws, each distinct, uniform
// over k-subsets) driven by splitmix64, marked in a bitmap and read back in order. The test
// suite's NumPy model repeats exactly these steps.
std::vector<uint32_t> RandomKIndices(uint64_t n, uint64_t k, uint64_t seed) {
  std::vector<uint64_t> bitmap((n + 63) / 64, 0);
  uint64_t state = seed;
  for (uint64_t j = n - k; j < n; ++j) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t t = Mix64(state) % (j + 1);
    if ((bitmap[t / 64] >> (t % 64)) & 1u) t = j;
    bitmap[t / 64] |= uint64_t{1} << (t % 64);
  }
  std::vector<uint32_t> out;
  out.reserve(k);
  for (uint64_t w = 0; w < bitmap.size(); ++w) {
    for (uint64_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
      out.push_back(static_cast<uint32_t>(64 * w + __builtin_ctzll(bits)));
    }
  }
  return out;
}

void EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out) {
  if (k == 0) return;
  // Rank by |x| as an integer: the bits of |x| order like its value, and NaN (above Inf)
  // ranks first, so the order is total and a non-finite value always travels.
  std::vector<uint32_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = Bits(in[i]) & 0x7fffffffu;
  const uint32_t threshold = KthLargest(keys.data(), n, k);
  uint64_t above = 0;
  for (uint64_t i = 0; i < n; ++i) above += keys[i] > threshold;
  // Ties at the threshold: the lowest indices win, so every build picks the same set.
  uint64_t ties = k - above, m = 0;
  uint8_t* values = out + 4 * k;
  for (uint64_t i = 0; i < n && m < k; ++i) {
    const bool take = keys[i] > threshold || (keys[i] == threshold && ties > 0);
    if (!take) continue;
    if (keys[i] == threshold) --ties;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * m, &index, 4);
    std::memcpy(values + 4 * m, in + i, 4);
    ++m;
  }
}

void DecodeTopK(const uint8_t* in, uint64_t n, uint64_t k, float* out) {
  std::fill(out, out + n, 0.0f);
  const uint8_t* values = in + 4 * k;
  for (uint64_t m = 0; m < k; ++m) {
    uint32_t index;
    std::memcpy(&index, in + 4 * m, 4);
    // Indices come from the network: one out of range is dropped, never written.
    if (index < n) std::memcpy(out + index, values + 4 * m, 4);
  }
}

void EncodeRandomK(const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out) {
  const std::vector<uint32_t> indices = RandomKIndices(n, k, seed);
  for (uint64_t m = 0; m < k; ++m) std::memcpy(out + 4 * m, in + indices[m], 4);
}

void DecodeRandomK(const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out) {
  std::fill(out, out + n, 0.0f);
  const std::vector<uint32_t> indices = RandomKIndices(n, k, seed);
  for (uint64_t m = 0; m < k; ++m) std::memcpy(out + indices[m], in + 4 * m, 4);
}

}  // namespace codec_internal
}  // namespace tfps
