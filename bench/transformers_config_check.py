"""The seconds import-hf (and `export-hf --verify`, `validate --deep`) spend checking
config.json with transformers' own config class (`hf_config.refuse_unloadable`), alone:
in a fresh Python each round, so the time is mostly the import of transformers (and of
torch, which its config classes' modules import), as a command pays it once.

    python bench/transformers_config_check.py --rounds 3

Prints one line per round (seconds), then the median and the range.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Timed in the child: the check of a tiny Qwen2 config, from a Python that has imported
# neither torch nor transformers.
_CHILD = """
import sys, time
assert "torch" not in sys.modules and "transformers" not in sys.modules
from mfsdp_ckpt.convert.hf_config import refuse_unloadable
data = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 32,
        "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}
started = time.perf_counter()
refuse_unloadable(data, "config.json")
print(time.perf_counter() - started)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    seconds = []
    for _ in range(rounds):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], cwd=ROOT, check=True, capture_output=True, text=True
        )
        seconds.append(float(out.stdout.split()[-1]))
        print(f"{seconds[-1]:.1f} s", flush=True)
    print(
        f"config check with transformers: {statistics.median(seconds):.1f} s median"
        f" ({min(seconds):.1f}-{max(seconds):.1f}) over {rounds} fresh processes"
    )


if __name__ == "__main__":
    main()
