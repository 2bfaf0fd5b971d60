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
])
def test_bad_registrations_are_refused_naming_the_field(text, message):
    with pytest.raises(RuntimeError, match="InvalidArgument") as e:
        core.parse_register(text)
    assert message in str(e.value)
    assert "from" in str(e.value) or "missing" in message or "twice" in message \
        or "unknown" in message or "name=value" in message


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
])
def test_bad_cluster_views_are_refused(text, message):
    with pytest.raises(RuntimeError, match="InvalidArgument") as e:
        core.parse_register_reply(text)
    assert message in str(e.value)
