"""docs/env.md lists exactly the variables of both config tables, with their defaults."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_env_doc_matches_the_tables():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_env_doc.py"),
                             "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_tfps_variable_in_the_sources_is_documented():
    doc = open(os.path.join(ROOT, "docs", "env.md")).read()
    used, macros = set(), set()
    for folder in ("tf_ps_ops", "ps_server", "sfb"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".py", ".cc", ".h")):
                    text = open(os.path.join(base, name), errors="replace").read()
                    used.update(re.findall(r"\bTFPS_[A-Z_]+[A-Z]\b", text))
                    macros.update(re.findall(r"#\s*(?:define|ifndef)\s+(TFPS_\w+)", text))
    # C++ macros and include guards share the prefix but are not variables.
    used -= macros
    missing = sorted(v for v in used if f"`{v}`" not in doc)
    assert not missing, f"used but not in docs/env.md: {missing}"
