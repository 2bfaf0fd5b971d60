"""The rendezvous messages (tf_ps_ops/cc/cluster/messages.h): formatted and parsed in one
place, strictly. A number that atoi would have read as 0 or cut short (junk after the
digits, a sign, out of range) is refused with a message that names the field."""

import pytest

from native import load_core

core = load_core()


def test_worker_and_server_registrations_round_trip():
    worker = core.parse_register(core.format_register("worker", rank=2, size=4, port=7100))
    assert (worker["role"], worker["rank"], worker["size"], worker["port"]) == \
        ("worker", 2, 4, 7100)
    assert worker["host"] == ""  # the scheduler takes the connection's address
    server = core.parse_register(core.format_register("server", host="10.0.0.2", port=7000))
    assert (server["role"], server["host"], server["port"]) == ("server", "10.0.0.2", 7000)
    assert server["more_ports"] == []  # one I/O thread: the message as before
    assert "more_ports" not in core.format_register("server", port=7000)
    two = core.parse_register(core.format_register("server", port=7000, more_ports=[7005, 7009]))
    assert (two["port"], two["more_ports"]) == (7000, [7005, 7009])


@pytest.mark.parametrize("text, message", [
    ("role=worker\nrank=1x\nsize=2\npeer_port=0\n", "field 'rank' is '1x'"),
    ("role=worker\nrank=-1\nsize=2\npeer_port=0\n", "field 'rank' is '-1'"),
    ("role=worker\nrank= 1\nsize=2\npeer_port=0\n", "field 'rank' is ' 1'"),
    ("role=worker\nrank=\nsize=2\npeer_port=0\n", "field 'rank' is ''"),
    ("role=worker\nrank=0\nsize=0\npeer_port=0\n", "field 'size' is '0'"),
    ("role=worker\nrank=0\nsize=99999999999\npeer_port=0\n", "field 'size'"),
    ("role=worker\nrank=0\nsize=2\npeer_port=70000\n", "field 'peer_port' is '70000'"),
    ("role=worker\nsize=2\npeer_port=0\n", "field 'rank' is missing"),
    ("role=server\nport=0\n", "field 'port' is '0'"),
    ("role=server\nport=7000junk\n", "field 'port' is '7000junk'"),
    ("role=server\n", "field 'port' is missing"),
    ("role=server\nport=7000\nport=7001\n", "field 'port' appears twice"),
    ("role=server\nport=7000\ncolour=blue\n", "unknown field 'colour'"),
    ("role=server\nport 7000\n", "is not name=value"),
    ("role=chef\n", "unknown role 'chef'"),
    ("role=server\nport=7000\nmore_ports=7001,0\n", "field 'more_ports' is '0'"),
    ("role=server\nport=7000\nmore_ports=7001,,7002\n", "field 'more_ports' is ''"),
    ("role=server\nport=7000\nmore_ports=\n", "field 'more_ports' is ''"),
    ("role=server\nport=7000\nmore_ports=" + ",".join(["7001"] * 64) + "\n",
     "64 ports; a server has at most 64 in all"),
    ("role=server\nport=7000\nmore_ports=" + ",".join(["7001"] * 65) + "\n",
     "lists more than 64 ports"),
])
def test_bad_registrations_are_refused_naming_the_field(text, message):
    with pytest.raises(RuntimeError, match="InvalidArgument") as e:
        core.parse_register(text)
    assert message in str(e.value)
    assert "from" in str(e.value) or "missing" in message or "twice" in message \
        or "unknown" in message or "name=value" in message or "ports" in message


def test_range_is_stated_in_the_message():
    with pytest.raises(RuntimeError) as e:
        core.parse_register("role=server\nport=65536\n")
    assert "not a whole number from 1 to 65535" in str(e.value)


def test_cluster_views_round_trip():
    text = core.format_cluster_view(["a:7000", "b:7001"], ["h1", "h2"], ["h1:0", "h2:7100"])
    view = core.parse_register_reply(text)
    assert view["ready"] and view["server_id"] == -1
    assert view["servers"] == ["a:7000", "b:7001"] and view["workers"] == ["h1", "h2"]
    assert view["peers"] == ["h1:0", "h2:7100"]
    mine = core.parse_register_reply(core.format_cluster_view(["a:7000", "b:7001"], ["h1"], [], 1))
    assert mine["server_id"] == 1 and mine["peers"] == []
    waiting = core.parse_register_reply(core.format_waiting("1 of 2 servers"))
    assert not waiting["ready"] and waiting["waiting"] == "1 of 2 servers"


def test_server_ports_round_trip_and_spread_workers_by_rank():
    servers, ports = ["a:7000", "::1:8000"], [[7000, 7001, 7002], [8000]]
    view = core.parse_register_reply(core.format_cluster_view(servers, ["h"], ["h:0"],
                                                              server_ports=ports))
    assert view["servers"] == servers and view["server_ports"] == ports
    assert [core.server_address_for(servers, ports, 0, r) for r in range(4)] == \
        ["a:7000", "a:7001", "a:7002", "a:7000"]
    assert core.server_address_for(servers, ports, 1, 3) == "::1:8000"
    # Without the field (every server has one port) each worker takes the servers' entries.
    plain = core.format_cluster_view(servers, ["h"], ["h:0"])
    assert "server_ports" not in plain
    assert core.parse_register_reply(plain)["server_ports"] == []
    assert core.server_address_for(servers, [], 0, 5) == "a:7000"


def test_ipv6_hosts_keep_their_colons():
    view = core.parse_register_reply(core.format_cluster_view(["::1:7000"], ["::1"], ["::1:0"]))
    assert view["servers"] == ["::1:7000"]


@pytest.mark.parametrize("text, message", [
    ("status=ready\nservers=a:7000\nworkers=h\nserver_id=1\n", "field 'server_id' is '1'"),
    ("status=ready\nservers=a:7000\nworkers=h\nserver_id=x\n", "field 'server_id' is 'x'"),
    ("status=ready\nservers=a:70000\nworkers=h\npeers=h:0\n", "field 'servers[0] port'"),
    ("status=ready\nservers=a\nworkers=h\npeers=h:0\n", "field 'servers[0]' is 'a'"),
    ("status=ready\nservers=a:1\nworkers=h,i\npeers=h:0\n", "1 peers for 2 workers"),
    ("status=ready\nservers=a:1\nworkers=h\npeers=h:-1\n", "field 'peers[0] port' is '-1'"),
    ("status=maybe\n", "neither ready nor waiting"),
    ("status=ready\nservers=a:1,b:2\nserver_ports=1/3\nworkers=h\n",
     "field 'server_ports' has 1 entries for 2 servers"),
    ("status=ready\nservers=a:1\nserver_ports=2/3\nworkers=h\n",
     "field 'server_ports[0]' starts with port 2, not 1"),
    ("status=ready\nservers=a:1\nserver_ports=1/x\nworkers=h\n",
     "field 'server_ports[0]' is 'x'"),
    ("status=ready\nservers=a:1\nserver_ports=1//2\nworkers=h\n",
     "field 'server_ports[0]' is ''"),
])
def test_bad_cluster_views_are_refused(text, message):
    with pytest.raises(RuntimeError, match="InvalidArgument") as e:
        core.parse_register_reply(text)
    assert message in str(e.value)
