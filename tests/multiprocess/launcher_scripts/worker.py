"""A stand-in for a training script: no TensorFlow, behaviour chosen by flags.

Run by tfps-run as each worker; tests read what it prints.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

ENV_NAMES = [
    "TFPS_SCHEDULER", "TFPS_RANK", "TFPS_SIZE", "TFPS_LOCAL_RANK", "TFPS_LOCAL_SIZE",
    "TFPS_NUM_SERVERS", "DMLC_ROLE", "DMLC_WORKER_ID", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
    "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "HOROVOD_RANK", "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "TFPS_LOG_LEVEL", "TFPS_FUSION_BYTES",
    "TFPS_LOG_TIMESTAMP",
]


def listening_address(port):
    """The local address of the TCP socket listening on `port` (/proc/net/tcp, IPv4)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--print-env", action="store_true")
    parser.add_argument("--connect", action="store_true",
                        help="open (and close) a TCP connection to TFPS_SCHEDULER")
    parser.add_argument("--odd-output", action="store_true",
                        help="a line to stderr, and a last line with no newline")
    parser.add_argument("--fail", metavar="RANK:CODE",
                        help="exit with CODE (-SIG: die by SIG) on RANK, after the others are up")
    parser.add_argument("--print-security", action="store_true",
                        help="the job key's file mode, and the address the scheduler listens on")
    parser.add_argument("--sleep", action="store_true", help="then sleep until killed")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--spawn-grandchild", action="store_true",
                        help="start a sleeping child of our own, to see teardown reach it")
    args = parser.parse_args()
    rank = int(os.environ["TFPS_RANK"])

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.print_env:
        for name in ENV_NAMES:
            print(f"{name}={os.environ.get(name, '<unset>')}")
    if args.connect:
        host, port = os.environ["TFPS_SCHEDULER"].rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=10).close()
        print("connected to the scheduler")
    if args.print_security:
        key_file = os.environ.get("TFPS_AUTH_KEY_FILE")
        print("bind=%s key_mode=%s" % (os.environ.get("TFPS_BIND", "<unset>"),
                                      oct(os.stat(key_file).st_mode & 0o777) if key_file else None))
        print("scheduler listens on %s" % listening_address(int(os.environ["DMLC_PS_ROOT_PORT"])))
    if args.odd_output:
        print(f"to stderr from {rank}", file=sys.stderr)
    if args.fail:
        fail_rank, code = map(int, args.fail.split(":"))
        if rank == fail_rank:
            # Fail only once every rank is up, so the test knows whom it must see killed.
            time.sleep(1.0)
            print(f"failing with code {code}")
            if code < 0:
                os.kill(os.getpid(), -code)
            sys.exit(code)
    if args.spawn_grandchild:
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"grandchild pid={grandchild.pid}")
    print(f"ready pid={os.getpid()}", flush=True)
    if args.odd_output:
        sys.stdout.write("no newline at the end")
    while args.sleep:
        time.sleep(60)


if __name__ == "__main__":
    main()
