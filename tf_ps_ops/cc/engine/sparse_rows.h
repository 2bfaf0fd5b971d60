// A sparse gradient as a sparse push sends it: unique, increasing row ids and their rows.
// The worker side of PS mode's sparse updates; no TensorFlow headers, so it is testable
// alone.
#ifndef TFPS_CC_ENGINE_SPARSE_ROWS_H_
#define TFPS_CC_ENGINE_SPARSE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

struct SparseRows {
  std::vector<int64_t> ids;
  std::vector<char> values;  // ids.size() rows, back to back
};

// Sums the rows of duplicate indices (in the order they appear, as TF's optimizers do
// before calling a sparse update op) and orders the rows by id. `values` holds `n` rows of
// `row` elements; every index must lie in [0, num_rows). T: float or double; Index: int32_t
// or int64_t.
template <typename T, typename Index>
Status MergeDuplicateRows(const T* values, const Index* indices, size_t n, size_t row,
                          int64_t num_rows, SparseRows* out);

// Writes `rows` (each row_bytes long) into `base` at their ids.
void WriteRows(const SparseRows& rows, char* base);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_SPARSE_ROWS_H_
