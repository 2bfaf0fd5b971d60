"""Throwaway sshd servers inside netns hosts, and a client configuration that uses only
files in a temporary folder: /root/.ssh, /etc/ssh and the system's sshd are never
touched (the only system change: Debian's openssh-server is installed when missing, and
sshd's privilege-separation folder /run/sshd is created when missing).

    with Hosts(2) as hosts:
        ssh = SshHosts(hosts, tmp_path)      # an sshd on port 2222 in each host
        ssh.config                           # for `ssh -F` / `tfps-run --ssh-config-file`
"""

import os
import shutil
import subprocess
import time

SSH_PORT = 2222


def sshd_binary():
    """Path of sshd, installing openssh-server with apt-get if needed; (path, why not)."""
    path = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd")
                                    else None)
    if path:
        return path, ""
    if not shutil.which("apt-get"):
        return None, "sshd is missing and there is no apt-get to install openssh-server"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        result = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                 "openssh-server"], capture_output=True, text=True,
                                timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"installing openssh-server failed: {e}"
    if result.returncode != 0 or not os.path.exists("/usr/sbin/sshd"):
        return None, ("installing openssh-server failed (apt-get exit %d): %s"
                      % (result.returncode, result.stderr.strip()[-500:]))
    return "/usr/sbin/sshd", ""


def _keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfps-test",
                    "-f", str(path)], check=True, timeout=30, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


class SshHosts:
    """An sshd on SSH_PORT inside every host of `hosts` (netns.Hosts), started with
    hosts.popen so that the namespaces' teardown stops them; keys and configs in `folder`."""

    def __init__(self, hosts, folder, sshd):
        self.folder = folder = folder / "ssh"
        folder.mkdir(mode=0o700)
        host_pub = _keygen(folder / "host_key")
        client_pub = _keygen(folder / "client_key")
        (folder / "authorized_keys").write_text(client_pub + "\n")
        (folder / "known_hosts").write_text("".join(
            f"[{hosts.address(i)}]:{SSH_PORT} {host_pub}\n" for i in range(hosts.n)))
        self.config = folder / "ssh_config"
        self.config.write_text(
            "Host *\n"
            f"  IdentityFile {folder / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {folder / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n"
            "  User root\n  ConnectTimeout 10\n  LogLevel ERROR\n")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privsep chroot
        self.daemons = []
        for i in range(hosts.n):
            config = folder / f"sshd_config{i}"
            config.write_text(
                f"Port {SSH_PORT}\nListenAddress {hosts.address(i)}\n"
                f"HostKey {folder / 'host_key'}\n"
                f"AuthorizedKeysFile {folder / 'authorized_keys'}\n"
                f"PidFile {folder / f'sshd{i}.pid'}\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\n"
                "StrictModes no\nPrintMotd no\nX11Forwarding no\nAllowTcpForwarding no\n")
            log = open(folder / f"sshd{i}.log", "wb")
            self.daemons.append(hosts.popen(i, [sshd, "-D", "-e", "-f", str(config)],
                                            stdout=log, stderr=subprocess.STDOUT))
            log.close()
        self._wait_listening(hosts)

    def _wait_listening(self, hosts, limit_s=20):
        code = ("import socket,sys\ns=socket.socket()\ns.settimeout(1)\n"
                "sys.exit(s.connect_ex((sys.argv[1], %d)))" % SSH_PORT)
        for i in range(hosts.n):
            give_up = time.monotonic() + limit_s
            while hosts.run(i, ["python3", "-c", code, hosts.address(i)],
                            timeout=20).returncode != 0:
                if self.daemons[i].poll() is not None or time.monotonic() > give_up:
                    raise RuntimeError("sshd in host %d did not start: %s" % (
                        i, (self.folder / f"sshd{i}.log").read_text()[-2000:]))
                time.sleep(0.1)

    def pids(self):
        return {d.pid for d in self.daemons}
