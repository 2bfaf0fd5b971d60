"""argparse types shared by the launcher's flags (run.py, horovodrun.py, discovery.py):
each refuses a value with a message that argparse prefixes with the flag's name.
Standard library only, as the rest of the launcher."""

import argparse


def int_at_least(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def positive_float(text):
    value = float(text)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text):
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value
