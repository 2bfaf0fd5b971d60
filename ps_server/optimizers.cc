#include "ps_server/optimizers.h"

#include <algorithm>
#include <cmath>

namespace tfps {

namespace {

// The formulas follow tensorflow/core/kernels/training_ops.cc (CPU functors), with the
// gradient g = sum / num_workers computed on the fly.
template <typename T>
void Apply(Optimizer opt, const std::vector<double>& p, T* var, const std::vector<T*>& s,
           const T* sum, uint64_t n, int num_workers) {
  const T inv = T(1) / static_cast<T>(num_workers);
  const T lr = static_cast<T>(p[0]);
  switch (opt) {
    case Optimizer::kGradientDescent:
      for (uint64_t i = 0; i < n; ++i) var[i] -= lr * (sum[i] * inv);
      break;
    case Optimizer::kMomentum: {
      const T momentum = static_cast<T>(p[1]);
      const bool nesterov = p[2] != 0;
      T* accum = s[0];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        accum[i] = accum[i] * momentum + g;
        var[i] -= nesterov ? g * lr + accum[i] * momentum * lr : accum[i] * lr;
      }
      break;
    }
    case Optimizer::kKerasMomentum: {
      const T momentum = static_cast<T>(p[1]);
      const bool nesterov = p[2] != 0;
      T* accum = s[0];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        accum[i] = accum[i] * momentum - g * lr;
        var[i] += nesterov ? accum[i] * momentum - g * lr : accum[i];
      }
      break;
    }
    case Optimizer::kAdam: {
      const T beta1 = static_cast<T>(p[1]), beta2 = static_cast<T>(p[2]);
      const T epsilon = static_cast<T>(p[3]);
      const T beta1_power = static_cast<T>(p[4]), beta2_power = static_cast<T>(p[5]);
      const bool nesterov = p[6] != 0, amsgrad = p[7] != 0;
      const T alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
      T *m = s[0], *v = s[1], *vhat = s[2];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        m[i] += (g - m[i]) * (T(1) - beta1);
        v[i] += (g * g - v[i]) * (T(1) - beta2);
        T denom_v = v[i];
        if (amsgrad) {
          vhat[i] = std::max(vhat[i], v[i]);
          denom_v = vhat[i];
        }
        const T numer = nesterov ? m[i] * beta1 + g * (T(1) - beta1) : m[i];
        var[i] -= numer * alpha / (std::sqrt(denom_v) + epsilon);
      }
      break;
    }
    case Optimizer::kAdagrad: {
      const T epsilon = static_cast<T>(p[1]);
      const bool update_slots = p[2] != 0;
      T* accum = s[0];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        if (update_slots) accum[i] += g * g;
        // TF's v1 kernel multiplies by rsqrt(accum); V2 divides by sqrt(accum) + epsilon.
        var[i] -= epsilon == T(0) ? g * lr * (T(1) / std::sqrt(accum[i]))
                                  : g * lr / (std::sqrt(accum[i]) + epsilon);
      }
      break;
    }
    case Optimizer::kKerasAdagrad: {
      const T epsilon = static_cast<T>(p[1]);
      T* accum = s[0];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        accum[i] += g * g;
        var[i] -= lr * g / std::sqrt(accum[i] + epsilon);
      }
      break;
    }
    case Optimizer::kRMSProp: {
      const T rho = static_cast<T>(p[1]), momentum = static_cast<T>(p[2]);
      const T epsilon = static_cast<T>(p[3]);
      T *ms = s[0], *mom = s[1];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        ms[i] += (g * g - ms[i]) * (T(1) - rho);
        mom[i] = mom[i] * momentum + g * lr / std::sqrt(ms[i] + epsilon);
        var[i] -= mom[i];
      }
      break;
    }
    case Optimizer::kCenteredRMSProp: {
      const T rho = static_cast<T>(p[1]), momentum = static_cast<T>(p[2]);
      const T epsilon = static_cast<T>(p[3]);
      T *mg = s[0], *ms = s[1], *mom = s[2];
      for (uint64_t i = 0; i < n; ++i) {
        const T g = sum[i] * inv;
        ms[i] += (g * g - ms[i]) * (T(1) - rho);
        mg[i] += (g - mg[i]) * (T(1) - rho);
        const T denom = ms[i] - mg[i] * mg[i] + epsilon;
        mom[i] = mom[i] * momentum + g * lr / std::sqrt(denom);
        var[i] -= mom[i];
      }
      break;
    }
    default:
      break;
  }
}

template <typename T>
std::vector<T*> SlotPointers(std::vector<std::vector<char>>* slots) {
  std::vector<T*> out;
  for (auto& slot : *slots) out.push_back(reinterpret_cast<T*>(slot.data()));
  return out;
}

// Apply() on rows: the loops take pointers, so each row is a dense update of row_elems
// elements at its offset in the parameter and the slots.
template <typename T>
void ApplyRows(Optimizer opt, const std::vector<double>& p, T* var,
               std::vector<std::vector<char>>* slots, const T* sums, const int64_t* rows,
               uint64_t num_rows, uint64_t row_elems, int num_workers) {
  const std::vector<T*> base = SlotPointers<T>(slots);
  std::vector<T*> shifted(base.size());
  for (uint64_t i = 0; i < num_rows; ++i) {
    const uint64_t offset = static_cast<uint64_t>(rows[i]) * row_elems;
    for (size_t k = 0; k < base.size(); ++k) shifted[k] = base[k] + offset;
    Apply<T>(opt, p, var + offset, shifted, sums + i * row_elems, row_elems, num_workers);
  }
}

Status CheckSlots(Optimizer optimizer, const std::vector<std::vector<char>>& slots) {
  if (static_cast<int>(slots.size()) == OptimizerSlotCount(optimizer)) return Status::Ok();
  return InvalidArgument(std::string(OptimizerName(optimizer)) + " needs " +
                         std::to_string(OptimizerSlotCount(optimizer)) +
                         " slots but the parameter was initialised with " +
                         std::to_string(slots.size()) + " (another optimizer?)");
}

}  // namespace

Status ApplyOptimizerRows(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                          void* var, std::vector<std::vector<char>>* slots, const void* row_sums,
                          const int64_t* rows, uint64_t num_rows, uint64_t row_elems,
                          int num_workers) {
  TFPS_RETURN_IF_ERROR(CheckSlots(optimizer, *slots));
  if (dtype == DType::kFloat32) {
    ApplyRows<float>(optimizer, params, static_cast<float*>(var), slots,
                     static_cast<const float*>(row_sums), rows, num_rows, row_elems, num_workers);
  } else if (dtype == DType::kFloat64) {
    ApplyRows<double>(optimizer, params, static_cast<double*>(var), slots,
                      static_cast<const double*>(row_sums), rows, num_rows, row_elems,
                      num_workers);
  } else {
    return InvalidArgument(std::string("PS mode holds float32 and float64 parameters, not ") +
                           DTypeName(dtype));
  }
  return Status::Ok();
}

Status ApplyOptimizer(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                      void* var, std::vector<std::vector<char>>* slots, const void* grad_sum,
                      uint64_t count, int num_workers) {
  TFPS_RETURN_IF_ERROR(CheckSlots(optimizer, *slots));
  if (dtype == DType::kFloat32) {
    Apply<float>(optimizer, params, static_cast<float*>(var), SlotPointers<float>(slots),
                 static_cast<const float*>(grad_sum), count, num_workers);
  } else if (dtype == DType::kFloat64) {
    Apply<double>(optimizer, params, static_cast<double*>(var), SlotPointers<double>(slots),
                  static_cast<const double*>(grad_sum), count, num_workers);
  } else {
    return InvalidArgument(std::string("PS mode holds float32 and float64 parameters, not ") +
                           DTypeName(dtype));
  }
  return Status::Ok();
}

}  // namespace tfps
