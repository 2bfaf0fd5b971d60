"""Hosts reached over ssh, and the host list of `tfps-run -H` / `--hostfile`.

A process on an SshHost runs as `ssh HOST python3 -c <remote.py>`: the remote
wrapper gets the command, its environment and working directory as one JSON line on
stdin, and stops the process's group when stdin ends (the launcher or the connection is
gone). The launcher never writes anything else, so a teardown only has to end the local
ssh client. Every host is assumed to have the same paths as this one (the interpreter,
the package, the working directory), as horovodrun assumes.
"""

import json
import os
import shlex
import socket
import subprocess
import sys

from tf_ps_ops.runner.env import LOCAL_ADDRESS
from tf_ps_ops.runner.process import Host

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_REMOTE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote.py")
_PROBE_TIMEOUT_S = 30

# Variables that describe this shell or session, not the job: the remote host keeps its own.
_NOT_FORWARDED = {"HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL", "MAIL", "PWD", "OLDPWD",
                  "SHLVL", "_", "TERM", "DISPLAY", "TMPDIR", "LS_COLORS", "PS1", "PS2",
                  "PROMPT_COMMAND", "COLUMNS", "LINES"}
_NOT_FORWARDED_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_", "DBUS_")


def forwarded_env(env):
    """The part of `env` a remote process gets (over its host's own environment)."""
    return {k: v for k, v in env.items()
            if k not in _NOT_FORWARDED and not k.startswith(_NOT_FORWARDED_PREFIXES)}


def parse_hosts(text, source="-H"):
    """[(host, slots)] from "h1:2,h2:2" (slots default to 1)."""
    hosts = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        if entry.startswith("["):  # [::1]:2
            host, _, rest = entry[1:].partition("]")
            slots = rest[1:] if rest.startswith(":") else ""
        elif entry.count(":") == 1:
            host, slots = entry.split(":")
        else:
            host, slots = entry, ""
        hosts.append((host, _slots(source, entry, slots or "1")))
    if not hosts:
        raise ValueError(f"{source}: no hosts in {text!r}")
    return _merge(hosts, source)


def parse_hostfile(path):
    """[(host, slots)] from lines `host slots=N`, `host:N` or `host` (# comments)."""
    hosts = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            where = f"{path}:{number}"
            if len(words) == 1:
                hosts.extend(parse_hosts(words[0], where))
            elif len(words) == 2 and words[1].startswith("slots="):
                hosts.append((words[0], _slots(where, line, words[1][len("slots="):])))
            else:
                raise ValueError(f"{where}: expected `host slots=N` or `host:N`, got {line!r}")
    if not hosts:
        raise ValueError(f"{path}: no hosts")
    return _merge(hosts, path)


def _slots(source, entry, text):
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{source}: {entry!r}: slots must be a positive integer")
    return int(text)


def _merge(hosts, source):
    seen = set()
    for host, _ in hosts:
        if host in seen:
            raise ValueError(f"{source}: host {host!r} is listed twice")
        seen.add(host)
    return hosts


def is_local(name):
    return name in LOCAL_NAMES


class SshHost(Host):
    """A host reached with `ssh [ssh_args] name`; `address` is where the other hosts
    reach processes started there (the name itself unless told otherwise)."""

    remote = True

    def __init__(self, name, ssh_args=(), address=None, python=sys.executable):
        super().__init__(address or name, wrap=self._wrap_argv, name=name, tagged=True)
        self.ssh_args = list(ssh_args)
        self.python = python

    def _ssh(self, remote_command):
        return ["ssh", "-T", "-o", "BatchMode=yes", *self.ssh_args, self.name, remote_command]

    def _wrap_argv(self, argv):
        with open(_REMOTE_SOURCE) as f:
            source = f.read()
        return self._ssh(shlex.join([self.python, "-c", source]))

    def command(self, argv, env):
        # The ssh client runs with our own environment (agent socket, config); the job's
        # goes through stdin_payload.
        return self._wrap_argv(argv), dict(os.environ)

    def stdin_payload(self, argv, env):
        env = forwarded_env(env)
        spec = {"argv": [str(a) for a in argv], "env": env, "cwd": os.getcwd()}
        if env.pop("TFPS_ELASTIC_DIR", None) is not None:
            # An elastic worker: its epoch comes through this session, into a folder of
            # its own over there (elastic_ssh.py).
            spec["elastic_relay"] = True
        key_file = env.pop("TFPS_AUTH_KEY_FILE", None)
        if key_file:
            # The job key travels inside the ssh channel, never on a command line; the far
            # end writes it to a file of its own (mode 600) and removes it when the
            # process ends (remote.py).
            with open(key_file) as f:
                spec["auth_key"] = f.read()
        return (json.dumps(spec) + "\n").encode()

    def run(self, argv):
        """Runs `argv` there now (a short probe); its stdout. Raises RuntimeError."""
        command = self._ssh(shlex.join(str(a) for a in argv))
        try:
            result = subprocess.run(command, capture_output=True, text=True,
                                    stdin=subprocess.DEVNULL, timeout=_PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ssh {self.name}: no answer within {_PROBE_TIMEOUT_S} s") from None
        if result.returncode != 0:
            raise RuntimeError(f"ssh {self.name} {' '.join(map(str, argv))} failed (exit "
                               f"{result.returncode}): {result.stderr.strip()[-2000:]}")
        return result.stdout

    def free_port(self):
        """A TCP port free on that host right now."""
        code = ("import socket; s = socket.socket(); s.bind(('', 0)); "
                "print(s.getsockname()[1])")
        return int(self.run([self.python, "-c", code]).split()[-1])

    def interface_address(self, interface):
        return interface_address(interface, self.run)


def interface_address(interface, run=None):
    """The first IPv4 address of `interface`, here or through `run(argv) -> stdout`."""
    argv = ["ip", "-o", "-4", "addr", "show", "dev", interface]
    if run is None:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"--network-interface {interface}: {result.stderr.strip()}")
        text = result.stdout
    else:
        text = run(argv)
    words = text.split()
    if "inet" not in words:
        raise RuntimeError(f"--network-interface {interface}: it has no IPv4 address")
    return words[words.index("inet") + 1].split("/")[0]


def route_address(remote):
    """This machine's address on the way to host `remote` (no packet is sent)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(remote, 22, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(sockaddr)
        return s.getsockname()[0]


def make_hosts(entries, ssh_args, interface=None):
    """[Host] for [(name, slots)]: local names run here without ssh (on loopback when the
    job has no remote host), the rest over ssh."""
    remote = [name for name, _ in entries if not is_local(name)]
    hosts = []
    for name, _ in entries:
        if is_local(name):
            if interface:
                address = interface_address(interface)
            elif remote:
                address = route_address(remote[0])
            else:
                address = LOCAL_ADDRESS
            hosts.append(Host(address, name=name, tagged=True))
        else:
            host = SshHost(name, ssh_args)
            if interface:
                host.address = host.interface_address(interface)
            hosts.append(host)
    return hosts
