"""Install moe_bench. Every dependency is pinned here so a fresh machine gets the tested set.

torch is pinned to the CPU build that lies on disk: an unpinned or ranged torch would pull a
multi-GB CUDA build from the registry.
"""
from configparser import ConfigParser

from setuptools import find_packages, setup

cfg = ConfigParser(delimiters=["="])
cfg.read("settings.ini", encoding="utf-8")
meta = cfg["DEFAULT"]

requirements = [
    "torch==2.13.0",
    "transformers==5.23.0",
    "torchtitan==0.3.0",
    "triton==3.9.0",  # torchtitan's MoE imports it; the CPU torch build does not ship it
    "safetensors==0.8.0",
    "accelerate==1.16.0",  # transformers' FP8 and MXFP4 quantizers need it to load a quantized checkpoint (phase 3b)
    "tokenizers==0.23.3",  # trains the built-in checkpoints' tokenizer (moe_bench.trained)
    "matplotlib==3.11.2",
    "pandas==3.1.1",
    "papermill==2.7.0",
    "jupyterlab==4.6.6",
    "nbconvert==7.17.2",
    "ipykernel==7.4.0",
    "tqdm==4.70.1",
    # nbdev 2 is the last line that reads settings.ini; newer execnb/fastcore break it.
    "nbdev==2.4.14",
    "execnb==0.1.18",
    "fastcore==1.14.5",
]
dev_requirements = [
    "pytest==9.2.0",
    "ruff==0.17.6",
    "selenium==4.40.0",  # drives /usr/bin/chromium
    # torchtitan's own pre-commit formatter and linter, which the backend patches must pass (moe_bench.backend.patches)
    "ufmt==2.3.0",
    "black==22.12.0",
    "usort==1.0.5",
    "flake8==7.1.1",
    "flake8-bugbear==22.4.25",
    "pep8-naming==0.12.1",
    "flake8-pep585==0.1.7",
    "flake8-new-union-types==0.4.1",
    "torchfix==0.7.0",
]

setup(
    name=meta["lib_name"],
    version=meta["version"],
    description=meta["description"],
    author=meta["author"],
    license="Apache-2.0",
    python_requires=">=" + meta["min_python"],
    packages=find_packages(include=["moe_bench", "moe_bench.*"]),
    package_data={"moe_bench": ["templates/*/*", "backend/diffs/*.patch"]},
    include_package_data=True,
    install_requires=requirements,
    extras_require={"dev": dev_requirements},
    entry_points={
        "console_scripts": ["moe-bench=moe_bench.runner:main"],
        "nbdev": [f"{meta['lib_path']}={meta['lib_path']}._modidx:d"],
    },
)
