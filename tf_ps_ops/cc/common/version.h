// The package's version, for `ps_server --version`. Python's is tf_ps_ops/common/version.py;
// tests/unit/test_version.py checks that the two agree.
#ifndef TF_PS_OPS_CC_COMMON_VERSION_H_
#define TF_PS_OPS_CC_COMMON_VERSION_H_

namespace tfps {

constexpr char kPackageVersion[] = "0.1.0";

}  // namespace tfps

#endif  // TF_PS_OPS_CC_COMMON_VERSION_H_
