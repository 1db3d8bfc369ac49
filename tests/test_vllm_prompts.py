"""GRPO's vLLM sees the trainer's image tokens: vLLM 0.31's own prompt processing, run on CPU on
the ids and images the trainer sends, for every family and mode (issue 33, item 1).

vLLM cannot run a model here (and its wheel pins another torch), but its processing is Python:
the wheel's Python files and the few pure dependencies its import needs are unpacked once into
pytest's cache (.pytest_cache/d/vllm-0.31.0) and run in a subprocess (tests/vllm_probe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.recipes import load_config

pytestmark = pytest.mark.index  # downloads vLLM's wheel once (320 MB)

VLLM = "vllm==0.31.0"  # the newest TRL 1.16 accepts
# what importing vLLM's processing needs beyond this venv (found by importing it), pinned as
# vLLM 0.31 pins them where it does
DEPS = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "apache-tvm-ffi==0.1.11",
    "attrs==26.1.0", "blake3==1.0.11", "cachetools==8.0.2", "cbor2==6.3.0", "fastapi==0.136.3",
    "frozenlist==1.8.0", "llguidance==1.7.6", "msgspec==0.22.0", "multidict==7.2.1",
    "openai-harmony==0.0.8", "partial-json-parser==0.2.1.1.post7", "prometheus-client==0.26.0",
    "propcache==0.5.4", "pybase64==1.5.1", "pyzmq==27.3.0", "starlette==1.10.0",
    "uvloop==0.23.0", "xgrammar==0.2.7", "yarl==1.25.1",
]  # fmt: skip
PROBE = Path(__file__).with_name("vllm_probe.py")

# name, model, image settings (overrides), mode: settings that tile where the family can
CASES = [
    ("qwen2_5_vl/colocate", "tiny-qwen2.5-vl-pretrained", [], "colocate"),
    ("qwen2_5_vl/server", "tiny-qwen2.5-vl-pretrained", [], "server"),
    ("internvl/colocate", "tiny-internvl-pretrained", ["model.image_splitting=true",
                                                       "model.max_image_tiles=6"], "colocate"),
    ("internvl/server", "tiny-internvl-pretrained", ["model.image_splitting=true",
                                                     "model.max_image_tiles=6"], "server"),
    ("smolvlm/colocate", "tiny-smolvlm-pretrained", ["model.image_splitting=true",
                                                     "model.image_longest_edge=336"], "colocate"),
    ("smolvlm/server", "tiny-smolvlm-pretrained", ["model.image_splitting=false",
                                                   "model.image_longest_edge=336"], "server"),
    ("smolvlm/server-split", "tiny-smolvlm-pretrained", ["model.image_splitting=true",
                                                         "model.image_longest_edge=336"], "server"),
    ("qwen3_vl/colocate", "tiny-qwen3-vl-pretrained", [], "colocate"),
    ("qwen3_vl/server", "tiny-qwen3-vl-pretrained", [], "server"),
]  # fmt: skip
# two images per row, each family and mode (vLLM's engine limited to them, as the suite sets it)
TWO = ["data.images_per_row=2"]
CASES += [
    (f"{family}/{mode}-2", model, [*TWO, *extra], mode)
    for family, model, extra in (
        ("qwen2_5_vl", "tiny-qwen2.5-vl-pretrained", []),
        ("qwen3_vl", "tiny-qwen3-vl-pretrained", []),
        ("internvl", "tiny-internvl-pretrained", []),
        ("smolvlm", "tiny-smolvlm-pretrained", ["model.image_splitting=false"]),
    )
    for mode in ("colocate", "server")
]
FAMILIES = ["qwen2_5_vl", "qwen3_vl", "internvl", "smolvlm"]


def _unpack_vllm(root: Path) -> Path:
    """vLLM's wheel (Python files only: its compiled ops are never loaded) and DEPS in ``root``."""
    site = root / "site"
    if (root / "complete").exists():
        return site
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    wheels = root / "wheels"
    subprocess.run([*pip, "download", "--no-deps", "-d", str(wheels), VLLM], check=True)
    (wheel,) = wheels.glob("vllm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site, [n for n in archive.namelist() if not n.endswith(".so")])
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), *DEPS], check=True)
    wheel.unlink()  # 320 MB; the unpacked files are what the probe reads
    (root / "complete").write_text(VLLM + "\n")
    return site


@pytest.fixture(scope="module")
def vllm_results(request) -> dict:
    # pytest's own cache (.pytest_cache/d/): kept across sessions, unlike the suite's test cache
    root = request.config.cache.mkdir("vllm-0.31.0")
    site = _unpack_vllm(root)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    # vLLM inspects a model class in a subprocess of its own: it needs the path too
    env["PYTHONPATH"] = os.pathsep.join([src, str(site), env.get("PYTHONPATH", "")])
    env["VLLM_CACHE_ROOT"] = str(root / "vllm-cache")
    env.setdefault("OMP_NUM_THREADS", "1")
    cases = [{"model": m, "overrides": o, "mode": mode} for _, m, o, mode in CASES]
    done = subprocess.run(
        [sys.executable, str(PROBE)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: result for (name, *_), result in zip(CASES, results, strict=True)}


@pytest.mark.parametrize("family", FAMILIES)
def test_colocate_vllm_makes_the_trainers_prompt(vllm_results, family):
    """TRL hands vLLM expanded ids, whose first image token vLLM expands again (2N-1 image
    tokens at the same settings); through the suite's wrapper vLLM rebuilds exactly the
    trainer's ids, N image tokens, N embeddings."""
    r = vllm_results[f"{family}/colocate"]
    n = r["trainer"]
    assert n > 1
    assert r["as_trl_hands_it"] == n - 1 + r["checkpoint_settings"]  # the defect, in vLLM
    assert r["vllm"] == n and r["same_ids"] and r["embeds"] == [n]


@pytest.mark.parametrize("family", FAMILIES)
def test_server_vllm_features_fill_the_trainers_image_tokens(vllm_results, family):
    """The server's features (processed with the trainer's settings) hold as many embeddings as
    the one run of image tokens TRL places them on."""
    r = vllm_results[f"{family}/server"]
    assert r["trainer"] > 1
    assert r["embeds"] == r["placed"] == [r["trainer"]]


@pytest.mark.parametrize("family", FAMILIES)
def test_two_images_reach_vllm_as_the_trainer_sent_them(vllm_results, family):
    """Two images per row: colocated, vLLM (limited to two images, no video) rebuilds exactly the
    trainer's ids, one block of embeddings per image; server mode's features fill the trainer's
    two runs of image tokens, in order."""
    r = vllm_results[f"{family}/colocate-2"]
    assert r["vllm"] == r["trainer"] and r["same_ids"] and len(r["embeds"]) == 2
    assert sum(r["embeds"]) == r["trainer"]
    s = vllm_results[f"{family}/server-2"]
    assert len(s["placed"]) == 2 and s["embeds"] == s["placed"] and sum(s["placed"]) == s["trainer"]


def test_tiling_follows_the_settings_vllm_is_handed(vllm_results):
    """InternVL and SmolVLM tile by their settings (6 tiles + a thumbnail, 6 + a global view
    here), so vLLM gets the trainer's settings rather than a resized image."""
    assert vllm_results["internvl/colocate"]["settings"] == {"crop_to_patches": True,
                                                            "max_patches": 6}  # fmt: skip
    assert vllm_results["internvl/colocate"]["trainer"] == 7 * 16
    assert vllm_results["smolvlm/colocate"]["trainer"] == 7 * 16
    for family in ("internvl", "smolvlm"):  # the tiny checkpoints' own settings: one tile
        assert vllm_results[f"{family}/colocate"]["checkpoint_settings"] == 16
    assert vllm_results["qwen2_5_vl/colocate"]["as_trl_hands_it"] == 2 * 12 - 1
    assert vllm_results["smolvlm/server"]["trainer"] == 16  # no splitting: the global view only


def test_smolvlm_splitting_in_server_mode_is_refused_at_submission(vllm_results):
    """TRL fails at step 1 on a split SmolVLM image in server mode; the config check refuses it
    first, in one line naming the keys to set."""
    assert "Found 7 runs of image tokens" in vllm_results["smolvlm/server-split"]["trl_error"]
    server = ["train.use_vllm=true", "train.vllm_mode=server"]
    for model in ("smolvlm-256m", "tiny-smolvlm-pretrained"):
        with pytest.raises(UserError) as err:
            load_config("grpo", model, overrides=server)
        message = str(err.value)
        assert "\n" not in message and "model.image_splitting=false" in message
    load_config("grpo", "smolvlm-256m", overrides=[*server, "model.image_splitting=false"])
    load_config("grpo", "smolvlm-256m", overrides=["train.use_vllm=true"])  # colocate
