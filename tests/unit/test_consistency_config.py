"""TFPS_CONSISTENCY: parsed alike by the C++ core (cc/common/consistency.h) and Python
(basics.check_consistency), carried by the rendezvous messages, refused when malformed."""

import pytest

from native import load_core

core = load_core()

GOOD = {"bsp": ("bsp", 0, "bsp"), "asp": ("asp", 0, "asp"), "ssp:0": ("bsp", 0, "bsp"),
        "ssp:1": ("ssp", 1, "ssp:1"), "ssp:3": ("ssp", 3, "ssp:3"),
        "ssp:1000000": ("ssp", 1000000, "ssp:1000000")}
BAD = ["", "BSP", "ssp", "ssp:", "ssp:-1", "ssp:+1", "ssp: 1", "ssp:1.5", "ssp:1000001",
       "ssp:99999999", " bsp", "bsp ", "asp:1", "ssp:3x", "sync", "ssp:\u0663"]


@pytest.mark.parametrize("text", sorted(GOOD))
def test_good_values(text):
    assert core.parse_consistency(text) == GOOD[text]


@pytest.mark.parametrize("text", BAD)
def test_bad_values_are_refused_naming_the_variable(text):
    with pytest.raises(RuntimeError, match="InvalidArgument: TFPS_CONSISTENCY=.*is not bsp"):
        core.parse_consistency(text)


@pytest.mark.parametrize("text", sorted(GOOD) + BAD)
def test_python_agrees_with_the_core(text):
    from tf_ps_ops.common.config import check_consistency
    if text in GOOD:
        assert check_consistency(text) == text
    else:
        with pytest.raises(ValueError, match="is not bsp, asp or ssp:S"):
            check_consistency(text)


def test_init_refuses_a_bad_argument_before_joining():
    import tf_ps_ops
    with pytest.raises(ValueError, match="consistency 'ssp:x' is not"):
        tf_ps_ops.init(consistency="ssp:x")
    assert not tf_ps_ops.is_initialized()


def test_registration_and_cluster_view_carry_the_model():
    text = core.format_register("worker", rank=1, size=2, consistency="ssp:3")
    assert "consistency=ssp:3" in text
    assert core.parse_register(text)["consistency"] == "ssp:3"
    # bsp is the default and is not sent: older registrants stay valid.
    plain = core.format_register("worker", rank=1, size=2, consistency="bsp")
    assert "consistency" not in plain and core.parse_register(plain)["consistency"] == "bsp"
    view = core.format_cluster_view(["h:1"], ["h"], [], 0, consistency="asp")
    assert core.parse_register_reply(view)["consistency"] == "asp"


@pytest.mark.parametrize("field", ["consistency=ssp:-2", "consistency=", "consistency=eventual"])
def test_a_bad_consistency_field_is_refused(field):
    with pytest.raises(RuntimeError, match="field .consistency."):
        core.parse_register(f"role=worker\nrank=0\nsize=2\npeer_port=0\n{field}\n")
    with pytest.raises(RuntimeError, match="field .consistency."):
        core.parse_register_reply(f"status=ready\nservers=h:1\nworkers=h\n{field}\n")


def test_tfps_run_flag():
    from tf_ps_ops.runner import run
    args = run.parse_args(["-np", "2", "--consistency", "ssp:2", "python3", "train.py"])
    assert args.consistency == "ssp:2"
    assert run.parse_args(["-np", "2", "python3", "train.py"]).consistency is None


def test_tfps_run_refuses_a_bad_model(capsys):
    from tf_ps_ops.runner import run
    with pytest.raises(SystemExit) as e:
        run.parse_args(["-np", "2", "--consistency", "ssp", "python3", "train.py"])
    assert e.value.code == 2
    assert "consistency 'ssp' is not bsp, asp or ssp:S" in capsys.readouterr().err
