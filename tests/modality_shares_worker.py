"""Run under torchrun by `test_parallelism.py`: ernie4_5_vl_moe's FSDP+TP+EP with a modality mask whose first half of
every sequence is the second modality, so each TP rank holds one modality only. Rank 0 writes the results to argv[1]."""

import datetime
import json
import sys
import warnings

import torch
import torch.distributed as dist

import moe_bench.prototypes.per_modality as per_modality
from moe_bench import cpu_compat
from moe_bench.parallel_worker import model_results, set_spmd_backend


def first_half_second(shape: tuple[int, int]) -> torch.Tensor:
    mask_BL = torch.zeros(shape, dtype=torch.long)
    mask_BL[:, : shape[1] // 2] = 1
    return mask_BL


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    per_modality.mixed_modality_mask = first_half_second  # the mask phase 4 gives the model (`model_inputs`)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    cpu_compat.apply(cpu=True)
    set_spmd_backend("partial_dtensor")
    res = model_results("ernie4_5_vl_moe", torch.device("cpu"), negative_controls=False, configs=("FSDP+TP+EP",))
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, default=str)
    dist.destroy_process_group()
