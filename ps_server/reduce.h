// Elementwise summation of one buffer into another, for every wire dtype.
#ifndef TFPS_PS_SERVER_REDUCE_H_
#define TFPS_PS_SERVER_REDUCE_H_

#include <cstdint>

#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// dst[i] += src[i] for i < count. Half types are summed in float and rounded back to
// nearest-even, as TensorFlow's own CPU add does. Integers wrap around.
void SumInto(DType dtype, void* dst, const void* src, uint64_t count);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_REDUCE_H_
