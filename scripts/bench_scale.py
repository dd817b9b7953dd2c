"""Phases 3b and native at production width: a checkpoint of published dimensions (2 decoder layers, random bf16
weights at HF's init scale, ~2 GB shards, written by this script to a temporary folder it deletes), run through
`moe-bench` in a subprocess whose peak resident memory and wall time are measured.

    python scripts/bench_scale.py                        # every shape, each phase that serves it, one run
    python scripts/bench_scale.py --shape qwen3_30b --runs 3

Printed per shape and phase: status, wall, wall per layer, peak RSS, and the floor `guard_memory` computes (the
largest layer in the dtypes the phase holds at least at once, plus embeddings and head). Where the floor exceeds the
memory free, the phase refuses before it starts (UNSUPPORTED with the arithmetic): such shapes are written as sparse
files (headers and sizes exact, nothing read), since the refusal reads only the headers.

Not measured here: HF's own `from_pretrained` + forward of the same checkpoint beside it; the tensors are stored
under transformers' own (fused-expert) names, not the per-expert keys the hub's files use.
"""

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from moe_bench.hf import PRODUCTION_CONFIGS

SHAPES = {  # name: (model type, published dims; the model card each comes from)
    "qwen3_30b": ("qwen3_moe", PRODUCTION_CONFIGS["qwen3_moe"]["values"]),  # Qwen/Qwen3-30B-A3B, the repo's own row
    "qwen3_235b": (  # Qwen/Qwen3-235B-A22B config.json
        "qwen3_moe",
        dict(
            hidden_size=4096,
            moe_intermediate_size=1536,
            intermediate_size=12288,
            num_experts=128,
            num_experts_per_tok=8,
            num_attention_heads=64,
            num_key_value_heads=4,
            head_dim=128,
            vocab_size=151936,
        ),
    ),
    "gpt_oss_120b": (  # openai/gpt-oss-120b config.json (experts dequantized)
        "gpt_oss",
        dict(
            hidden_size=2880,
            intermediate_size=2880,
            num_local_experts=128,
            num_experts_per_tok=4,
            num_attention_heads=64,
            num_key_value_heads=8,
            head_dim=64,
            vocab_size=201088,
            sliding_window=128,
        ),
    ),
    "deepseek_v3": (  # deepseek-ai/DeepSeek-V3, the repo's row, its MoE layers only (no dense layer first)
        "deepseek_v3",
        PRODUCTION_CONFIGS["deepseek_v3"]["values"] | dict(first_k_dense_replace=0),
    ),
}
PHASES = ("3b", "native")  # each serves every shape here
SHARD_BYTES = 2 * 1024**3
LAYERS = 2


def free_gb() -> float:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024 / 1e9


def write_checkpoint(folder: Path, model_type: str, dims: dict, sparse: bool) -> float:
    "The checkpoint's shards and config; its size in GB. `sparse`: headers and sizes only (the data a hole)."
    cfg = CONFIG_MAPPING[model_type](**dims | dict(num_hidden_layers=LAYERS, use_cache=True, tie_word_embeddings=False))
    with torch.device("meta"):
        shapes = {k: tuple(t.shape) for k, t in AutoModelForCausalLM.from_config(cfg).state_dict().items()}
    folder.mkdir(parents=True)
    cfg.dtype = torch.bfloat16
    cfg.save_pretrained(folder)
    shards, current, size = [], {}, 0
    for key, shape in shapes.items():
        n = 2 * int(torch.Size(shape).numel())
        if current and size + n > SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
        current[key], size = shape, size + n
    shards.append(current)
    weight_map, total = {}, 0
    gen = torch.Generator().manual_seed(0)
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        path = folder / name
        if sparse:
            header, offset = {}, 0
            for key, shape in shard.items():
                n = 2 * int(torch.Size(shape).numel())
                header[key] = dict(dtype="BF16", shape=list(shape), data_offsets=[offset, offset + n])
                offset += n
            raw = json.dumps(header).encode()
            raw += b" " * (-len(raw) % 8)
            with open(path, "wb") as f:
                f.write(len(raw).to_bytes(8, "little") + raw)
                f.truncate(8 + len(raw) + offset)
        else:
            tensors = {}
            for key, shape in shard.items():
                if re.search(r"norm|bias", key) or len(shape) == 1:
                    t = 1.0 + 0.1 * torch.randn(shape, generator=gen) if "norm" in key else 0.02 * torch.randn(shape)
                else:
                    t = 0.02 * torch.randn(shape, generator=gen)  # HF's initializer_range
                tensors[key] = t.to(torch.bfloat16)
            save_file(tensors, path, metadata={"format": "pt"})
            del tensors
        weight_map |= dict.fromkeys(shard, name)
        total += path.stat().st_size
    (folder / "model.safetensors.index.json").write_text(json.dumps(dict(metadata={}, weight_map=weight_map)))
    return total / 1e9


def run_phase(model_type: str, folder: Path, phase: str, out: Path) -> dict:
    "One phase in a subprocess: status, wall, peak RSS (GNU time), and the floor the record gives."
    cmd = [
        "/usr/bin/time",
        "-v",
        "moe-bench",
        "run",
        model_type,
        "--checkpoint",
        str(folder),
        "--phases",
        phase,
        "--out",
        str(out),
        "--no-progress",
    ]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    rec_file = out / model_type / ("pretrained.json" if phase == "3b" else "native.json")
    rec = json.loads(rec_file.read_text()) if rec_file.is_file() else {}
    return dict(
        status=rec.get("status", f"exit {proc.returncode}"),
        wall_s=wall,
        peak_gb=int(peak.group(1)) / 1024**2 if peak else None,
        floor=rec.get("memory_floor"),
        reason=(rec.get("reason") or rec.get("error") or "")[-600:],
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", action="append", choices=list(SHAPES))
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--phase", action="append", choices=PHASES)
    args = p.parse_args()
    for name in args.shape or list(SHAPES):
        model_type, dims = SHAPES[name]
        root = Path(tempfile.mkdtemp(prefix=f"bench_scale_{name}_"))
        try:
            with torch.device("meta"):
                cfg = CONFIG_MAPPING[model_type](**dims | dict(num_hidden_layers=LAYERS))
                params = sum(t.numel() for t in AutoModelForCausalLM.from_config(cfg).state_dict().values())
            sparse = 2 * params / 1e9 > free_gb() / 2  # too large to hold or to write in time: headers only
            disk = write_checkpoint(root / "ckpt", model_type, dims, sparse)
            print(f"{name}: {params / 1e9:.2f} G parameters, {disk:.1f} GB bf16 on disk{' (sparse)' if sparse else ''}")
            for phase in args.phase or PHASES:
                runs = [run_phase(model_type, root / "ckpt", phase, root / f"out{i}") for i in range(args.runs)]
                wall = statistics.median(r["wall_s"] for r in runs)
                peak = statistics.median(r["peak_gb"] or 0 for r in runs)
                r = runs[0]
                print(
                    f"  {phase:<7} {r['status']:<12} wall {wall:.1f} s ({wall / LAYERS:.1f} s/layer), peak RSS "
                    f"{peak:.2f} GB, floor {r['floor']}  {r['reason']}"
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
