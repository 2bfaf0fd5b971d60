// What the roles' Run() returns besides an exit code, for main.cc to turn into one.
#ifndef TFPS_PS_SERVER_EXIT_CODES_H_
#define TFPS_PS_SERVER_EXIT_CODES_H_

namespace tfps {

// A signal set `stop` while workers were still running: the job did not finish here, so
// main exits 128 + the signal (as a shell reports it) and says so, instead of 0.
constexpr int kStoppedMidJob = -1;

}  // namespace tfps

#endif  // TFPS_PS_SERVER_EXIT_CODES_H_
