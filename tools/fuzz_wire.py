"""A small in-tree mutation fuzzer for what the network hands our parsers (issue 11).

    python tools/fuzz_wire.py [--seconds S] [--seed N] [--target NAME ...]

Targets, all through the C++ core's Python binding (tf_ps_ops/_core, no TensorFlow):
  head        DecodeHead: a 64-byte header (+ dims / params) against a payload size; a
              header it accepts must survive an encode/decode round trip unchanged
  batch       CheckBatch: a batch head against the number of frames that follow
  register    ParseRegister: the rendezvous' registration text
  reply       ParseRegisterReply: the scheduler's answer (cluster view)
  codec       the codecs' payload checks (check_encoded) and decoders (codec_decode)

Inputs start from valid seeds (real encodings) and are mutated: bit flips, interesting
bytes and integers (0, 1, -1, 2^31, 2^63, 2^64-1, ...) written over fields, truncation,
extension, splicing two inputs, and text edits (digits, separators, long lines). Without
clang there is no libFuzzer coverage feedback, so the mutations aim at the fields the
parsers check (sizes, counts, flags, types) instead.

A crash (a signal: segfault, abort) is what matters: the fuzzing runs in a child process
that writes each input to a file before trying it, so the parent can report the input
that killed it (saved under --crash-dir). A Python exception other than the parsers'
documented errors, or a broken round trip, is a failure too. Exit 0: nothing found.
`make fuzz` runs it for FUZZ_SECONDS; tests/unit/test_fuzz_wire.py runs a short budget.
"""

import argparse
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("head", "batch", "register", "reply", "codec")
INTERESTING = [0, 1, 2, 7, 8, 63, 64, 255, 256, 4095, 4096, 65535, 65536, 2**24, 2**31 - 1,
               2**31, 2**32 - 1, 2**32, 2**40, 2**40 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def load_core():
    sys.path.insert(0, str(REPO / "tests"))
    from native import load_core as load
    return load()


# --- seeds ------------------------------------------------------------------------------

def head_seeds(core):
    T = core.MSG_TYPES
    f32 = 1  # any valid wire dtype id works as a seed; the mutations find the others
    push = dict(type=T["PUSH_PULL"], key=core.key_of_name("w"), partition=1, num_partitions=3,
                step=7, dtype=f32, flags=0, sender=2, count=6, total_count=18)
    seeds = [(core.encode_head(dict(type=t)), 0) for t in T.values()]
    seeds.append((core.encode_head(push, [3, 6]), 24))
    seeds.append((core.encode_head(dict(push, flags=core.FLAG_NO_DATA), [18]), 0))
    seeds.append((core.encode_head(dict(push, type=T["PUSH_PULL_REPLY"]), [6]), 24))
    seeds.append((core.encode_head(dict(push, codec=3, total_count=6, partition=0,
                                        num_partitions=1)), 40))
    seeds.append((core.encode_head(dict(type=T["BATCH"], count=3, sender=0)), 0))
    return seeds


def text_seeds(core):
    register = [core.format_register("worker", "10.0.0.2", 7001, 3, 8),
                core.format_register("server", "", 7000, -1, 0)]
    reply = [core.format_cluster_view(["10.0.0.1:7000", "10.0.0.2:7000"],
                                      ["10.0.0.1", "10.0.0.2"],
                                      ["10.0.0.1:7100", "10.0.0.2:7100"], -1),
             core.format_cluster_view(["h:1"], ["h"], [], 0),
             core.format_waiting("1 of 2 servers and 0 of 3 workers")]
    return register, reply


# --- mutations --------------------------------------------------------------------------

def mutate_bytes(rng, data, pool):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(7)
        if choice == 0 and data:  # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and data:  # an interesting byte
            data[rng.randrange(len(data))] = rng.choice([0, 1, 0x7f, 0x80, 0xfe, 0xff])
        elif choice == 2 and len(data) >= 8:  # an interesting integer over a field
            width = rng.choice([1, 2, 4, 8])
            at = rng.randrange(0, len(data) - width + 1)
            at -= at % width  # the header's fields are aligned
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            data[at:at + width] = value.to_bytes(width, "little")
        elif choice == 3 and data:  # truncate
            del data[rng.randrange(len(data)):]
        elif choice == 4:  # extend
            data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, 64, 300])))
        elif choice == 5 and pool:  # splice with another input
            other = rng.choice(pool)
            cut = rng.randrange(len(data) + 1)
            data = data[:cut] + other[rng.randrange(len(other) + 1):]
        elif data:  # a random byte
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def mutate_text(rng, text, pool):
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(8)
        i = rng.randrange(len(lines)) if lines else 0
        if choice == 0 and lines:
            lines[i] = lines[i].replace("=", rng.choice(["", "==", " = ", "=\x00"]), 1)
        elif choice == 1 and lines:  # a number where there was one, or junk
            name = lines[i].split("=", 1)[0]
            lines[i] = name + "=" + rng.choice([str(v) for v in INTERESTING] +
                                               ["-1", "", " 1", "1e3", "0x10", "+5", "1" * 40])
        elif choice == 2:
            lines.insert(i, rng.choice(["", "=", "x=1", "role=server", "servers=,,,",
                                        "ready=1", "a" * 5000]))
        elif choice == 3 and lines:
            del lines[i]
        elif choice == 4 and lines:
            lines[i] = lines[i] * rng.randint(2, 50)
        elif choice == 5 and pool:
            lines += rng.choice(pool).split("\n")
        elif choice == 6 and lines:
            lines[i] = lines[i].replace(",", rng.choice([",,", ":", ",:,", ""]))
        else:
            raw = mutate_bytes(rng, "\n".join(lines).encode(), [])
            lines = raw.decode("utf-8", "replace").split("\n")
    return "\n".join(lines)


# --- targets ----------------------------------------------------------------------------

class Failure(Exception):
    pass


def run_head(core, rng, state):
    frame, payload = rng.choice(state["heads"])
    frame = mutate_bytes(rng, frame, [h for h, _ in state["heads"][:8]])
    payload = rng.choice([payload, 0, rng.randrange(1 << 20), rng.choice(INTERESTING) % (1 << 62)])
    yield frame
    err, fields = core.decode_head(frame, payload)
    if err is None:
        params = fields.pop("params", [])
        dims = fields.pop("dims", [])
        again = core.encode_head(fields, dims, params)
        err2, fields2 = core.decode_head(again, payload)
        fields2.pop("params", None)
        if err2 is not None or fields2.pop("dims", []) != dims or fields2 != fields:
            raise Failure(f"round trip changed an accepted header: {err2}, {fields} vs {fields2}")
        state["heads_accepted"] += 1
        if len(state["heads"]) < 200:
            state["heads"].append((frame, payload))


def run_batch(core, rng, state):
    frame, _ = rng.choice(state["heads"])
    frame = mutate_bytes(rng, frame, [])
    frames_after = rng.choice([0, 1, 2, 3, 6, 8191, 8192, rng.randrange(1 << 16)])
    yield frame
    core.check_batch(frame, frames_after)  # returns None or the error text


def run_text(parse, pool_name):
    def run(core, rng, state):
        text = mutate_text(rng, rng.choice(state[pool_name]), state[pool_name][:4])
        yield text.encode("utf-8", "surrogateescape")
        try:
            getattr(core, parse)(text)
        except RuntimeError as e:  # the documented refusal: an InvalidArgument status
            if not str(e).startswith("InvalidArgument"):
                raise Failure(f"{parse} refused with {e!r}") from None
    return run


def run_codec(core, rng, state):
    import numpy as np
    codec = rng.randrange(0, 8)  # 7: no such codec
    n = rng.choice([0, 1, 2, 3, 31, 32, 33, 1000, rng.randrange(1 << 12)])
    size = rng.choice([0, 1, 4, 8, n, 2 * n, 4 * n, n // 8 + 8, rng.randrange(1 << 14)])
    data = mutate_bytes(rng, bytes(rng.randrange(256) for _ in range(min(size, 64)))
                        + bytes(max(0, size - 64)), [])
    yield bytes([codec]) + n.to_bytes(4, "little") + data
    try:
        core.check_encoded(codec, n, len(data))  # None or the refusal's text
        core.codec_decode(codec, np.frombuffer(data, np.uint8), n, rng.randrange(1 << 31))
    except (RuntimeError, ValueError) as e:
        if "Internal" in str(e):
            raise Failure(f"codec {codec} n={n} bytes={len(data)}: {e}") from None


RUNNERS = {"head": run_head, "batch": run_batch, "register": run_text("parse_register", "register"),
           "reply": run_text("parse_register_reply", "reply"), "codec": run_codec}


# --- child and parent -------------------------------------------------------------------

def child(args):
    core = load_core()
    register, reply = text_seeds(core)
    state = {"heads": head_seeds(core), "register": register, "reply": reply,
             "heads_accepted": 0}
    rng = random.Random(args.seed)
    current = os.open(args.current, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    counts = dict.fromkeys(args.target, 0)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in range(200):
            name = rng.choice(args.target)
            steps = RUNNERS[name](core, rng, state)
            data = next(steps)
            os.pwrite(current, struct.pack("<I", len(name)) + name.encode() + data, 0)
            os.ftruncate(current, 4 + len(name) + len(data))
            try:
                next(steps, None)
            except Failure as e:
                print(f"FAILURE in {name}: {e}", flush=True)
                return 1
            counts[name] += 1
    print("inputs: " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + f"; headers accepted {state['heads_accepted']}", flush=True)
    return 0


def parent(args):
    crash_dir = Path(args.crash_dir)
    crash_dir.mkdir(parents=True, exist_ok=True)
    current = crash_dir / f"current-{os.getpid()}"
    cmd = [sys.executable, __file__, "--child", "--seconds", str(args.seconds), "--seed",
           str(args.seed), "--current", str(current), "--target", *args.target]
    started = time.monotonic()
    proc = subprocess.run(cmd, timeout=args.seconds + 120)
    try:
        if proc.returncode < 0:
            saved = crash_dir / f"crash-seed{args.seed}-{int(time.time())}"
            current.rename(saved)
            print(f"fuzz_wire: the child died by signal {-proc.returncode} on the input saved "
                  f"in {saved} (4-byte name length, target name, input)", file=sys.stderr)
            return 1
        if proc.returncode != 0:
            print(f"fuzz_wire: failed (exit {proc.returncode}) after "
                  f"{time.monotonic() - started:.0f} s, seed {args.seed}", file=sys.stderr)
            return 1
        return 0
    finally:
        if current.exists():
            current.unlink()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--target", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--crash-dir", default=str(REPO / "build" / "fuzz"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--current", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
        print(f"fuzz_wire: seed {args.seed}", flush=True)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
