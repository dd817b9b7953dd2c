"""torchtitan's HF backend, judged as shipped and with its patches: the acceptance of issue 39 on a fresh clone.

The patched copy runs in fresh processes (one backend per process); the shipped backend in this one."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from moe_bench.backend import PATCHES, backend_check, load_backend
from moe_bench.backend.phase import backend_records, patched_checks, worse_steps
from moe_bench.backend.source import folder_digest, installed_backend
from moe_bench.backend.subject import subject_of
from moe_bench.core import GOOD
from moe_bench.doc_backend import PATCHES_RECORD

from conftest import REPO

ACCEPTANCE = ["qwen3_moe", "deepseek_v3", "mixtral", "gpt_oss", "granitemoe", "minimax_m2"]


@pytest.fixture(scope="module")
def records():
    "The phase's records of the acceptance types: as shipped here, with the patches in one fresh process."
    before = folder_digest(installed_backend())
    recs = backend_records(ACCEPTANCE, say=lambda line: None)
    assert folder_digest(installed_backend()) == before  # the installed torchtitan is byte-identical after
    return recs


def test_as_shipped_each_first_failure_is_named(records):
    first = {m: (r.get("first_failure") or {}).get("step") for m, r in records.items()}
    assert records["qwen3_moe"]["status"] == records["mixtral"]["status"] == "PASS"
    assert first["deepseek_v3"] == "load" and "expert_bias" in records["deepseek_v3"]["reason"]
    assert first["granitemoe"] == "detection" and "block_sparse_moe" in records["granitemoe"]["reason"]
    assert (
        first["minimax_m2"] == "probe"
        and "score_func reads 'softmax' where HF's is 'sigmoid'" in records["minimax_m2"]["reason"]
    )
    assert first["gpt_oss"] == "probe" and "moe_intermediate_size" in records["gpt_oss"]["reason"]


def test_with_the_patches_every_block_passes_the_strict_verdict(records):
    for model, rec in records.items():
        assert rec["status_strict_with_patches"] == "PASS", (model, rec["status_with_patches"])
        assert rec["status_with_patches"].startswith(("PASS", "WARN")), (model, rec["status_with_patches"])
        assert rec["backend"]["unchanged"]


def test_no_type_passes_as_shipped_where_a_key_was_dropped(records):
    for model, rec in records.items():
        load = rec["steps"]["load"]
        lost = load.get("dropped") or load.get("unset") or load.get("moe")
        assert not (lost and rec["status"] in GOOD), (model, lost)


def test_a_mutation_of_the_mapping_fails_the_patched_block(records):
    "Negative control: the strict verdict on the patched backend's module catches every mutation of its tensors."
    for model, rec in records.items():
        for layer in rec["patched"]["steps"]["block"]["layers"]:
            assert layer["mutations"] and layer["mutations_caught"], model


def _controls_fixing() -> dict[str, str]:
    "For each patch, one type its recorded control says it fixes (the committed record, from scripts/backend_patches.py)."
    record = json.loads((REPO / "reports" / PATCHES_RECORD).read_text())
    return {name: next(iter(c["fixes"])) for name, c in record["controls"].items() if c["fixes"]}


@pytest.mark.slow  # fourteen fresh processes, about 2 minutes: `pytest -m slow`
def test_each_patch_control_fails_without_it():
    "Every patch, left out of an otherwise full set, leaves a type it fixes worse: measured again here, not read."
    fixing = _controls_fixing()
    assert set(fixing) == {p.name for p in PATCHES}, set(p.name for p in PATCHES) - set(fixing)
    models = sorted(set(fixing.values()))
    with_all = patched_checks(models)

    def without(patch):
        return patch.name, patched_checks([fixing[patch.name]], tuple(p for p in PATCHES if p is not patch))

    with ThreadPoolExecutor(2) as pool:
        runs = dict(pool.map(without, PATCHES))
    for name, run in runs.items():
        model = fixing[name]
        assert worse_steps(with_all[model], run[model]), (name, model, run[model]["status"])


def test_the_round_trip_in_a_real_fresh_process_is_the_emptied_cache_one(tmp_path):
    "The 1f step judges a fresh process by emptying the adapter's module-level record: a real fresh process agrees."
    shipped = load_backend()
    sda, hf_sd = shipped.state_dict_adapter, dict(subject_of("granitemoe").hf.state_dict())
    torch.save(sda.hf_to_titan_moe_state_dict(dict(hf_sd)), tmp_path / "titan.pt")
    code = (
        "import torch, sys\n"
        "from torchtitan.experiments.transformers_modeling_backend.state_dict_adapter import titan_to_hf_moe_state_dict\n"
        f"back = titan_to_hf_moe_state_dict(torch.load('{tmp_path / 'titan.pt'}'))\n"
        "print('\\n'.join(sorted(back)))\n"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    step = backend_check(shipped, "granitemoe")["steps"]["roundtrip"]
    assert sorted(set(hf_sd) - set(fresh)) == step["fresh"]["missing"] and step["fresh"]["missing"]
    assert sorted(set(fresh) - set(hf_sd)) == step["fresh"]["extra"]


@pytest.mark.parametrize(
    "model, step, where",
    [
        ("deepseek_v4", "probe", "moe_replacement.py"),  # the probe raises on sqrtsoftplus
        ("qwen3_vl_moe", "detection", "model.py"),  # no causal-LM class: the backend cannot build it
        ("zaya", "model", "masking_utils.py"),  # its forward raises: a linear-attention mask from the flex BlockMask
    ],
)
def test_bad_inputs_are_named_statuses_with_their_last_frame(model, step, where):
    result = backend_check(load_backend(), model)
    assert result["steps"][step]["status"] == "ERROR" and where in result["steps"][step]["last_frame"], result["steps"][
        step
    ]
