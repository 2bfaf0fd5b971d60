// Elementwise summation of one buffer into another, for every wire dtype.
#ifndef TFPS_PS_SERVER_REDUCE_H_
#define TFPS_PS_SERVER_REDUCE_H_

#include <cstdint>

#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// dst[i] += src[i] for i < count. Half types are summed in float and rounded back to
// nearest-even, as TensorFlow's own CPU add does. Integers wrap around. Bools are 0 or 1
// and their sum is the logical or (what Horovod's bool allreduce gives).
void SumInto(DType dtype, void* dst, const void* src, uint64_t count);

// dst[i] = op(dst[i], src[i]) for i < count: SumInto for kSum; min, max or product
// otherwise (halves computed in float and rounded once; min and max propagate NaN, as
// NumPy's minimum/maximum and TensorFlow's do; integers' products wrap; bool min and
// product are the logical and, max the logical or).
void ReduceInto(ReduceOp op, DType dtype, void* dst, const void* src, uint64_t count);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_REDUCE_H_
