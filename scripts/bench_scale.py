"""Phases 3b and native at production width: a checkpoint of published dimensions (2 decoder layers, random bf16
weights at HF's init scale, ~2 GB shards, written by this script to a temporary folder it deletes), run through
`moe-bench` in a subprocess whose peak resident memory and wall time are measured.

    python scripts/bench_scale.py                        # every shape, each phase that serves it, one run
    python scripts/bench_scale.py --shape qwen3_30b --runs 3

Printed per shape and phase: status, wall, wall per layer, peak RSS (GB, as the guard counts), and the floor
`guard_memory` computes (the largest layer at the phase's measured bytes per parameter, plus embeddings and head). The
`hf` phase is the yardstick: transformers' own `from_pretrained` and one forward of the same checkpoint, in bfloat16
then float32 (load and forward seconds each), where both fit. A run whose resident memory passes `--limit-gb` is
stopped and printed as such, never left to the kernel. Where the floor exceeds the
memory free, the phase refuses before it starts (UNSUPPORTED with the arithmetic): such shapes are written as sparse
files (headers and sizes exact, nothing read), since the refusal reads only the headers.

gpt-oss-20b is written as OpenAI publishes it: its experts in MXFP4 (`*_blocks`, `*_scales`), the rest in bf16.
The experts are stored as the hub's files store them: one key per expert and projection for Qwen3-MoE and
DeepSeek-V3 (`experts.7.gate_proj.weight`), transformers' fused tensors only where the hub's files have them too
(gpt-oss's `experts.gate_up_proj`).
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
from moe_bench.quant import quantize_folder

GPT_OSS_20B = dict(  # openai/gpt-oss-20b config.json
    hidden_size=2880,
    intermediate_size=2880,
    num_local_experts=32,
    num_experts_per_tok=4,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=201088,
    sliding_window=128,
)
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
    "gpt_oss_20b": ("gpt_oss", GPT_OSS_20B),  # its experts in MXFP4 as published (QUANTIZED below)
    "gpt_oss_120b": (  # openai/gpt-oss-120b config.json (experts dequantized): gpt-oss-20b's with 128 experts
        "gpt_oss",
        GPT_OSS_20B | dict(num_local_experts=128),
    ),
    "deepseek_v3": (  # deepseek-ai/DeepSeek-V3, the repo's row, its MoE layers only (no dense layer first)
        "deepseek_v3",
        PRODUCTION_CONFIGS["deepseek_v3"]["values"] | dict(first_k_dense_replace=0),
    ),
}
QUANTIZED = {"gpt_oss_20b": "mxfp4"}  # shapes written in their publisher's quantized layout (moe_bench.quant)
# hf: transformers' own from_pretrained + forward, bfloat16 then float32, for scale; native-compare: the native phase's
# comparison alone (no negative controls, random baseline or export: each of those is the comparison again)
PHASES = ("3b", "native", "hf", "native-compare")
NATIVE_COMPARE = """
import json, sys
from pathlib import Path
from moe_bench.native.phase import native_phase
rec = native_phase(sys.argv[1], sys.argv[2], controls=False, random_baseline=False)
out = Path(sys.argv[3]) / sys.argv[1]
out.mkdir(parents=True, exist_ok=True)
(out / "native.json").write_text(json.dumps(rec, default=str))
"""
HF_OWN = """
import json, sys, time, torch
from transformers import AutoModelForCausalLM
ids = torch.randint(0, {vocab}, (2, 192), generator=torch.Generator().manual_seed(0))
out = {{}}
for dtype in (torch.bfloat16, torch.float32):
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=dtype).eval()
    loaded = time.perf_counter()
    with torch.no_grad():
        model(ids, use_cache=False)
    out[str(dtype)] = dict(load_s=loaded - t, forward_s=time.perf_counter() - loaded)
    del model
print(json.dumps(out))
"""
SHARD_BYTES = 2 * 1024**3
LAYERS = 2


def free_gb() -> float:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024 / 1e9


FUSED_ON_DISK = ("gpt_oss",)  # families whose published files hold the fused expert tensors transformers uses


def on_disk(model_type: str, shapes: dict) -> dict:
    "The keys and shapes the hub's files hold: transformers' fused `experts.gate_up_proj` (E, 2F, D) and `down_proj` (E, D, F) split into one (F, D) / (D, F) weight per expert and projection."
    if model_type in FUSED_ON_DISK:
        return shapes
    out = {}
    for key, shape in shapes.items():
        head, _, name = key.rpartition(".")
        if head.endswith("experts") and name == "gate_up_proj":
            n_experts, two_f, dim = shape
            for e in range(n_experts):
                out[f"{head}.{e}.gate_proj.weight"] = out[f"{head}.{e}.up_proj.weight"] = (two_f // 2, dim)
        elif head.endswith("experts") and name == "down_proj":
            n_experts, dim, ffn = shape
            for e in range(n_experts):
                out[f"{head}.{e}.down_proj.weight"] = (dim, ffn)
        else:
            out[key] = shape
    return out


def write_checkpoint(folder: Path, model_type: str, dims: dict, sparse: bool) -> float:
    "The checkpoint's shards and config; its size in GB. `sparse`: headers and sizes only (the data a hole)."
    cfg = CONFIG_MAPPING[model_type](**dims | dict(num_hidden_layers=LAYERS, use_cache=True, tie_word_embeddings=False))
    with torch.device("meta"):
        fused = {k: tuple(t.shape) for k, t in AutoModelForCausalLM.from_config(cfg).state_dict().items()}
    shapes = on_disk(model_type, fused)
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


def run_phase(model_type: str, folder: Path, phase: str, out: Path, limit_gb: float) -> dict:
    "One phase in a subprocess: status, wall, peak RSS (GNU time), and the floor the record gives; stopped (status 'over LIMIT') where its resident memory passes `limit_gb`."
    if phase == "hf":
        vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
        cmd = ["/usr/bin/time", "-v", sys.executable, "-c", HF_OWN.format(vocab=vocab), str(folder)]
    elif phase == "native-compare":
        cmd = ["/usr/bin/time", "-v", sys.executable, "-c", NATIVE_COMPARE, model_type, str(folder), str(out)]
    else:
        cmd = moe_bench_cmd(model_type, folder, phase, out)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    over = watch(proc, limit_gb)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    peak_gb = int(peak.group(1)) * 1024 / 1e9 if peak else None  # GB, as the guard counts
    if phase == "hf":
        own = json.loads(stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
        status = "done" if own else f"exit {proc.returncode}"
        return dict(
            status=status if not over else f"over {limit_gb:g} GB",
            wall_s=wall,
            peak_gb=peak_gb,
            floor=None,
            reason=json.dumps(own) if own else stderr[-600:],
        )
    rec_file = out / model_type / ("pretrained.json" if phase == "3b" else "native.json")  # native-compare's too
    rec = json.loads(rec_file.read_text()) if rec_file.is_file() else {}
    return dict(
        status=f"over {limit_gb:g} GB" if over else rec.get("status", f"exit {proc.returncode}"),
        wall_s=wall,
        peak_gb=peak_gb,
        floor=rec.get("memory_floor"),
        reason=(rec.get("reason") or rec.get("error") or "")[-600:],
    )


def watch(proc: subprocess.Popen, limit_gb: float) -> bool:
    "Poll the process tree's resident memory; kill it past `limit_gb` (True) rather than let the kernel kill this machine."
    while proc.poll() is None:
        if tree_rss_gb(proc.pid) > limit_gb:
            proc.kill()
            return True
        time.sleep(0.5)
    return False


def tree_rss_gb(pid: int) -> float:
    "Resident memory of a process and its children, in GB (from /proc)."
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) * 1024
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total / 1e9


def moe_bench_cmd(model_type: str, folder: Path, phase: str, out: Path) -> list[str]:
    return [
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", action="append", choices=list(SHAPES))
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--phase", action="append", choices=PHASES)
    p.add_argument("--limit-gb", type=float, default=21.0, help="stop a run whose resident memory passes this")
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
            stored = "bf16"
            if name in QUANTIZED and not sparse:  # as the publisher ships it: the bf16 folder quantized, then removed
                quantize_folder(root / "ckpt", root / "quantized", QUANTIZED[name])
                shutil.rmtree(root / "ckpt")
                (root / "quantized").rename(root / "ckpt")
                stored = QUANTIZED[name]
                disk = sum(f.stat().st_size for f in (root / "ckpt").glob("*.safetensors")) / 1e9
            print(
                f"{name}: {params / 1e9:.2f} G parameters, {disk:.1f} GB {stored} on disk{' (sparse)' if sparse else ''}"
            )
            for phase in args.phase or PHASES:
                if phase == "hf" and 6 * params / 1e9 > free_gb():  # bf16 and float32 copies: 2 + 4 bytes
                    print(
                        f"  hf      not run: {params / 1e9:.2f} G parameters in float32 do not fit {free_gb():.1f} GB"
                    )
                    continue
                runs = [
                    run_phase(model_type, root / "ckpt", phase, root / f"out{i}", args.limit_gb)
                    for i in range(args.runs)
                ]
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
