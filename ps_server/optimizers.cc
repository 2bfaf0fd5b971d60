#include "ps_server/optimizers.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tfps {

namespace {

// Reads an optimizer's hyperparameters by name, at the positions optimizer_spec.h's table
// gives them on the wire. Every name asked for below is in the table: a misspelt one would
// read as 0, which tests/multiprocess/test_ps_mode.py and test_ps_sparse.py (every
// optimizer against TF's own kernels) would catch.
template <typename T>
class Hyper {
 public:
  Hyper(Optimizer optimizer, const std::vector<double>& values)
      : optimizer_(optimizer), values_(values) {}
  T operator()(const char* name) const {
    const int i = ParamIndex(optimizer_, name);
    return i < 0 || static_cast<size_t>(i) >= values_.size() ? T(0) : static_cast<T>(values_[i]);
  }
  bool Flag(const char* name) const { return (*this)(name) != T(0); }

 private:
  Optimizer optimizer_;
  const std::vector<double>& values_;
};

// One struct per optimizer: its named hyperparameters, read once per push, and its update
// of n elements (var, slots and the gradient sum all start at the same element). The
// formulas follow tensorflow/core/kernels/training_ops.cc (CPU functors), with the gradient
// g = sum * inv (inv = 1 / num_workers) computed on the fly.
template <typename T>
struct GradientDescent {
  T lr;
  explicit GradientDescent(const Hyper<T>& h) : lr(h("lr")) {}
  void operator()(T* var, T* const*, const T* sum, uint64_t n, T inv) const {
    for (uint64_t i = 0; i < n; ++i) var[i] -= lr * (sum[i] * inv);
  }
};

template <typename T>
struct Momentum {
  T lr, momentum;
  bool use_nesterov;
  explicit Momentum(const Hyper<T>& h)
      : lr(h("lr")), momentum(h("momentum")), use_nesterov(h.Flag("use_nesterov")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T* accum = s[0];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      accum[i] = accum[i] * momentum + g;
      var[i] -= use_nesterov ? g * lr + accum[i] * momentum * lr : accum[i] * lr;
    }
  }
};

template <typename T>
struct KerasMomentum {
  T lr, momentum;
  bool use_nesterov;
  explicit KerasMomentum(const Hyper<T>& h)
      : lr(h("lr")), momentum(h("momentum")), use_nesterov(h.Flag("use_nesterov")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T* accum = s[0];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      accum[i] = accum[i] * momentum - g * lr;
      var[i] += use_nesterov ? accum[i] * momentum - g * lr : accum[i];
    }
  }
};

template <typename T>
struct Adam {
  T beta1, beta2, epsilon, alpha;
  bool use_nesterov, amsgrad;
  explicit Adam(const Hyper<T>& h)
      : beta1(h("beta1")), beta2(h("beta2")), epsilon(h("epsilon")),
        alpha(h("lr") * std::sqrt(T(1) - h("beta2_power")) / (T(1) - h("beta1_power"))),
        use_nesterov(h.Flag("use_nesterov")), amsgrad(h.Flag("amsgrad")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
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
      const T numer = use_nesterov ? m[i] * beta1 + g * (T(1) - beta1) : m[i];
      var[i] -= numer * alpha / (std::sqrt(denom_v) + epsilon);
    }
  }
};

template <typename T>
struct Adagrad {
  T lr, epsilon;
  bool update_slots;
  explicit Adagrad(const Hyper<T>& h)
      : lr(h("lr")), epsilon(h("epsilon")), update_slots(h.Flag("update_slots")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T* accum = s[0];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      if (update_slots) accum[i] += g * g;
      // TF's v1 kernel multiplies by rsqrt(accum); V2 divides by sqrt(accum) + epsilon.
      var[i] -= epsilon == T(0) ? g * lr * (T(1) / std::sqrt(accum[i]))
                                : g * lr / (std::sqrt(accum[i]) + epsilon);
    }
  }
};

template <typename T>
struct KerasAdagrad {
  T lr, epsilon;
  explicit KerasAdagrad(const Hyper<T>& h) : lr(h("lr")), epsilon(h("epsilon")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T* accum = s[0];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      accum[i] += g * g;
      var[i] -= lr * g / std::sqrt(accum[i] + epsilon);
    }
  }
};

template <typename T>
struct RMSProp {
  T lr, rho, momentum, epsilon;
  explicit RMSProp(const Hyper<T>& h)
      : lr(h("lr")), rho(h("rho")), momentum(h("momentum")), epsilon(h("epsilon")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T *ms = s[0], *mom = s[1];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      ms[i] += (g * g - ms[i]) * (T(1) - rho);
      mom[i] = mom[i] * momentum + g * lr / std::sqrt(ms[i] + epsilon);
      var[i] -= mom[i];
    }
  }
};

template <typename T>
struct CenteredRMSProp {
  T lr, rho, momentum, epsilon;
  explicit CenteredRMSProp(const Hyper<T>& h)
      : lr(h("lr")), rho(h("rho")), momentum(h("momentum")), epsilon(h("epsilon")) {}
  void operator()(T* var, T* const* s, const T* sum, uint64_t n, T inv) const {
    T *mg = s[0], *ms = s[1], *mom = s[2];
    for (uint64_t i = 0; i < n; ++i) {
      const T g = sum[i] * inv;
      ms[i] += (g * g - ms[i]) * (T(1) - rho);
      mg[i] += (g - mg[i]) * (T(1) - rho);
      const T denom = ms[i] - mg[i] * mg[i] + epsilon;
      mom[i] = mom[i] * momentum + g * lr / std::sqrt(denom);
      var[i] -= mom[i];
    }
  }
};

// Where an update goes: the whole tensor (rows == nullptr), or rows of row_elems elements
// each, whose gradient sums lie back to back. A row's update is the dense one at its
// offset in the parameter and the slots, so each element sees the same arithmetic.
template <typename T>
struct Target {
  T* var;
  std::vector<T*> slots;
  const T* sums;
  const int64_t* rows = nullptr;
  uint64_t num_rows = 0;
  uint64_t elems = 0;  // the whole count (dense) or elements per row
};

template <typename T, typename Update>
void Run(const Update& update, const Target<T>& t, int num_workers) {
  const T inv = T(1) / static_cast<T>(num_workers);
  if (t.rows == nullptr) {
    update(t.var, t.slots.data(), t.sums, t.elems, inv);
    return;
  }
  std::vector<T*> shifted(t.slots.size());
  for (uint64_t i = 0; i < t.num_rows; ++i) {
    const uint64_t offset = static_cast<uint64_t>(t.rows[i]) * t.elems;
    for (size_t k = 0; k < t.slots.size(); ++k) shifted[k] = t.slots[k] + offset;
    update(t.var + offset, shifted.data(), t.sums + i * t.elems, t.elems, inv);
  }
}

template <typename T>
void Dispatch(Optimizer opt, const std::vector<double>& params, const Target<T>& t,
              int num_workers) {
  const Hyper<T> h(opt, params);
  switch (opt) {
    case Optimizer::kGradientDescent: Run(GradientDescent<T>(h), t, num_workers); break;
    case Optimizer::kMomentum: Run(Momentum<T>(h), t, num_workers); break;
    case Optimizer::kKerasMomentum: Run(KerasMomentum<T>(h), t, num_workers); break;
    case Optimizer::kAdam: Run(Adam<T>(h), t, num_workers); break;
    case Optimizer::kAdagrad: Run(Adagrad<T>(h), t, num_workers); break;
    case Optimizer::kKerasAdagrad: Run(KerasAdagrad<T>(h), t, num_workers); break;
    case Optimizer::kRMSProp: Run(RMSProp<T>(h), t, num_workers); break;
    case Optimizer::kCenteredRMSProp: Run(CenteredRMSProp<T>(h), t, num_workers); break;
    default: break;
  }
}

template <typename T>
Target<T> MakeTarget(void* var, std::vector<std::vector<char>>* slots, const void* sums) {
  Target<T> t;
  t.var = static_cast<T*>(var);
  for (auto& slot : *slots) t.slots.push_back(reinterpret_cast<T*>(slot.data()));
  t.sums = static_cast<const T*>(sums);
  return t;
}

Status CheckSlots(Optimizer optimizer, const std::vector<std::vector<char>>& slots) {
  if (static_cast<int>(slots.size()) == OptimizerSlotCount(optimizer)) return Status::Ok();
  return InvalidArgument(std::string(OptimizerName(optimizer)) + " needs " +
                         std::to_string(OptimizerSlotCount(optimizer)) +
                         " slots but the parameter was initialised with " +
                         std::to_string(slots.size()) + " (another optimizer?)");
}

template <typename T>
void ApplyTyped(Optimizer optimizer, const std::vector<double>& params, void* var,
                std::vector<std::vector<char>>* slots, const void* sums, const int64_t* rows,
                uint64_t num_rows, uint64_t elems, int num_workers) {
  Target<T> t = MakeTarget<T>(var, slots, sums);
  t.rows = rows;
  t.num_rows = num_rows;
  t.elems = elems;
  Dispatch<T>(optimizer, params, t, num_workers);
}

Status ApplyAny(Optimizer optimizer, const std::vector<double>& params, DType dtype, void* var,
                std::vector<std::vector<char>>* slots, const void* sums, const int64_t* rows,
                uint64_t num_rows, uint64_t elems, int num_workers) {
  TFPS_RETURN_IF_ERROR(CheckSlots(optimizer, *slots));
  if (dtype == DType::kFloat32) {
    ApplyTyped<float>(optimizer, params, var, slots, sums, rows, num_rows, elems, num_workers);
  } else if (dtype == DType::kFloat64) {
    ApplyTyped<double>(optimizer, params, var, slots, sums, rows, num_rows, elems, num_workers);
  } else {
    return InvalidArgument(std::string("PS mode holds float32 and float64 parameters, not ") +
                           DTypeName(dtype));
  }
  return Status::Ok();
}

}  // namespace

Status ApplyOptimizerRows(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                          void* var, std::vector<std::vector<char>>* slots, const void* row_sums,
                          const int64_t* rows, uint64_t num_rows, uint64_t row_elems,
                          int num_workers) {
  // A sparse push with no rows still checks its slots, as before; rows == nullptr would
  // mean "dense", so hand an empty row list a valid pointer.
  static const int64_t kNoRows = 0;
  return ApplyAny(optimizer, params, dtype, var, slots, row_sums, rows ? rows : &kNoRows,
                  num_rows, row_elems, num_workers);
}

Status ApplyOptimizer(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                      void* var, std::vector<std::vector<char>>* slots, const void* grad_sum,
                      uint64_t count, int num_workers) {
  return ApplyAny(optimizer, params, dtype, var, slots, grad_sum, nullptr, 0, count,
                  num_workers);
}

}  // namespace tfps
