"""A stand-in for ps_server with its command line, for faults the real one won't make.

FAKE_PS_SERVER_EXIT=ROLE:CODE makes that role print a line and exit with CODE at once.
Otherwise the scheduler binds --port, publishes it like ps_server does, and both roles
sleep until killed.
"""

import argparse
import os
import socket
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["scheduler", "server"])
    parser.add_argument("--gen-key", help="as ps_server: write a job key (mode 600) and exit")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--scheduler")
    parser.add_argument("--num-workers", type=int)
    parser.add_argument("--num-servers", type=int)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.gen_key:  # tfps-run asks for the job's key first; a fake key does here
        fd = os.open(args.gen_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"0" * 40 + b"\n")
        os.close(fd)
        return
    if args.role is None or args.num_workers is None or args.num_servers is None:
        parser.error("--role, --num-workers and --num-servers are required")

    role, _, code = os.environ.get("FAKE_PS_SERVER_EXIT", "").partition(":")
    if role == args.role:
        print(f"fake {role} failing with code {code}", file=sys.stderr)
        sys.exit(int(code))
    if args.role == "scheduler":
        sock = socket.create_server(("127.0.0.1", args.port))
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{sock.getsockname()[1]}\n")
        os.rename(tmp, args.port_file)
    print(f"fake {args.role} up", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
