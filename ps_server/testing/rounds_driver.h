// A BSP KeyStore of several workers driven message by message from Python with real head
// frames (tests/unit/test_process_set_rounds.py): process sets and join() without a network.
#ifndef TFPS_PS_SERVER_TESTING_ROUNDS_DRIVER_H_
#define TFPS_PS_SERVER_TESTING_ROUNDS_DRIVER_H_

#include <pybind11/pybind11.h>

namespace tfps {

// Adds the class RoundsKeyStore to `m`.
void BindRoundsDriver(pybind11::module_& m);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_TESTING_ROUNDS_DRIVER_H_
