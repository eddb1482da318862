"""Write task rows for any reasoning-gym task, in NeMo Gym's JSONL format.

    python scripts/reasoning_gym_dataset.py --task mini_sudoku --size 2000 --seed 42 \\
        --output data/mini_sudoku.jsonl [--config '{"min_empty": 4}']

Each row is the task entry (`question`, `answer`, `metadata`) plus
`responses_create_params` asking the question and `agent_ref` naming
`reasoning_gym_simple_agent`, so `gym-runner collect` runs it as is. The same task,
size, seed and config always give the same rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gymbus.functions.environments.reasoning_gym import task_rows


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", required=True, help="reasoning-gym task name, e.g. mini_sudoku")
    parser.add_argument("--size", type=int, default=500, help="number of rows (default 500)")
    parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    parser.add_argument("--config", default="{}", help="task config as a JSON object")
    parser.add_argument("--output", type=Path, required=True, help="JSONL file to write")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        config = json.loads(args.config)
        rows = list(task_rows(args.task, args.size, args.seed, config))
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} {args.task} rows to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
