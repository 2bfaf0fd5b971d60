#include "tf_ps_ops/cc/engine/stop_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>

namespace tfps {

namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_caught{0};
bool g_installed = false;

void OnStopSignal(int sig) {  // async-signal-safe: an atomic store and a write
  g_caught = sig;
  const char byte = 1;
  (void)!write(g_pipe[1], &byte, 1);
}

// At exit: a process that caught the stop signal ends by it, however it got to exit (its
// program may see the failure the others were told of and exit(3) before the engine
// thread re-raises the signal; the launcher must still see SIGTERM).
void ReraiseAtExit() {
  if (g_caught.load() != 0) ReraiseStopSignal();
}

}  // namespace

int InstallStopSignal() {
  if (g_installed) return g_pipe[0];
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO) != 0) {
    return -1;  // the program handles (or ignores) SIGTERM itself
  }
  if (g_pipe[0] < 0) {
    if (pipe2(g_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
    std::atexit(ReraiseAtExit);  // once, with the pipe
  }
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0) return -1;
  g_installed = true;
  return g_pipe[0];
}

void UninstallStopSignal() {
  if (!g_installed) return;
  struct sigaction current {};
  // Only ours goes: a handler the program set since then stays.
  if (sigaction(SIGTERM, nullptr, &current) == 0 && current.sa_handler == OnStopSignal) {
    std::signal(SIGTERM, SIG_DFL);
  }
  g_installed = false;
}

int CaughtStopSignal() { return g_caught.load(); }

void ReraiseStopSignal() {
  const int sig = g_caught.load();
  std::signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace tfps
