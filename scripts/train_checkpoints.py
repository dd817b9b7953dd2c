"""Build the workbench's built-in trained checkpoints (see nbs/00i_trained.ipynb) and print what each run did.

    python scripts/train_checkpoints.py                            # all, into $MOE_BENCH_CHECKPOINTS or checkpoints/
    python scripts/train_checkpoints.py qwen3_moe gemma4           # some
    python scripts/train_checkpoints.py --root /tmp/ckpts --force  # rebuild even where present

A checkpoint already present is reused, not retrained, unless --force is given.
"""

import argparse
import json
import time
import warnings

warnings.filterwarnings("ignore")

from transformers.utils import logging  # noqa: E402

from moe_bench.trained import TRAINED, builtin_checkpoint, checkpoints_root, read_run  # noqa: E402

logging.set_verbosity_error()  # the hybrid's "falling back to the PyTorch implementation" notices
logging.disable_progress_bar()  # "Writing model shards"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "models", nargs="*", metavar="MODEL", help=f"model types (default: all of {', '.join(TRAINED)})"
    )
    parser.add_argument("--root", help="folder of the checkpoints (default: $MOE_BENCH_CHECKPOINTS, else checkpoints/)")
    parser.add_argument("--force", action="store_true", help="rebuild checkpoints that are already present")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in TRAINED]
    if unknown:
        parser.error(f"no trained checkpoint for {', '.join(unknown)}; known: {', '.join(TRAINED)}")
    print(f"checkpoints under {args.root or checkpoints_root()}")
    print(f"{'model':<12} {'steps':>5} {'first':>6} {'final':>6} {'train s':>8} {'build s':>8} {'shards':>6}  folder")
    for model in args.models or list(TRAINED):
        start = time.perf_counter()
        folder = builtin_checkpoint(model, root=args.root, force=args.force)
        build_s = time.perf_counter() - start
        run = read_run(folder)
        shards = len(set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values()))
        print(
            f"{model:<12} {run.steps:>5} {run.first_loss:>6.2f} {run.final_loss:>6.2f} {run.wall_s:>8.1f} "
            f"{build_s:>8.1f} {shards:>6}  {folder}",
            flush=True,
        )


if __name__ == "__main__":
    main()
