// SIGTERM on a worker, told to the others before it takes effect (issue 11, defect 8).
//
// A worker stopped by SIGTERM used to vanish: the others saw only "connection closed".
// While the engine runs, and only if the process left SIGTERM at its default action (a
// handler of the program's own is never replaced), a handler notes the signal and wakes
// the engine thread, which tells the scheduler "stopped by SIGTERM" (cluster/notice.h),
// gives the notice a moment to leave, then restores the default action and re-raises the
// signal: the process still ends by SIGTERM, as its launcher expects.
#ifndef TFPS_CC_ENGINE_STOP_SIGNAL_H_
#define TFPS_CC_ENGINE_STOP_SIGNAL_H_

namespace tfps {

// Installs the handler if SIGTERM has its default action. Returns a file descriptor
// that becomes readable once the signal arrived, or -1 when nothing was installed.
int InstallStopSignal();
// Restores the default action (if InstallStopSignal installed the handler).
void UninstallStopSignal();
// The signal caught (0 if none), and: restore the default action and raise it again.
int CaughtStopSignal();
void ReraiseStopSignal();

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_STOP_SIGNAL_H_
