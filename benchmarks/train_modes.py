"""What benchmarks/train_bench.py runs: its modes and their labels, the models' timed
steps and parameter counts, which (model, mode) pairs apply, and the link arithmetic
(rate_bits, t_opt) that the deadlines and the report share.
"""

import zoo_models

# int8: sum with TFPS_COMPRESSION=int8; auto: the planner's choice per layer (plan="auto"),
# uncompressed; auto_int8: the same, free to pick int8 too (TFPS_PLAN_CODECS=none,int8);
# tuned: sum with the autotuner (TFPS_AUTOTUNE=1) searching during tune_warmup()'s extra warm-up
# steps, the timed steps under what it kept
TFPS_MODES = ("sum", "ps", "sfb", "hybrid", "int8", "auto", "auto_int8", "tuned")
TUNE_ENV = {"TFPS_AUTOTUNE": "1", "TFPS_AUTOTUNE_WARMUP_STEPS": "2",
            "TFPS_AUTOTUNE_STEPS_PER_SAMPLE": "4"}


def tune_env(user_env):
    """The tuned mode's autotuner settings: TUNE_ENV's, but those --env gives."""
    return {**TUNE_ENV, **{k: v for k, v in user_env.items() if k in TUNE_ENV}}


def tune_warmup(env):
    """The extra warm-up steps the tuned mode's search needs under `env` (tune_env's): its
    own warm-up, its first untimed step, 11 samples at most (each a step after the change,
    then the timed ones), and a step to spare."""
    return (int(env["TFPS_AUTOTUNE_WARMUP_STEPS"]) + 1
            + 11 * int(env["TFPS_AUTOTUNE_STEPS_PER_SAMPLE"]) + 1)


ALL_MODES = ("single",) + TFPS_MODES + ("mwms", "pss", "horovod")
DENSE_MODES = ("sum", "ps", "mwms", "pss", "horovod")  # move the whole gradient: t_opt applies
MODE_LABELS = {"single": "single process", "sum": "tf_ps_ops sum", "ps": "tf_ps_ops ps",
               "sfb": "tf_ps_ops sfb", "hybrid": "tf_ps_ops hybrid",
               "int8": "tf_ps_ops sum int8", "auto": "tf_ps_ops auto plan",
               "auto_int8": "tf_ps_ops auto plan, int8 allowed",
               "tuned": "tf_ps_ops sum, autotuned", "mwms": "TF MultiWorkerMirrored",
               "pss": "TF ParameterServer", "horovod": "Horovod (Gloo)"}
# Timed steps per model (--steps overrides): windows of a few seconds, so that the CPU
# accounting (10 ms ticks) and the median mean something.
STEPS = {"mlp": 12, "cnn": 40, "tiny_mlp": 2, "tiny_cnn": 2, **zoo_models.STEPS}
PLOT_LABELS = {"single": "single\nprocess", "sum": "tf_ps_ops\nsum", "ps": "tf_ps_ops\nps",
               "sfb": "tf_ps_ops\nsfb", "hybrid": "tf_ps_ops\nhybrid",
               "int8": "tf_ps_ops\nsum int8", "auto": "tf_ps_ops\nauto",
               "auto_int8": "tf_ps_ops\nauto+int8", "tuned": "tf_ps_ops\nautotuned",
               "mwms": "TF\nMWMS",
               "pss": "TF\nPSS", "horovod": "Horovod\n(Gloo)"}
PARAMS_GUESS = {"mlp": 36.8e6, "cnn": 1.2e6, "tiny_mlp": 0.34e6, "tiny_cnn": 0.08e6,
                **zoo_models.PARAMS}


def applies(model, mode, model_modes=None):
    """Whether a (model, mode) pair is run: --model-modes restricts a model's modes; the
    zoo's SFB / HybComm / codec modes run only where zoo_models.EXTRA_TFPS_MODES lists
    them (Dense layers on 2-D inputs; dense gradients)."""
    if model_modes and model in model_modes and mode not in model_modes[model]:
        return False
    if model in zoo_models.MODELS and mode in ("sfb", "hybrid", "int8"):
        return mode in zoo_models.EXTRA_TFPS_MODES[model]
    return mode != "int8" or model in zoo_models.MODELS


def rate_bits(rate):
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * factor
    raise ValueError("unknown rate %r (use e.g. 1gbit, 500mbit)" % rate)


def t_opt(params, workers, rate):
    """BytePS's optimum with the servers on the worker machines (k = 0 extra machines):
    2(n-1)M / (nB), M = fp32 gradient bytes (shared/notes/ALGORITHMS.md)."""
    return 2 * (workers - 1) * params * 4 / (workers * rate_bits(rate) / 8)
