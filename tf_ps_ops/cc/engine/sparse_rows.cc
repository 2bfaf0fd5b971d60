#include "tf_ps_ops/cc/engine/sparse_rows.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

namespace tfps {

template <typename T, typename Index>
Status MergeDuplicateRows(const T* values, const Index* indices, size_t n, size_t row,
                          int64_t num_rows, SparseRows* out) {
  // A stable sort keeps duplicates in their order, so their sum is TF's.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [indices](size_t a, size_t b) { return indices[a] < indices[b]; });
  std::vector<T> rows;
  rows.reserve(n * row);
  for (size_t k : order) {
    const int64_t id = static_cast<int64_t>(indices[k]);
    if (id < 0 || id >= num_rows) {
      return InvalidArgument("index " + std::to_string(id) + " is not in [0, " +
                             std::to_string(num_rows) + ")");
    }
    const T* src = values + k * row;
    if (out->ids.empty() || out->ids.back() != id) {
      out->ids.push_back(id);
      rows.insert(rows.end(), src, src + row);
    } else {
      T* dst = rows.data() + rows.size() - row;
      for (size_t j = 0; j < row; ++j) dst[j] += src[j];
    }
  }
  const char* bytes = reinterpret_cast<const char*>(rows.data());
  out->values.assign(bytes, bytes + rows.size() * sizeof(T));
  return Status::Ok();
}

template Status MergeDuplicateRows<float, int32_t>(const float*, const int32_t*, size_t, size_t,
                                                   int64_t, SparseRows*);
template Status MergeDuplicateRows<float, int64_t>(const float*, const int64_t*, size_t, size_t,
                                                   int64_t, SparseRows*);
template Status MergeDuplicateRows<double, int32_t>(const double*, const int32_t*, size_t,
                                                    size_t, int64_t, SparseRows*);
template Status MergeDuplicateRows<double, int64_t>(const double*, const int64_t*, size_t,
                                                    size_t, int64_t, SparseRows*);

void WriteRows(const SparseRows& rows, char* base) {
  if (rows.ids.empty()) return;
  const size_t row_bytes = rows.values.size() / rows.ids.size();
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    std::memcpy(base + rows.ids[i] * row_bytes, rows.values.data() + i * row_bytes, row_bytes);
  }
}

}  // namespace tfps
