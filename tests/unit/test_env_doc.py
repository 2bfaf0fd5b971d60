"""docs/env.md lists exactly the variables of both config tables, with their defaults."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_env_doc_matches_the_tables():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_env_doc.py"),
                             "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_tfps_variable_in_the_sources_is_documented():
    doc = open(os.path.join(ROOT, "docs", "env.md")).read()
    import re
    used = set()
    for folder in ("tf_ps_ops", "ps_server"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".py", ".cc", ".h")):
                    text = open(os.path.join(base, name), errors="replace").read()
                    used.update(re.findall(r"\bTFPS_[A-Z_]+[A-Z]\b", text))
    # Macro names and include guards share the prefix but are not variables.
    used = {v for v in used if not v.endswith(("_H", "_H_")) and v not in
            {"TFPS_LOG", "TFPS_RETURN_IF_ERROR", "TFPS_REGISTER_SCALAR_OP"}}
    missing = sorted(v for v in used if f"`{v}`" not in doc)
    assert not missing, f"used but not in docs/env.md: {missing}"
