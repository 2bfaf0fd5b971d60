// A KeyStore of several workers under a consistency model, driven push by push from
// Python (tests/unit/test_stale_rounds.py): ssp/asp reads without a network.
#ifndef TFPS_PS_SERVER_TESTING_STALE_DRIVER_H_
#define TFPS_PS_SERVER_TESTING_STALE_DRIVER_H_

#include <pybind11/pybind11.h>

namespace tfps {

// Adds the class StaleKeyStore to `m`.
void BindStaleDriver(pybind11::module_& m);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_TESTING_STALE_DRIVER_H_
