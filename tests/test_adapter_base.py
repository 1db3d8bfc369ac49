"""An adapter is used on its own base model, or refused with both models named."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Ran, run_in_process

from vqa_r1.config import save_config
from vqa_r1.errors import UserError
from vqa_r1.models.loading import load_model
from vqa_r1.recipes import load_config

REPO = Path(__file__).resolve().parents[1]


def _tiny(name: str, *overrides: str):
    return load_config("evaluate", name, overrides=[*overrides])


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    """A run directory as training leaves it: config.yaml and a LoRA adapter in final/."""
    from peft import LoraConfig, get_peft_model

    run = tmp_path_factory.mktemp("adapters") / "sft"
    config = load_config("sft", "tiny-qwen2.5-vl")
    loaded = load_model(config)
    target = loaded.adapter.lora_target_regex()
    model = get_peft_model(loaded.model, LoraConfig(r=2, lora_alpha=4, target_modules=target))
    model.save_pretrained(str(run / "final"))
    save_config(config, run / "config.yaml")
    return run


def test_the_adapter_loads_on_its_base(sft_run):
    loaded = load_model(_tiny("tiny-qwen2.5-vl"), adapter_path=sft_run / "final")
    assert hasattr(loaded.model, "peft_config")


@pytest.mark.parametrize(
    ("name", "overrides", "mentions"),
    [
        ("tiny-smolvlm", [], "tiny-smolvlm"),  # another family
        ("tiny-qwen2.5-vl", ["model.tiny_layers=3"], "tiny_layers 3"),  # another size
        ("tiny-qwen2.5-vl-pretrained", [], "tiny-qwen2.5-vl-pretrained"),  # other weights
    ],
)
def test_an_adapter_on_another_model_names_both(sft_run, name, overrides, mentions):
    with pytest.raises(UserError) as caught:
        load_model(_tiny(name, *overrides), adapter_path=sft_run / "final")
    message = str(caught.value)
    assert "was trained on tiny-qwen2.5-vl (tiny_seed 0, tiny_hidden 128, tiny_layers 2" in message
    assert mentions in message and "--model tiny-qwen2.5-vl" in message


def test_an_adapter_without_its_run_is_checked_by_its_weights(sft_run, tmp_path):
    """A bare adapter folder on a deeper model of the same family: PEFT alone would warn and
    leave the third layer's LoRA at its initial values; here that is an error. (Its base is named
    by a folder that is not here and it has no record of it: its weights are all there is.)"""
    bare = tmp_path / "adapter"
    shutil.copytree(sft_run / "final", bare)
    name_base(bare, "/elsewhere/my-model")
    with pytest.raises(UserError) as caught:
        load_model(_tiny("tiny-qwen2.5-vl", "model.tiny_layers=3"), adapter_path=bare)
    message = str(caught.value)
    assert f"adapter {bare} (made for " in message and "does not fit tiny-qwen2.5-vl" in message
    assert "adapter weights of the model are not in it (e.g. " in message and "layers.2." in message
    with pytest.raises(
        UserError, match=r"does not fit tiny-smolvlm.*28 of its 28 weights have no place in it"
    ):
        load_model(_tiny("tiny-smolvlm"), adapter_path=bare)


def test_evaluating_an_adapter_on_another_model_is_refused_before_queueing(sft_run, tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), "evaluate", "--model",
         "tiny-smolvlm", "--adapter", str(sft_run), "--dry-run",
         "--output-dir", str(tmp_path / "eval")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout[-500:] + out.stderr[-500:]
    assert out.stderr.startswith(f"error: adapter {sft_run / 'final'} was trained on tiny-qwen2.5")
    assert "not on tiny-smolvlm" in out.stderr


@pytest.mark.parametrize(
    ("base", "refused"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", True),
        ("/hf/hub/models--Qwen--Qwen2.5-VL-7B-Instruct/snapshots/0abc", True),
        ("Qwen/Qwen2.5-VL-3B-Instruct", False),
        ("/hf/hub/models--Qwen--Qwen2.5-VL-3B-Instruct/snapshots/0abc", False),
    ],
)
def test_a_hub_adapter_names_its_base_in_adapter_config(tmp_path, base, refused):
    """An adapter from elsewhere (no run of ours beside it): adapter_config.json's base."""
    from vqa_r1.models.loading import check_adapter_base

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    model = load_config("evaluate", "qwen2.5-vl-3b").model
    if not refused:
        check_adapter_base(adapter, model)
        return
    with pytest.raises(UserError) as caught:
        check_adapter_base(adapter, model)
    assert str(caught.value) == (
        f"adapter {adapter} was made for Qwen/Qwen2.5-VL-7B-Instruct (adapter_config.json), "
        "not for qwen2.5-vl-3b (Qwen/Qwen2.5-VL-3B-Instruct): use it with --model qwen2.5-vl-7b"
    )


# ------------------------------------------- an adapter copied out of its run (issue 30, item 3)

QWEN, INTERNVL = "tiny-qwen2.5-vl-pretrained", "tiny-internvl-pretrained"
SFT_SETS = [
    "--set", "train.max_steps=1", "--set", "train.save_steps=1",
    "--set", "train.per_device_train_batch_size=2", "--set", "data.num_samples=4",
]  # fmt: skip


def vqa(*argv) -> Ran:
    from vqa_r1.cli import main

    return run_in_process(main, [str(a) for a in argv])


def launch(*argv) -> Ran:
    from vqa_r1.cli.launch import main

    return run_in_process(main, [str(a) for a in argv])


def name_base(adapter: Path, base: str) -> None:
    """What the adapter's adapter_config.json names as its base (base_model_name_or_path)."""
    file = adapter / "adapter_config.json"
    config = json.loads(file.read_text())
    config["base_model_name_or_path"] = base
    file.write_text(json.dumps(config))


def refused(ran: Ran, *words: str) -> str:
    """Refused as bad input: exit 2, one line on stderr."""
    assert ran.returncode == 2, ran.stdout[-1000:] + ran.stderr[-1000:]
    assert ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1, ran.stderr
    for word in words:
        assert word in ran.stderr, ran.stderr
    return ran.stderr


@pytest.fixture(scope="module")
def trained(synthetic_dir, tmp_path_factory) -> Path:
    """A run trained as a user trains one: `vqa-r1 sft` on tiny-qwen2.5-vl-pretrained, 1 step."""
    run = tmp_path_factory.mktemp("trained") / "sft"
    ran = vqa("sft", "--model", QWEN, "--dataset", synthetic_dir, *SFT_SETS, "--output-dir", run)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return run


@pytest.fixture
def copied(trained, tmp_path) -> Path:
    """Its final/ copied out of the run: `cp -r RUN/final bare/adapter`."""
    bare = tmp_path / "bare" / "adapter"
    shutil.copytree(trained / "final", bare)
    return bare


def test_a_run_records_its_base_beside_each_adapter(trained):
    from vqa_r1.models.base_record import RECORD, fingerprint
    from vqa_r1.models.loading import PRETRAINED_DIR

    record = json.loads((trained / "final" / RECORD).read_text())
    assert record["model"] == {"name": QWEN, "path": None}
    assert record["path"] == str((PRETRAINED_DIR / QWEN).resolve())
    assert {k: record[k] for k in ("config", "weights")} == fingerprint(PRETRAINED_DIR / QWEN)
    assert record["config"]["model_type"] == "qwen2_5_vl" and len(record["weights"]) == 16
    checkpoint = trained / "checkpoints" / "checkpoint-1"
    assert json.loads((checkpoint / RECORD).read_text()) == record


def test_a_copied_adapter_on_another_family_is_refused_and_on_its_base_evaluates(
    copied, synthetic_dir, tmp_path
):
    """The issue's case as a user types it: the two tiny families name and size their language
    layers alike, so PEFT and the weights check let it through; the record of its base does not."""
    out = tmp_path / "out"
    common = ["--dataset", synthetic_dir, "--adapter", copied, "--limit", "2", "--batch-size", "2",
              "--set", "eval.max_new_tokens=4", "--output-dir", out]  # fmt: skip
    refused(
        vqa("evaluate", "--model", INTERNVL, *common),
        f"error: adapter {copied} was trained on {QWEN} (",
        f"adapter_base.json), not on {INTERNVL} (",
        "another model (model_type qwen2_5_vl vs internvl); use it with --model "
        f"{QWEN}, or pick the adapter trained on this model",
    )
    assert not out.exists()
    ran = vqa("evaluate", "--model", QWEN, *common)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads((out / "scores.json").read_text())["n"] == 2


ENTRIES = {
    "launch-evaluate": ("launch", "evaluate", "--adapter", "{a}", "--dry-run"),
    "launch-sweep": (
        "launch",
        "evaluate",
        "--adapter",
        "{a}",
        "--sweep",
        "eval.limit=1,2",
        "--dry-run",
    ),  # fmt: skip
    "launch-merge": ("launch", "merge", "--adapter", "{a}", "--dry-run"),
    "grpo-init-adapter": ("vqa", "grpo", "--init-adapter", "{a}"),
    "launch-grpo-init-adapter": ("launch", "grpo", "--init-adapter", "{a}", "--dry-run"),
    "launch-pipeline": (
        "launch",
        "pipeline",
        "--steps",
        "grpo,evaluate",
        "--set",
        "grpo:init_adapter={a}",
        "--dry-run",
    ),  # fmt: skip
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_every_entry_refuses_a_copied_adapter_on_another_family(
    entry, copied, synthetic_dir, tmp_path
):
    """Each command that loads a user's adapter refuses it before a job is queued or a folder
    claimed: the launcher's evaluate (one job, a sweep), merge, grpo --init-adapter (here and
    through the launcher) and a pipeline's grpo:init_adapter."""
    out = tmp_path / "out"
    tool, verb, *rest = ENTRIES[entry]
    data = [] if verb == "merge" else ["--set", f"data.dataset={synthetic_dir}"]
    argv = [verb, "--model", INTERNVL, *(a.format(a=copied) for a in rest), *data]
    ran = (vqa if tool == "vqa" else launch)(*argv, "--output-dir", out)
    refused(
        ran,
        f"error: adapter {copied} was trained on {QWEN} (",
        f"not on {INTERNVL} (",
        "another model (model_type qwen2_5_vl vs internvl)",
    )
    assert not out.exists()


def test_a_copied_adapter_on_other_weights_of_its_architecture_is_refused(copied, tmp_path):
    """tiny-qwen2.5-vl-studies: the same architecture and sizes, other weights. A copy of the
    base it was trained on at another path (model.path) is that base: accepted."""
    from vqa_r1.models.loading import PRETRAINED_DIR, check_adapter_base

    with pytest.raises(UserError) as caught:
        check_adapter_base(copied, _tiny("tiny-qwen2.5-vl-studies").model)
    assert str(caught.value).endswith(
        f"same architecture, other weights; use it with --model {QWEN}, or pick the adapter "
        "trained on this model"
    )
    copy = tmp_path / "my-copy"
    shutil.copytree(PRETRAINED_DIR / QWEN, copy)
    check_adapter_base(copied, _tiny(QWEN, f"model.path={copy}").model)


def test_an_adapter_without_a_record_is_checked_by_the_base_its_config_names(
    copied, synthetic_dir, tmp_path, caplog
):
    """An older adapter, or one made elsewhere (no adapter_base.json): the base folder its
    adapter_config.json names, by its config.json where it is on this machine, else by its name,
    else one line of warning (its weights are then all that is checked, when loaded)."""
    from vqa_r1.models.base_record import RECORD
    from vqa_r1.models.loading import check_adapter_base

    (copied / RECORD).unlink()
    named = json.loads((copied / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(named).name == QWEN and Path(named).is_dir()
    out = tmp_path / "out"
    argv = ["evaluate", "--model", INTERNVL, "--dataset", synthetic_dir, "--adapter", copied,
            "--limit", "2", "--output-dir", out]  # fmt: skip
    refused(
        vqa(*argv),
        f"error: adapter {copied} was made for {named} (adapter_config.json), not for {INTERNVL} (",
        f"another model (model_type qwen2_5_vl vs internvl); use it with --model {QWEN}, or ",
    )
    name_base(copied, f"/elsewhere/{QWEN}")
    refused(
        vqa(*argv),
        f"error: adapter {copied} was made for /elsewhere/{QWEN} (adapter_config.json; not on "
        f"this machine), by its name {QWEN}, not for {INTERNVL}: use it with --model {QWEN}",
    )
    assert not out.exists()

    studies = _tiny("tiny-qwen2.5-vl-studies").model
    with caplog.at_level(logging.WARNING, logger="vqa_r1.models.loading"):
        name_base(copied, named)  # its base here: the same architecture, other weights
        check_adapter_base(copied, studies)
        name_base(copied, "/elsewhere/my-model")
        check_adapter_base(copied, _tiny(INTERNVL).model)
        check_adapter_base(copied, _tiny(INTERNVL).model)  # said once
    other, absent = [r.getMessage() for r in caplog.records]
    assert other.startswith(f"adapter {copied}: made for {named} (adapter_config.json), which ")
    assert "has the architecture of tiny-qwen2.5-vl-studies (" in other and "other weights" in other
    assert absent == (
        f"adapter {copied}: its base /elsewhere/my-model (adapter_config.json) is not on this "
        f"machine and it has no adapter_base.json: it is checked against {INTERNVL} by its "
        "weights alone, when loaded"
    )


def test_the_weights_fingerprint_reads_the_headers_and_the_head_of_each_tensor(tmp_path):
    """Cheap for multi-GB weights: names, dtypes and shapes from the safetensors headers and the
    first 64 bytes of each tensor; alike across shardings, not across values there or dtypes."""
    import torch
    from safetensors.torch import save_file

    from vqa_r1.models.base_record import weights_digest

    def saved(name: str, tensors: dict, shards: int = 1) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        if shards == 1:
            save_file(tensors, str(folder / "model.safetensors"))
            return folder
        weight_map = {}
        for i, key in enumerate(sorted(tensors)):
            shard = f"model-{i + 1:05d}-of-{len(tensors):05d}.safetensors"
            save_file({key: tensors[key]}, str(folder / shard))
            weight_map[key] = shard
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        return folder

    weights = {"a.weight": torch.arange(64.0).reshape(8, 8), "b.bias": torch.ones(4)}
    digest = weights_digest(saved("one", weights))
    assert digest is not None and weights_digest(saved("sharded", weights, 2)) == digest
    tail = {**weights, "a.weight": weights["a.weight"].clone()}
    tail["a.weight"][7, 7] = -1.0  # past its first 64 bytes (16 float32 values): not read
    assert weights_digest(saved("tail", tail)) == digest
    head = {**weights, "a.weight": weights["a.weight"].clone()}
    head["a.weight"][0, 1] = -1.0
    assert weights_digest(saved("head", head)) != digest
    half = {k: v.half() for k, v in weights.items()}
    assert weights_digest(saved("half", half)) != digest
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save(weights, pickled / "pytorch_model.bin")
    assert weights_digest(pickled) is None  # no header to read: the config alone is compared
