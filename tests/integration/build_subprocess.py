"""Run a tiny LLM build in its own process (used by the crash-safety and concurrency tests).

Usage: python build_subprocess.py HOME [DELAY_S]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import dagster as dg
from fakes import ScriptedBackend

from saber_cli.build import run_build
from saber_config import load_build_config

LLM = {"summaries": "llm", "topics": "llm", "judge": "llm", "corpus_limit": 30}

if __name__ == "__main__":
    home = sys.argv[1]
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    build = load_build_config("tiny", home=home, **LLM)
    result = run_build(build, dg.DagsterInstance.ephemeral(), ScriptedBackend(delay_s=delay))
    sys.exit(0 if result.success else 1)
