"""The README's set-up steps, read out of README.md so that CI and benchmarks/newcomer.py run exactly what a
newcomer pastes (standard library only: it runs before anything is installed).

    python3 .ci/readme.py torch          # prints one step; steps: torch, install, demo, test-install, test
    python3 .ci/readme.py --list         # every step, name and command

The Set up section holds two bash blocks, one command line each: the CPU torch, the install and the embedded
demo joined by `&&`; then the test install and the test command. A step is one `&&`-joined part of them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
STEPS = (("torch", "install", "demo"), ("test-install", "test"))  # the parts of each block's command, in order


def setup_commands(readme: Path = README) -> list[str]:
    """The command line of each bash block in the README's '## Set up' section."""
    text = readme.read_text(encoding="utf-8")
    start = text.index("\n## Set up\n")
    end = text.find("\n## ", start + 1)
    blocks = re.findall(r"```bash\n(.*?)```", text[start : end if end > 0 else None], re.S)
    return [" ".join(b.split()) for b in blocks]


def setup_steps(readme: Path = README) -> dict[str, str]:
    """Step name -> its command, in the order a newcomer runs them."""
    commands = setup_commands(readme)
    if len(commands) != len(STEPS):
        raise SystemExit(f"{readme}: '## Set up' has {len(commands)} bash blocks, .ci/readme.py expects {len(STEPS)}")
    steps = {}
    for names, command in zip(STEPS, commands, strict=True):
        parts = [p.strip() for p in command.split(" && ")]
        if len(parts) != len(names):
            raise SystemExit(f"{readme}: `{command}` is not {len(names)} commands joined by && ({', '.join(names)})")
        steps.update(zip(names, parts, strict=True))
    return steps


if __name__ == "__main__":
    steps = setup_steps()
    if sys.argv[1:] == ["--list"]:
        print("\n".join(f"{k}: {v}" for k, v in steps.items()))
    elif len(sys.argv) == 2 and sys.argv[1] in steps:
        print(steps[sys.argv[1]])
    else:
        raise SystemExit(f"usage: python3 .ci/readme.py STEP|--list (steps: {', '.join(steps)})")
