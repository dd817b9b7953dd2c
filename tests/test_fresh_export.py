"""Titan -> HF export needs no memory of the import: a fresh process, given only the model type and a
Titan state dict, gives back exactly the HF keys and values (the adapter works from the structure alone)."""

import subprocess
import sys

import pytest
import torch

from moe_bench.adapter import hf_to_titan, moe_block_probes
from moe_bench.core import randomize_
from moe_bench.hf import meta_model
from moe_bench.synth import synthetic_config

EXPORT = """
import sys, torch
from moe_bench.adapter import moe_block_probes, titan_to_hf
from moe_bench.hf import meta_model
from moe_bench.synth import synthetic_config
model, src, dst = sys.argv[1:]
syn, _, _ = synthetic_config(model, small=True)
torch.save(titan_to_hf(torch.load(src), moe_block_probes(meta_model(syn), syn)), dst)
"""


@pytest.mark.parametrize("model", ["qwen3_moe", "qwen2_moe", "deepseek_v3", "mixtral"])
def test_export_in_a_fresh_process(model, tmp_path):
    syn, _, _ = synthetic_config(model, small=True)
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_config(syn)
    randomize_(hf, seed=3)
    hf_sd = hf.state_dict()
    torch.save(hf_to_titan(hf_sd, moe_block_probes(meta_model(syn), syn)), tmp_path / "titan.pt")
    subprocess.run(
        [sys.executable, "-c", EXPORT, model, str(tmp_path / "titan.pt"), str(tmp_path / "hf.pt")],
        check=True,
        timeout=300,
    )
    back = torch.load(tmp_path / "hf.pt")
    assert sorted(back) == sorted(hf_sd)
    assert all(torch.equal(back[k], hf_sd[k]) for k in hf_sd)
