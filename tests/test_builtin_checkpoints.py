"""The built-in trained checkpoints ship in the repository (training differs between machines, so the committed
records regenerate only from these very weights): every one is committed whole and matches its manifest, and a
tampered copy is refused with the file named instead of being loaded or retrained."""

import shutil
import subprocess

import pytest

from moe_bench.trained import MANIFEST, TRAINED, builtin_checkpoint, checkpoint_digests, read_run, verify_checkpoint

from conftest import REPO

SHIPPED = REPO / "checkpoints"


def committed_files(folder) -> list[str] | None:
    "The files git tracks under `folder`, relative to it; None outside a git checkout."
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", str(folder)], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    prefix = folder.relative_to(REPO).as_posix() + "/"
    return sorted(p.removeprefix(prefix) for p in out.split("\0") if p)


@pytest.mark.parametrize("model", list(TRAINED))
def test_shipped_checkpoint_verifies(model):
    folder = SHIPPED / model
    assert folder.is_dir(), f"no shipped checkpoint for {model}: python scripts/train_checkpoints.py {model}, commit it"
    verify_checkpoint(folder)
    assert any(n.endswith(".safetensors") for n in checkpoint_digests(folder))
    assert read_run(folder).model_type == model
    assert builtin_checkpoint(model, root=SHIPPED) == folder  # returned as it is, not retrained
    committed = committed_files(folder)
    if committed is None:
        pytest.skip("not a git checkout: cannot tell what is committed")
    assert committed == sorted([*checkpoint_digests(folder), MANIFEST]), "commit the whole folder, manifest included"


def flip_byte(path, at: int = 1000) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampered_copy_is_refused(tmp_path):
    model = "qwen3_moe"
    copy = tmp_path / model
    shutil.copytree(SHIPPED / model, copy)
    shard = sorted(copy.glob("*.safetensors"))[1]
    flip_byte(shard)
    for check in (lambda: verify_checkpoint(copy), lambda: builtin_checkpoint(model, root=tmp_path)):
        with pytest.raises(ValueError, match=rf"{shard.name} changed.*--force {model}"):
            check()
    assert sorted(p.name for p in tmp_path.iterdir()) == [model]  # refused, not rebuilt beside it


def test_missing_and_extra_files_are_named(tmp_path):
    copy = tmp_path / "gemma4"
    shutil.copytree(SHIPPED / "gemma4", copy)
    (copy / "tokenizer.json").unlink()
    (copy / "stray.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match=r"tokenizer\.json missing; stray\.bin not in the manifest"):
        verify_checkpoint(copy)
